"""The host's benchmark lock (dlvirt.system.benchlock): two studies on one host take turns, a waiting
launch says whom it waits for, and a killed holder's lock is free again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from conftest import REPO, noop_job_spec
from dlvirt.system import benchlock, cgroups

HOLD = """
import sys, time
from pathlib import Path
from dlvirt.system import benchlock
with benchlock.held("BM/1/PIN/CPU", Path(sys.argv[2]), print, directory=Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(600)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO / "src")}


def test_a_waiting_launch_names_the_holder_and_gets_the_lock_once_it_is_killed(tmp_path):
    directory = tmp_path / "bench"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(directory), "/studies/first"], env=_env(),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        said: list[str] = []
        got: list[dict] = []

        def wait() -> None:
            with benchlock.held("CN/1/PIN/CPU", Path("/studies/second"), said.append, directory=directory) as lock:
                got.append(lock)

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(1.0)
        assert not got and len(said) == 1
        assert "BM/1/PIN/CPU of the study in /studies/first" in said[0] and f"pid {holder.pid}" in said[0]
        os.kill(holder.pid, signal.SIGKILL)  # the kernel releases the flock with the process
        waiter.join(timeout=5)
        assert got and got[0]["waited_s"] >= 1.0 and got[0]["waited_for"] == [said[0].split("held by ")[1]]
        assert not (directory / benchlock.HOLDER).exists()  # the second holder left nothing behind
    finally:
        holder.kill()
        holder.wait()


def _launch_span(record: dict) -> tuple[datetime, datetime]:
    reps = record["warmups"] + record["runs"]
    return (min(datetime.fromisoformat(r["started_utc"]) for r in reps),
            max(datetime.fromisoformat(r["finished_utc"]) for r in reps))


@pytest.mark.skipif(cgroups.version() is None, reason="BM launches need a cgroup controller")
def test_two_studies_started_at_once_never_launch_at_the_same_time(tmp_path, noop_dataset):
    """Two noop studies in two directories, started at once, each two launches one after the other
    (as each one's Snakemake would): no launch of one overlaps a launch of the other."""
    studies = [tmp_path / "first", tmp_path / "second"]
    script = ("import json, subprocess, sys\n"
              "for replicate, spec in enumerate(json.loads(sys.argv[1]), 1):\n"
              "    subprocess.run([sys.executable, '-m', 'dlvirt', 'bench', '--spec', json.dumps(spec), '--output',\n"
              "                    f'results/runs/{replicate}.json', '--loadgen-dir', f'results/lg/{replicate}'],\n"
              "                   check=True)\n")
    specs = json.dumps([noop_job_spec(noop_dataset, None, replicate=r) for r in (1, 2)])
    procs = []
    for study in studies:
        study.mkdir()
        procs.append(subprocess.Popen([sys.executable, "-c", script, specs], cwd=study, env=_env(),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [proc.communicate(timeout=600)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    records = {study: [json.loads((study / f"results/runs/{r}.json").read_text()) for r in (1, 2)]
               for study in studies}
    spans = {study: [_launch_span(record) for record in recs] for study, recs in records.items()}
    for mine in spans[studies[0]]:
        for theirs in spans[studies[1]]:
            assert mine[1] <= theirs[0] or theirs[1] <= mine[0], (mine, theirs)
    waits = [record["bench_lock"] for recs in records.values() for record in recs if record["bench_lock"]["waited_for"]]
    assert waits, "two studies started at once: one launch waited for the other"
    assert any(str(study) in line for lock in waits for line in lock["waited_for"] for study in studies), waits
    assert any("waiting for the host's benchmark lock" in out for out in outputs)

