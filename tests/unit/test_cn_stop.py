"""CN's runner stops on Ctrl-C at every point of a job's life, fast, against a stand-in Docker
engine (tests/fake_docker.py): the runner, the Docker SDK and the signal handling are the real ones,
only no container runs, so the race that lost Ctrl-C (two signals at once, the first taken off the
queue by a thread that is not the main one) is tried several times in seconds. The same cases
against the real engine: tests/integration/test_platform_cn.py (slow)."""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest

import fake_docker
from conftest import IC_SETTINGS, REPO, ic_job_spec, interrupt_at

SRC = str(REPO / "src")
POINTS = {
    "before the container exists": r"\[dlvirt\] CN/\S+ job \S+: provisioning",
    "while the container starts": r"\[dlvirt\] container dlvirt-\S+ created",
    "during a repetition": r"\[harness\] .* rep 0:",
}
CTRL_C = (signal.SIGINT, signal.SIGTERM)  # the terminal's SIGINT and the SIGTERM dlvirt.run.interrupt forwards


@pytest.mark.parametrize(("point", "signals"), [
    *((point, CTRL_C) for point in POINTS),
    *(("during a repetition", CTRL_C) for _ in range(3)),  # the race that hung about every other time
    ("during a repetition", (signal.SIGINT,)),
    ("during a repetition", (signal.SIGTERM,)),
])
def test_ctrl_c_stops_the_cn_runner_at_once_and_removes_its_container(tmp_path, point, signals):
    engine = fake_docker.serve(tmp_path / "docker.sock", create_delay_s=0.3)  # a create call to land in
    dataset = tmp_path / "ds"
    dataset.mkdir(mode=0o755)
    job = ic_job_spec(dataset, 1, "PIN", repetitions=200, platform_settings={
        "memory_mib": 1024, "image": "dlvirt-cn:fake", "engine": {"host": f"unix://{tmp_path / 'docker.sock'}"}},
        scenario={"platform": "CN", "cores": 1, "pinning": "PIN", "processor": "CPU"})
    assert job.app_settings == IC_SETTINGS
    try:
        bench = interrupt_at([sys.executable, "-m", "dlvirt", "bench", "--spec", json.dumps(job.to_dict()),
                              "--output", str(tmp_path / "r.json"), "--loadgen-dir", str(tmp_path / "lg")],
                             point, POINTS[point], signals, reach_s=60, stop_s=10,
                             env={**os.environ, "PYTHONPATH": SRC, "PYTHONFAULTHANDLER": "1"}, what="the runner")
    finally:
        engine.shutdown()
        engine.server_close()
    returncode, took = bench.returncode, bench.took_s
    assert returncode != 0
    assert took < 5, f"{took:.1f} s to stop after {point}"
    assert not (tmp_path / "r.json").exists() and not list(tmp_path.glob(".work-*"))
    assert engine.engine.containers == {}, engine.engine.events
