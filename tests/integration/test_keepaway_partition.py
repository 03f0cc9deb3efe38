"""keep_others_away on a real cgroup v2 cpuset partition (``dlvirt.system.keepaway_v2``): another
process leaves the launch's CPU while the partition stands and has its affinity back afterwards. Skips,
saying why, on a host without a cgroup v2 root offering cpuset (a cgroup v1 host: the logic's own
tests are tests/unit/test_keepaway_v2.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlvirt.system import cgroups, keepaway

V2 = cgroups.v2_root()


@pytest.mark.skipif(V2 is None or "cpuset" not in (V2 / "cgroup.controllers").read_text().split(),
                    reason="a real cpuset partition needs a cgroup v2 root with the cpuset controller (this host "
                           "is cgroup v1, or its v2 tree has no cpuset)")
def test_a_real_partition_moves_others_off_and_back():
    cpus = sorted(os.sched_getaffinity(0))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        before = sorted(os.sched_getaffinity(other.pid))
        said: list[str] = []
        asked = {"enabled": True, "min_cpus_left": 1, "scope": "/"}
        with keepaway.others_away(asked, (cpus[-1],), False, said.append) as record:
            assert record is not None
            if not record["done"]:
                pytest.skip(f"keep_others_away on this v2 host: {record['why']}")
            assert cpus[-1] not in os.sched_getaffinity(other.pid)
        keepaway.settle(record, said.append)
        assert sorted(os.sched_getaffinity(other.pid)) == before and not Path(record["partition"]).exists()
    finally:
        other.kill()
        other.wait()
