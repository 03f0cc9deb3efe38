"""CN's runner stops on Ctrl-C at every point of a job's life, fast, against a stand-in Docker
engine (tests/fake_docker.py): the runner, the Docker SDK and the signal handling are the real ones,
only no container runs, so the race that lost Ctrl-C (two signals at once, the first taken off the
queue by a thread that is not the main one) is tried several times in seconds. The same cases
against the real engine: tests/integration/test_platform_cn.py (slow)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

import fake_docker
from conftest import IC_SETTINGS, REPO, ic_job_spec

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
    bench = subprocess.Popen([sys.executable, "-m", "dlvirt", "bench", "--spec", json.dumps(job.to_dict()),
                              "--output", str(tmp_path / "r.json"), "--loadgen-dir", str(tmp_path / "lg")],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env={**os.environ, "PYTHONPATH": SRC, "PYTHONFAULTHANDLER": "1"},
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    reached = threading.Event()
    lines: list[str] = []

    def read() -> None:
        assert bench.stdout is not None
        for line in bench.stdout:
            lines.append(line)
            if re.search(POINTS[point], line):
                reached.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert reached.wait(timeout=60), f"the job never got {point}:\n{''.join(lines[-20:])}"
        signalled = time.monotonic()
        for number in signals:
            bench.send_signal(number)
        try:
            returncode = bench.wait(timeout=10)
        except subprocess.TimeoutExpired:
            bench.send_signal(signal.SIGABRT)  # faulthandler: every thread's stack into the output
            bench.wait(timeout=10)
            reader.join(timeout=5)
            pytest.fail(f"the runner still ran 10 s after {point}:\n{''.join(lines[-80:])}")
        took = time.monotonic() - signalled
    finally:
        bench.kill()
        bench.wait()
        reader.join(timeout=5)
        engine.shutdown()
        engine.server_close()
    assert returncode != 0
    assert took < 5, f"{took:.1f} s to stop after {point}"
    assert not (tmp_path / "r.json").exists() and not list(tmp_path.glob(".work-*"))
    assert engine.engine.containers == {}, engine.engine.events
