"""keep_others_away on cgroup v2 (``dlvirt.system.keepaway_v2``): a cpuset partition for the
launch's CPUs. The checks, the plan, the writes that make the partition and those that undo it run
here against a made-up tree of cgroup files (the pure logic: a directory is no cgroupfs, so the
kernel's side, other processes leaving the CPUs, is not exercised); the affinity restore runs on a
real child process. A real partition: tests/integration/test_keepaway_partition.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlvirt.core.owner import process_start_time
from dlvirt.system import cgroups, keepaway, keepaway_v2


def tree(root: Path, cpus: str = "0-3", controllers: str = "cpuset cpu memory", subtree: str = "",
         children: dict[str, str] | None = None) -> Path:
    """A cgroup v2 root as files: its controllers, subtree_control, effective CPUs and memory nodes,
    and children with their cpuset.cpus."""
    root.mkdir(exist_ok=True)
    for name, text in {"cgroup.controllers": controllers, "cgroup.subtree_control": subtree,
                       "cpuset.cpus.effective": cpus, "cpuset.mems.effective": "0", "cgroup.procs": ""}.items():
        (root / name).write_text(text + "\n")
    for child, claimed in (children or {}).items():
        (root / child).mkdir()
        (root / child / "cpuset.cpus").write_text(claimed + "\n")
        (root / child / "cgroup.procs").write_text("")
    return root


def settings(**extra):
    return {"enabled": True, "min_cpus_left": 2, "scope": "/", **extra}


def test_why_not_names_each_reason(tmp_path):
    ok = tree(tmp_path / "ok", children={"system.slice": ""})
    assert keepaway_v2.why_not(ok, settings(), (2, 3), launch_in_runner=True) is None
    assert "no cpuset controller" in keepaway_v2.why_not(tree(tmp_path / "v1", controllers="cpu memory"),
                                                         settings(), (3,), True)
    assert "this platform's engine starts it" in keepaway_v2.why_not(ok, settings(), (3,), False)
    assert "only 1 CPU would remain" in keepaway_v2.why_not(ok, settings(), (1, 2, 3), True)
    assert "min_cpus_left: 3" in keepaway_v2.why_not(ok, settings(min_cpus_left=3), (2, 3), True)
    assert "are not all" in keepaway_v2.why_not(ok, settings(), (7,), True)
    claimed = tree(tmp_path / "claimed", children={"other": "2-3"})
    assert "sets cpuset.cpus 2-3" in keepaway_v2.why_not(claimed, settings(), (3,), True)
    assert "no such cgroup" in keepaway_v2.why_not(ok, settings(scope="/nowhere"), (3,), True)


def test_the_partition_is_made_step_by_step_and_undone(tmp_path):
    root = tree(tmp_path / "cg", subtree="memory")
    (root / "user.slice").mkdir()
    (root / "user.slice" / "cgroup.procs").write_text("")
    state = keepaway_v2.plan(root, settings(), (3,), "123-456", os.getpid())
    partition = root / "dlvirt-bench-123-456"
    assert state["partition"] == str(partition) and state["runner"]["pid"] == os.getpid()
    assert state["runner"]["cgroup"] == cgroups.own_path(None)
    path = tmp_path / "state.json"
    keepaway_v2.apply(state, {}, path)
    # cpuset enabled where it was not (and recorded), the launch's CPUs, the parent's nodes, a root partition,
    # and the runner in its leaf
    assert (root / "cgroup.subtree_control").read_text() == "+cpuset\n" and state["enabled_cpuset_in"] == str(root)
    assert (partition / "cpuset.cpus").read_text() == "3\n" and (partition / "cpuset.mems").read_text() == "0\n"
    assert (partition / "cpuset.cpus.partition").read_text() == "root\n"
    assert (partition / "runner" / "cgroup.procs").read_text() == f"{os.getpid()}\n"
    assert path.exists()
    # undone: a member again, the runner written back to its own group, cpuset disabled where it was enabled
    origin = root / cgroups.own_path(None).lstrip("/")
    origin.mkdir(parents=True, exist_ok=True)
    undone = keepaway_v2.restore(state)
    assert (partition / "cpuset.cpus.partition").read_text() == "member\n"
    assert (origin / "cgroup.procs").read_text() == f"{os.getpid()}\n" and undone["moved_back"] >= 1
    assert (root / "cgroup.subtree_control").read_text() == "-cpuset\n"
    # a made-up directory keeps its files, so it is not removed: what cgroupfs would allow
    assert all("not removed" in p for p in undone["problems"])


def test_each_saved_thread_gets_its_affinity_back(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.2)
        saved = {str(child.pid): {"start": process_start_time(child.pid), "comm": "python",
                                  "threads": {str(child.pid): [process_start_time(child.pid), cpus]}}}
        os.sched_setaffinity(child.pid, cpus[:1])  # what a partition's CPUs leaving would do
        undone = keepaway_v2.restore({"root": str(tmp_path), "partition": str(tmp_path / "none"), "made": False,
                                      "saved": saved})
        assert sorted(os.sched_getaffinity(child.pid)) == cpus and undone["affinities_restored"] == 1
        assert undone["problems"] == [] and not undone["busy"]
    finally:
        child.kill()
        child.wait()


def test_the_interface_refuses_a_platform_whose_engine_starts_the_launch(monkeypatch, tmp_path):
    """keepaway.others_away picks the v2 implementation on a v2 host and says why it cannot (here a
    made-up root whose engine-started launch would lose the CPUs)."""
    root = tree(tmp_path / "cg")
    monkeypatch.setattr(cgroups, "v2_root", lambda: root)
    said: list[str] = []
    with keepaway.others_away(settings(), (3,), False, said.append, launch_in_runner=False) as record:
        assert record is not None and not record["done"] and "this platform's engine starts it" in record["why"]
    assert said == [f"keep_others_away: not done: {record['why']}"]

