"""What the full and gpu guest images install: the packages a job imports, at the lock's versions."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO
from dlvirt.platforms import guestimage

ENVS = REPO / "envs"


def pinned(lock: Path) -> set[str]:
    return {guestimage._distribution(line.split("==")[0]) for line in lock.read_text().splitlines()
            if line and not line.startswith("#")}


@pytest.mark.parametrize(("lock", "tensorflow"), [("requirements.txt", "tensorflow-cpu"),
                                                  ("requirements-gpu.txt", "tensorflow[and-cuda]")])
def test_guest_images_get_the_job_packages_of_their_stack_and_no_host_tools(lock, tensorflow):
    wanted = guestimage.job_requirements(ENVS / lock)
    assert tensorflow in wanted and "torch" in wanted and "mlcommons-loadgen" in wanted
    names = {guestimage._distribution(w.split("[")[0]) for w in wanted}
    assert names <= pinned(ENVS / lock)  # every one is in the lock that pins its version
    assert not names & {"snakemake", "pandas", "matplotlib", "pytest", "mypy", "ruff", "snakefmt", "docker",
                        "libvirt-python", "papermill", "ipykernel"}
    assert ("nvidia-ml-py" in names) == (lock == "requirements-gpu.txt")


def test_a_lock_without_its_top_level_requirements_is_refused(tmp_path):
    (tmp_path / "requirements.txt").write_text("numpy==2.0\n")
    with pytest.raises(guestimage.ImageError, match="requirements.in: missing"):
        guestimage.job_requirements(tmp_path / "requirements.txt")
