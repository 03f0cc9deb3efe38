"""SCN (gVisor's runsc) and the OCI runtime as a setting, against dlvirt's own dockerd: what the
sandbox gives the harness seen from inside and from the host, a CN row on crun from a config line,
and nothing left (container, sandbox process, cgroup) after Ctrl-C and SIGKILL.

The engine must know the runtimes: dlvirt's dockerd registers the installed ones when it starts,
so a dockerd started before runsc (or crun) was installed skips these tests with that reason.
``DLVIRT_TEST_DATA_ROOT`` gives the session a dockerd of its own (one per data root)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pandas as pd
import pytest

from conftest import IC_SETTINGS, copy_workflow, ic_job_spec, smoke_config, snakemake, write_config
from dlvirt.apps.ic import ImageClassification
from dlvirt.platforms import container_image
from dlvirt.platforms.cn import Container, runtime_binary, runtime_problem
from dlvirt.platforms.scn import GVISOR_RELEASE, SandboxedContainer
from dlvirt.run.cleanup import remove_stale_containers, remove_stale_work_dirs
from dlvirt.run.runner import run_job
from dlvirt.system import docker_engine, engines

pytestmark = pytest.mark.slow

DATA_ROOT = os.environ.get("DLVIRT_TEST_DATA_ROOT", docker_engine.DEFAULT_DATA_ROOT)
SETTINGS = {"memory_mib": 4096, "gpus": "all", "debian_mirror": None, "image": None,
            "engine": {"host": None, "data_root": DATA_ROOT}}
# what the fixture's dockerd registers: SCN's runsc and, for the crun row, CN on crun
PLATFORMS = {"CN": {**SETTINGS, "runtime": "crun"}, "SCN": {}}


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    if runtime_binary("runsc") is None:
        pytest.skip("runsc is not installed (./setup.sh install; Debian: runsc)")
    if docker_engine.configured_url(SETTINGS) is None and not docker_engine.answers(docker_engine.DEFAULT_URL) \
            and (docker_engine.dockerd_binary() is None or os.geteuid() != 0):
        pytest.skip("no Docker engine answers and dlvirt cannot start dockerd here (root, docker.io)")
    daemons = Container.daemons(PLATFORMS)
    for daemon in daemons:
        engines.acquire(daemon, os.getpid())
    client = docker_engine.connect(SETTINGS, "platforms.CN")
    try:
        if SandboxedContainer.runtime_name({}) not in client.info()["Runtimes"]:
            pytest.skip(f"the Docker engine at {docker_engine.engine_url(SETTINGS)} started without runsc "
                        "(set DLVIRT_TEST_DATA_ROOT for a dockerd of this session's own)")
        yield client
    finally:
        client.close()
        for daemon in daemons:
            engines.release(daemon.name, os.getpid())


@pytest.fixture(scope="module")
def image(engine, tmp_path_factory) -> str:
    checkout = copy_workflow(tmp_path_factory.mktemp("scn") / "wf")
    info = container_image.ensure(checkout, SETTINGS, tmp_path_factory.mktemp("images") / "cn.json")
    return str(info["image"])


@pytest.fixture(scope="module")
def ic_dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ic-scn")
    out.chmod(0o755)
    ImageClassification.prepare_dataset(out, IC_SETTINGS)
    return out


# IC on PyTorch: on some CPUs (a 2-core AMD EPYC guest) TensorFlow's oneDNN kernels die with SIGFPE
# under runsc, which SCN's error names (SandboxedContainer.exit_hint); these tests are about the platform
IC_ON_PYTORCH = {**IC_SETTINGS, "framework": "pytorch"}


def spec(dataset: Path, image: str, pinning: str, platform: str = "SCN", settings: dict | None = None, **extra):
    return ic_job_spec(dataset, 1, pinning, platform_settings={**SETTINGS, **(settings or {}), "image": image},
                       scenario={"platform": platform, "cores": 1, "pinning": pinning, "processor": "CPU"},
                       app_settings=IC_ON_PYTORCH, **extra)


def leftovers(client: docker.DockerClient, runner: int | None = None) -> list[str]:
    """dlvirt's containers of ``runner``'s jobs (default: this process), and runsc sandbox or gofer
    processes of this engine that serve no container of it."""
    prefix = f"{runner or os.getpid()}-"
    found = [c.name for c in docker_engine.labelled_containers(client)
             if c.labels[docker_engine.LABEL_RUN].startswith(prefix)]
    live = {c.id for c in client.containers.list(all=True)}
    exec_root = str(engines.RUN_ROOT / docker_engine.daemon_name(SETTINGS) / "exec")
    processes = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    for line in processes.splitlines():
        if re.search(r"runsc-(sandbox|gofer)", line) and exec_root in line:
            ids = set(re.findall(r"[0-9a-f]{64}", line))
            if not ids & live:
                found.append(line.strip()[:120])
    return found


def test_scn_vanilla_runs_on_gvisors_kernel_with_its_quota_on_the_host(engine, image, ic_dataset, tmp_path):
    result = run_job(spec(ic_dataset, image, "VNL"), tmp_path / "r.json", tmp_path / "lg")
    observed = result.runs[0].observed
    assert observed["kernel"] == GVISOR_RELEASE != os.uname().release  # gVisor's kernel, not the host's
    assert observed["boot_id"] is None  # the Sentry has no boot id; a runc container shows the host's
    assert observed["nproc"] == len(os.sched_getaffinity(0)) and observed["quota_cores"] is None
    assert observed["mem_total_bytes"] == 4 << 30  # gVisor's RAM is the container's memory limit
    assert observed["privileges"]["no_new_privs"] == 1 and observed["privileges"]["uid"] == 65534
    platform = result.platform
    assert platform["runtime"] == "runsc-ptrace" and platform["runsc_platform"] == "ptrace"
    assert platform["sandbox_cgroup"] == {"quota_cores": 1.0, "cpus": list(range(os.cpu_count() or 0)), "read": True}
    assert platform["network"] == "none" and platform["confinement"]["read_only"]
    assert json.loads((tmp_path / "r.json").read_text())["verified"] is True
    assert leftovers(engine) == []


def test_scn_pinned_sees_its_cores_numbered_from_zero_and_the_host_cpuset(engine, image, ic_dataset, tmp_path):
    result = run_job(spec(ic_dataset, image, "PIN"), tmp_path / "r.json", tmp_path / "lg")
    observed = result.runs[0].observed
    assert observed["affinity"] == [0] and observed["cpu_count"] == 1
    assert result.platform["sandbox_cgroup"]["cpus"] == result.platform["cpus"] == sorted(os.sched_getaffinity(0))[:1]
    assert result.platform["sandbox_cgroup"]["quota_cores"] is None
    assert leftovers(engine) == []


def test_a_cn_row_runs_on_crun_from_one_config_line(engine, image, ic_dataset, tmp_path):
    if "crun" not in engine.info()["Runtimes"]:
        pytest.skip("crun is not installed or this dockerd started without it (./setup.sh test installs it)")
    if why := runtime_problem("crun", SETTINGS):
        pytest.skip(why)  # what the plan leaves CN on crun out with here
    result = run_job(spec(ic_dataset, image, "VNL", "CN", {"runtime": "crun"}), tmp_path / "r.json", tmp_path / "lg")
    assert result.platform["runtime"] == "crun" and result.platform["runtime_path"] == runtime_binary("crun")
    assert result.runs[0].observed["quota_cores"] == pytest.approx(1.0)  # crun's cgroup, seen from inside
    assert leftovers(engine) == []


def bench(job, tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "dlvirt", "bench", "--spec", json.dumps(job.to_dict()),
                             "--output", str(tmp_path / "r.json"), "--loadgen-dir", str(tmp_path / "lg")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def wait_for_repetition(proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if re.search(r"\[harness\] .* (warm-up|rep) 0:", line):
            return lines
    pytest.fail("the sandboxed job never reached a repetition:\n" + "".join(lines[-20:]))


@pytest.mark.parametrize("how", ["ctrl-c", "sigkill"])
def test_a_stopped_sandboxed_launch_leaves_no_container_sandbox_or_cgroup(engine, image, ic_dataset, tmp_path, how):
    proc = bench(spec(ic_dataset, image, "PIN", repetitions=200), tmp_path)
    wait_for_repetition(proc)
    (container,) = [c for c in docker_engine.labelled_containers(engine)
                    if c.labels[docker_engine.LABEL_RUN].startswith(f"{proc.pid}-")]
    cgroup = Path("/sys/fs/cgroup/cpuset/docker") / container.id
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) != 0
    else:  # the runner dies at once: the container runs on until the next cleanup removes it
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert leftovers(engine, proc.pid) != []
        removed = list(remove_stale_containers(SETTINGS))
        assert any(container.name in line for line in removed), removed
        # and its launch's folder, as the next workflow start's cleanup does
        assert any(".work-" in line for line in remove_stale_work_dirs([tmp_path]))
    assert proc.stdout is not None
    proc.stdout.close()
    deadline = time.monotonic() + 30
    while (leftovers(engine, proc.pid) or cgroup.exists()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert leftovers(engine, proc.pid) == [] and not cgroup.exists()
    assert not (tmp_path / "r.json").exists() and not list(tmp_path.glob(".work-*"))


def test_the_smoke_studys_scn_rows_run_through_the_workflow(engine, image, tmp_path):
    """The workflow hands SCN the CN image and engine: smoke.yaml's SCN rows (IC, MLPerf, to keep
    the suite short: the other apps run the same image the same way), verified, in the summary with
    their phases per launch."""
    workdir = copy_workflow(tmp_path / "wf")
    base = smoke_config(sandboxed=True)
    matrix = [block for block in base["study"]["matrix"] if block["platforms"] == ["SCN"]]
    config = write_config(workdir / "smoke.yaml", smoke_config(
        sandboxed=True, study={**base["study"], "apps": ["ic"], "tools": ["mlperf"], "matrix": matrix},
        apps={**base["apps"], "ic": {**base["apps"]["ic"], "framework": "pytorch"}},
        platforms={"CN": {"engine": {"data_root": DATA_ROOT}}}))
    snakemake(workdir, "results/summary/mlperf/ic.csv", "--configfile", str(config))
    summary = pd.read_csv(workdir / "results" / "summary" / "mlperf" / "ic.csv")
    assert sorted(summary.scenario) == ["SCN/1/PIN/CPU", "SCN/1/VNL/CPU"]
    assert summary.round_pre_s.notna().all() and summary.round_infer_s.notna().all()
    for path in (workdir / "results" / "runs").rglob("*.json"):
        result = json.loads(path.read_text())
        assert result["verified"] and result["platform"]["runtime"] == "runsc-ptrace", path
        assert result["platform"]["image"] == image and result["runs"][0]["observed"]["kernel"] == GVISOR_RELEASE
    assert leftovers(engine) == []
