"""Two studies on one host through Snakemake: two checkouts, started at once, take turns launch by
launch through the host's benchmark lock (dlvirt.system.benchlock)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime

import pytest

from conftest import copy_workflow, smoke_config, stop_group, tool_env, write_config
from dlvirt.system import cgroups

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(cgroups.version() is None, reason="BM launches need a cgroup controller")]


def test_two_noop_studies_started_at_once_never_launch_at_the_same_time(tmp_path):
    config = smoke_config()
    config["study"].update(apps=["noop"], tools=["mlperf"], replicates=2, matrix=[
        {"platforms": ["BM"], "cores": [1], "pinning": ["PIN", "VNL"], "processors": ["CPU"]}])
    # launches of several seconds each, so that the two studies' launches contend for the lock whatever
    # their set-up jobs (host facts, datasets, weights builds, which hold the lock too) took (4096
    # samples were too quick on a 2-core EPYC: no launch waited)
    config["study"]["repetitions"] = 4
    config["apps"] = {"noop": {"dataset": {"count": 32768, "features": 16},
                               "loadgen": {"min_query_count": 32768, "min_duration_ms": 0}}}
    studies = [copy_workflow(tmp_path / name) for name in ("first", "second")]
    children = []
    for study in studies:
        path = write_config(study / "noop.yaml", config)
        children.append(subprocess.Popen(
            [sys.executable, "-m", "snakemake", "--cores", "1", "results/summary.csv", "--configfile", str(path)],
            cwd=study, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=tool_env(),
            start_new_session=True))
    try:
        outputs = [child.communicate(timeout=1200)[0] for child in children]
    finally:
        for child in children:
            stop_group(child)
    assert [child.returncode for child in children] == [0, 0], [out[-4000:] for out in outputs]
    launches = {}
    for study in studies:
        records = [json.loads(p.read_text()) for p in sorted((study / "results" / "runs").rglob("*.json"))]
        assert len(records) == 4
        launches[study] = [(min(datetime.fromisoformat(r["started_utc"]) for r in rec["warmups"] + rec["runs"]),
                            max(datetime.fromisoformat(r["finished_utc"]) for r in rec["warmups"] + rec["runs"]),
                            rec["bench_lock"]) for rec in records]
    for start, end, _ in launches[studies[0]]:
        for other_start, other_end, _ in launches[studies[1]]:
            assert end <= other_start or other_end <= start
    waited = [line for spans in launches.values() for *_, lock in spans for line in lock["waited_for"]]
    assert any(str(study) in line for line in waited for study in studies), waited
