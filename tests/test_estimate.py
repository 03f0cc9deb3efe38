"""plan --estimate: machine time projected from run records (hand-made here; any real ones work)."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from pathlib import Path

import pytest

from conftest import REPO
from dlvirt.cli import main
from dlvirt.core.records import JobResult
from dlvirt.core.scenario import Scenario

RECORDED = JobResult.read(Path(__file__).parent / "fixtures" / "runs" / "mlperf-ic-BM-1-VNL-CPU.json")


def record(path: Path, scenario: str, e2e: list[float], samples: int, tool: str = "mlperf", app: str = "ic") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    runs = [dataclasses.replace(RECORDED.runs[0], e2e_s=v, samples=samples) for v in e2e]
    # a launch in its place (results/runs/<tool>/<app>/<scenario>/<replicate>.json), with its own run id
    launch = dataclasses.replace(RECORDED, tool=tool, app=app, model_load_s=2.0, platform={"boot_s": None},
                                 scenario=Scenario.parse(scenario), scenario_name=scenario, runs=runs,
                                 replicate=int(path.stem), run_id=f"{tool}-{app}-{scenario}-{path.stem}")
    path.write_text(json.dumps(launch.to_dict()))


def test_estimate_of_the_paper_matrix_from_this_hosts_runs(tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    record(runs / "mlperf/ic/BM/2/PIN/CPU/1.json", "BM/2/PIN/CPU", [10.0, 10.2, 9.9], samples=250)
    record(runs / "mlperf/ic/BM/2/PIN/CPU/2.json", "BM/2/PIN/CPU", [10.1, 10.0, 10.3], samples=250)
    monkeypatch.chdir(REPO)
    assert main(["plan", "--estimate", "config/paper.yaml", "--config", "host_check=false", "--runs", str(runs)]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[2]: line for line in out.splitlines() if line.startswith("mlperf ic ")}
    # the paper's IC workload is 1000 samples: 0.04 s per sample measured at 2 cores, 1 warm-up + 1000 reps
    assert "from BM/2/PIN/CPU, scaled by cores" in lines["BM/4/PIN/CPU"]
    assert lines["BM/2/PIN/CPU"].split()[3:5] == ["11.22", "h"]        # (1001 x 40.33 s + 2 s) / 3600
    # another platform from bare metal, saying so; a GPU never from a CPU
    assert "from BM/2/PIN/CPU, scaled by cores; CN's own overhead not counted" in lines["CN/2/VNL/CPU"]
    assert "nothing comparable measured" in lines["BM/2/PIN/GPU"]
    total = out.splitlines()[-1]
    assert total.startswith("total: fixed ") and "adaptive" in total and "unknown" in total


def test_plan_records_its_projection_and_a_launch_its_measured_machine_time(tmp_path):
    """The workflow's plan.json keeps the totals (estimate.totals) of the runs present when it was
    written; the report sets a launch's measured machine time (warm-ups, repetitions, load, boot) beside it."""
    from conftest import smoke_config
    from dlvirt.core.machinetime import launch_machine_s, totals_line
    from dlvirt.plan.estimate import estimate, read_records, totals
    from dlvirt.plan.planner import expand

    config = smoke_config()
    config["study"].update({"apps": ["ic"], "tools": ["mlperf"], "repetitions": 3, "warmup_repetitions": 0,
                            "matrix": [{"platforms": ["BM"], "cores": [1, 2], "pinning": ["PIN"],
                                        "processors": ["CPU"]}]})
    plan = expand(config, None)
    none = totals(config, estimate(config, plan, []), 0)
    assert none == {"records": 0, "jobs": len(plan.jobs), "unknown_jobs": len(plan.jobs), "fixed_s": None,
                    "adaptive_s": None}
    assert totals_line(none).startswith("no run records on this host yet")
    record(tmp_path / "mlperf/ic/BM/2/PIN/CPU/1.json", "BM/2/PIN/CPU", [4.0, 4.0, 4.0], samples=config["apps"]["ic"]
           ["loadgen"]["min_query_count"])
    records = read_records(tmp_path)
    found = totals(config, estimate(config, plan, records), len(records))
    assert found["records"] == 1 and found["unknown_jobs"] == 0 and found["fixed_s"] > 0
    assert "fixed repetitions" in totals_line(found) and "unknown" not in totals_line(found)
    launch = records[0]
    took = sum((datetime.fromisoformat(r.finished_utc) - datetime.fromisoformat(r.started_utc)).total_seconds()
               for r in [*launch.warmups, *launch.runs])
    assert launch_machine_s(launch) == pytest.approx(2.0 + took)  # model load 2 s, no boot
