"""keep_others_away (dlvirt.system.keepaway) with real processes: kept off the launch's CPUs while it
runs, and back in their cpuset groups with every thread's affinity after success, failure and
Ctrl-C. The moves are scoped to a cpuset group this test makes and fills with its own processes
(``keep_others_away.scope``): nothing else on the host is touched."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import REPO, interrupt_at, noop_job_spec
from dlvirt.cli import main
from dlvirt.system import cgroups, keepaway

HIERARCHY = cgroups.v1_dir("cpuset")
pytestmark = pytest.mark.skipif(
    cgroups.version() != 1 or HIERARCHY is None or not os.access(HIERARCHY / "cgroup.procs", os.W_OK)
    or len(os.sched_getaffinity(0)) < 2,
    reason="needs a writable cgroup v1 cpuset hierarchy and two CPUs")

# A process with two threads: the main one on the CPUs given (argv[1]), a second one on its own (argv[2]).
OTHER = """
import os, sys, threading, time
os.sched_setaffinity(0, [int(c) for c in sys.argv[1].split(",")])
def second():
    os.sched_setaffinity(0, [int(c) for c in sys.argv[2].split(",")])
    time.sleep(600)
threading.Thread(target=second, daemon=True).start()
time.sleep(0.3)
print("ready", flush=True)
time.sleep(600)
"""


def _placement(pid: int) -> tuple[str, dict[int, list[int]]]:
    """The cpuset group ``pid`` is in and each of its threads' affinity."""
    group = next(line.split(":", 2)[2] for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                 if "cpuset" in line.split(":")[1].split(","))
    return group, {int(t): sorted(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{pid}/task")}


@pytest.fixture
def others() -> Iterator[tuple[str, list[int]]]:
    """A cpuset group of this test's own (all CPUs), a child of it holding only CPU 1, and processes
    in both: (the group's path in the hierarchy, the processes)."""
    assert HIERARCHY is not None
    cpus = sorted(os.sched_getaffinity(0))[:2]
    group = HIERARCHY / f"dlvirt-keepaway-test-{os.getpid()}"
    pinned = group / "pinned"
    made = []
    procs: list[int] = []
    try:
        for directory, cpu_list in ((group, f"{cpus[0]},{cpus[1]}"), (pinned, str(cpus[1]))):
            directory.mkdir()
            made.append(directory)
            (directory / "cpuset.mems").write_text((HIERARCHY / "cpuset.mems").read_text())
            (directory / "cpuset.cpus").write_text(cpu_list)
        # on both CPUs; main on the launch's CPU with a second thread on both; main on the other CPU
        for where, main_cpus, second_cpus in ((group, cpus, cpus), (group, cpus[1:], cpus), (group, cpus[:1], cpus),
                                              (pinned, cpus[1:], cpus[1:])):
            # started through a shell that leaves at once: not this process's descendant, which a
            # runner never moves (what it starts is the platform's)
            shell = subprocess.Popen(["sh", "-c", '"$0" -c "$1" "$2" "$3" & echo $!', sys.executable, OTHER,
                                      ",".join(map(str, main_cpus)), ",".join(map(str, second_cpus))],
                                     stdout=subprocess.PIPE, text=True)
            assert shell.stdout is not None
            procs.append(int(shell.stdout.readline()))
            (where / "cgroup.procs").write_text(f"{procs[-1]}\n")
            assert shell.stdout.readline().strip() == "ready"
            shell.wait()
        yield "/" + group.name, procs
    finally:
        for pid in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for directory in reversed(made):
            for child in directory.glob("dlvirt-away-*"):  # only if a test failed before its restore
                with contextlib.suppress(OSError):
                    child.rmdir()
            for _ in range(50):
                try:
                    directory.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def _settings(scope: str) -> dict:
    return {"enabled": True, "min_cpus_left": 1, "scope": scope}


def test_others_are_kept_off_the_launchs_cpus_and_put_back_after_success_and_failure(others):
    scope, pids = others
    launch_cpu = sorted(os.sched_getaffinity(0))[1]
    before = {pid: _placement(pid) for pid in pids}
    for outcome in ("success", "failure"):
        said: list[str] = []
        with contextlib.suppress(RuntimeError), \
                keepaway.others_away(_settings(scope), (launch_cpu,), False, said.append) as record:
            assert record is not None and record["done"], said
            assert sorted(record["moved"].get(scope, [])) == sorted(pids[:3]), (record, said)
            assert [(left["pid"], left["cgroup"]) for left in record["left"]] == [(pids[3], f"{scope}/pinned")]
            for pid in pids[:3]:
                group, threads = _placement(pid)
                assert group.startswith(f"{scope}/dlvirt-away-")
                assert all(launch_cpu not in mask for mask in threads.values()), (pid, threads)
            assert _placement(pids[3]) == before[pids[3]]
            if outcome == "failure":
                raise RuntimeError("the launch failed")
        assert record["restored"]["problems"] == [] and record["restored"]["moved_back"] == 3
        assert {pid: _placement(pid) for pid in pids} == before, outcome
        assert not list((HIERARCHY / scope.lstrip("/")).glob("dlvirt-away-*"))
        assert not list(keepaway.STATE_DIR.glob(f"{os.getpid()}-*.json"))


def test_not_done_is_said_once_with_the_reason():
    said: list[str] = []
    with keepaway.others_away({"enabled": True, "min_cpus_left": 2, "scope": "/"}, (0,), False, said.append) as record:
        assert record == {"done": False, "why": said[0].split("not done: ")[1]}
    assert len(said) == 1 and "would remain for everything else" in said[0]
    with keepaway.others_away({"enabled": True}, None, False, said.append) as record:
        assert record is not None and "not pinned" in record["why"]
    with keepaway.others_away({"enabled": False}, (0,), False, said.append) as record:
        assert record is None


def test_a_launch_through_the_runner_records_and_restores_and_so_does_ctrl_c(others, tmp_path, noop_dataset):
    """A BM/1/PIN noop launch with keep_others_away: its run record says what moved and that it went
    back; then the same launch stopped with Ctrl-C once others are away: all back as before."""
    scope, pids = others
    before = {pid: _placement(pid) for pid in pids}
    spec = json.dumps(noop_job_spec(noop_dataset, None, keep_others_away=_settings(scope)))
    run = tmp_path / "run.json"
    assert main(["bench", "--spec", spec, "--output", str(run), "--loadgen-dir", str(tmp_path / "lg")]) == 0
    kept = json.loads(run.read_text())["others_kept_away"]
    assert kept["done"] and kept["restored"]["problems"] == [] and kept["launch_cpus"] == json.loads(
        run.read_text())["placement"]["cpus"]
    assert {pid: _placement(pid) for pid in pids} == before
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    stopped = interrupt_at([sys.executable, "-m", "dlvirt", "bench", "--spec", spec, "--output",
                            str(tmp_path / "stopped.json"), "--loadgen-dir", str(tmp_path / "lg2")],
                           "others kept away", r"keep_others_away: moved", (signal.SIGINT,),
                           reach_s=120, stop_s=60, env=env)
    assert stopped.returncode != 0 and not (tmp_path / "stopped.json").exists()
    assert {pid: _placement(pid) for pid in pids} == before, "".join(stopped.lines[-20:])
    assert not list((HIERARCHY / scope.lstrip("/")).glob("dlvirt-away-*"))


def test_what_a_killed_runner_kept_away_is_put_back_by_the_next_cleanup(others):
    scope, pids = others
    before = {pid: _placement(pid) for pid in pids}
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom dlvirt.system import keepaway\n"
         "with keepaway.others_away({'enabled': True, 'min_cpus_left': 1, 'scope': sys.argv[1]}, (int(sys.argv[2]),), "
         "False, print):\n    print('away', flush=True)\n    time.sleep(600)\n",
         scope, str(sorted(os.sched_getaffinity(0))[1])],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    try:
        assert holder.stdout is not None
        assert any(line.strip() == "away" for line in iter(holder.stdout.readline, ""))
        assert _placement(pids[0]) != before[pids[0]]
        holder.kill()  # SIGKILL: no finally runs
        holder.wait()
        said = list(keepaway.restore_stale())
        assert len(said) == 1 and said[0].startswith("put back 3 processes") and "0 problems" in said[0]
        assert {pid: _placement(pid) for pid in pids} == before
        assert not list((HIERARCHY / scope.lstrip("/")).glob("dlvirt-away-*"))
    finally:
        holder.kill()
        holder.wait()
