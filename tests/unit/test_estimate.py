"""plan --estimate: machine time projected from run records (hand-made here; any real ones work)."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO
from dlvirt.cli import main
from dlvirt.core.records import JobResult
from dlvirt.core.scenario import Scenario

RECORDED = JobResult.read(FIXTURES / "runs" / "mlperf-ic-BM-1-VNL-CPU.json")


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
    # the paper's IC workload is 1000 samples: 0.04 s per sample measured at 2 cores; 5 launches of
    # 1 warm-up of a fifth of the workload (the config's minimum: these records ran none) + 2
    # repetitions, each launch + 2 s model load
    assert "from BM/2/PIN/CPU, scaled by cores" in lines["BM/4/PIN/CPU"]
    assert lines["BM/2/PIN/CPU"].split()[3] == "0.13"                  # 5 x (2.2 x 40.33 s + 2 s) / 3600 (h)
    # another platform from bare metal, saying so; a GPU never from a CPU
    assert "from BM/2/PIN/CPU, scaled by cores; CN's own overhead not counted" in lines["CN/2/VNL/CPU"]
    assert "nothing comparable measured" in lines["BM/2/PIN/GPU"]
    # the host's background load first: what else kept its cores busy over a short sample
    assert out.startswith("host background load: other processes kept ")
    total = out.splitlines()[-1]
    assert total.startswith("total (partial: ") and "scenario(s) projected, the other " in total
    assert "fixed " in total and "adaptive " in total and total.endswith(" h")
    # scenarios in numeric order of their cores: BM/2 before BM/16
    order = [name for name in lines if name.startswith("BM/")]
    assert order.index("BM/2/PIN/CPU") < order.index("BM/16/PIN/CPU")
    assert main(["plan", "--estimate", "config/paper.yaml", "--config", "host_check=false", "--runs",
                 str(tmp_path / "none")]) == 0
    assert "no run records to project from" in capsys.readouterr().out


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


def test_design_sizing_from_known_components():
    """Kalibera & Jones's optimum and the projected half-widths and power, against hand computation."""
    import math

    from scipy import stats as sps

    from dlvirt.plan.design import (
        Inputs,
        launches_for_equivalence,
        launches_needed,
        optimal_repetitions,
        project,
        recommended_repetitions,
    )

    given = Inputs(within=0.07 ** 2, between=0.086 ** 2, launch_s=15.0, repetition_s=3.0, basis="given")
    assert optimal_repetitions(given) == pytest.approx(math.sqrt(15 / 3 * 0.0049 / 0.007396))  # 1.82
    assert recommended_repetitions(given, 10) == 2
    assert recommended_repetitions(Inputs(0.0049, 0.0, 15.0, 3.0, ""), 4) == 4  # launches alike: repetitions buy all
    # 24 scenarios x 3 launches, rounds as blocks: df 72 - 24 - 2 = 46
    case = project(given, 3, 2, 24)
    se = math.sqrt(2 * (0.007396 + 0.0049 / 2) / 3)
    assert case.df == 46 and case.se == pytest.approx(se)
    assert case.half_width == pytest.approx(math.expm1(sps.t.ppf(0.95, 46) * se))         # ±14.6 %
    # a claim of a 20 % gain must show it beyond the 5 % margin
    gap = math.log(1.2) - math.log(1.05)
    assert case.power[0.2] == pytest.approx(sps.nct.sf(sps.t.ppf(0.95, 46), 46, gap / se))
    claim = project(given, 3, 2, 24, cases=4)
    assert claim.se == pytest.approx(se / 2) and claim.half_width < 0.075 < 0.12 < case.half_width  # ±7.04 %
    assert claim.power[0.1] > case.power[0.1]
    # the fewest launches for a target: the next one reaches it, the one before does not
    need = launches_needed(given, 2, 24, 0.12)
    assert need == 5
    assert project(given, need, 2, 24).half_width <= 0.12 < project(given, need - 1, 2, 24).half_width
    # showing "alike within ±5 %" at a true zero needs a half-width well inside the margin
    alike = launches_for_equivalence(given, 2, 24, 0.05, cases=4)
    assert project(given, alike, 2, 24, 4).equivalence >= 0.8 > project(given, alike - 1, 2, 24, 4).equivalence
    assert project(given, alike, 2, 24, 4).half_width < 0.05 / 1.5 and alike > launches_needed(given, 2, 24, 0.05, 4)
    # TOST at a true zero (hand computation): both one-sided tests reject iff |estimate| < bound - t·se
    sized = project(given, alike, 2, 24, 4)
    t = sps.t.ppf(0.95, sized.df)
    assert sized.equivalence == pytest.approx(2 * sps.t.cdf(math.log(1.05) / sized.se - t, sized.df) - 1)
    assert claim.equivalence == 0.0  # 3 launches: the interval (±7 %) is wider than the margin
    assert launches_for_equivalence(Inputs(0.5, 0.5, 1.0, 1.0, ""), 2, 24, 0.05, most=50) is None


def test_design_reads_components_and_costs_from_run_records(tmp_path, monkeypatch, capsys):
    import math

    from dlvirt.core.variance import of_launches
    from dlvirt.plan.design import claim_parts, from_records
    from dlvirt.plan.estimate import read_records

    launches = {"BM/1/PIN/CPU": [[4.0, 4.2], [4.4, 4.3], [3.9, 4.0]],
                "BM/1/VNL/CPU": [[5.0, 5.1], [5.3, 5.6], [5.0, 4.8]]}
    for scenario, values in launches.items():
        for i, e2e in enumerate(values):
            record(tmp_path / "runs" / "mlperf" / "ic" / scenario / f"{i + 1}.json", scenario, e2e, samples=32)
    # a job still running keeps its work directory beside the records: not a record
    (tmp_path / "runs" / "mlperf" / "ic" / "BM/1/PIN/CPU" / ".work-1-x").mkdir()
    (tmp_path / "runs" / "mlperf" / "ic" / "BM/1/PIN/CPU" / ".work-1-x" / "job.json").write_text("{}")
    records = read_records(tmp_path / "runs")
    assert len(records) == 6
    found = from_records(records)
    a, b = (of_launches(v) for v in launches.values())
    assert found.within == pytest.approx((a.within * 3 + b.within * 3) / 6)
    assert found.launch_s == pytest.approx(2.0)  # model load 2 s, no boot, no warm-ups in these records
    assert found.repetition_s == pytest.approx(
        sum((datetime.fromisoformat(r.finished_utc) - datetime.fromisoformat(r.started_utc)).total_seconds()
            for x in records for r in x.runs) / 12)
    assert math.isfinite(found.between) and found.between >= 0
    # the claims' contrasts among planned scenarios: one PIN/VNL pair on BM, a scale-up line
    plan = [("ic", Scenario.parse(s)) for s in ("BM/1/PIN/CPU", "BM/1/VNL/CPU", "BM/2/VNL/CPU", "CN/1/VNL/CPU")]
    parts = {claims.split(",")[0]: p for claims, _, p in claim_parts(plan)}
    assert parts["pinning"] == {"BM": 1} and parts["cn_overhead_chr"] == {"CN": 1}
    assert parts["gpu_speedup"] == {} and parts["scale_up_limit"] == {"BM": 1}
    # the command: records as given, or the components given; no records and nothing given is an error
    monkeypatch.chdir(REPO)
    assert main(["plan", "--design", "--runs", str(tmp_path / "none"), "--within-cv", "0.07", "--between-cv", "0.086",
                 "--launch-s", "15", "--repetition-s", "3"]) == 0
    out = capsys.readouterr().out
    assert "n* = sqrt(c_launch / c_rep · σ²_w / σ²_b) = 1.82 → 2" in out and "per-case comparison" in out
    assert "for it to show alike within ±5% in 80% of studies when there is no difference" in out
    # config.yaml's 5 launches: too few
    assert "comes out alike within ±5% (a claim of a difference: `does not hold`; of none: `holds`) in" in out
    assert main(["plan", "--design", "--runs", str(tmp_path / "none")]) != 0
    assert "give --within-cv" in capsys.readouterr().err


def test_a_launch_split_fits_its_parts_inside_the_total():
    """The start-up, timed across clocks (a guest's boot seen on its console a poll late), may
    overlap the harness's parts: the overlap comes off the start-up, and other_s stays >= 0."""
    from types import SimpleNamespace

    from dlvirt.run.runner import launch_split

    harness = SimpleNamespace(model_load_s=1.0, timeline={"warmup_s": 3.0, "counted_s": 12.0,
                                                          "framework_import_s": 2.0, "first_call_s": 0.1})
    fits = launch_split(harness, 4.0, 20.5, 0.1)  # type: ignore[arg-type]  # a stand-in
    assert fits["startup_s"] == 4.0 and fits["other_s"] == 0.5 and fits["startup_overlap_s"] == 0.0
    over = launch_split(harness, 4.0, 19.95, 0.1)  # type: ignore[arg-type]  # a stand-in
    assert over["startup_s"] == pytest.approx(3.95) and over["other_s"] == 0.0
    assert over["startup_overlap_s"] == pytest.approx(0.05)
    parts = ("startup_s", "model_load_s", "warmup_s", "counted_s", "other_s")
    assert sum(over[k] for k in parts) == pytest.approx(over["total_s"])
    assert launch_split(harness, None, 20.0, 0.1) is None  # type: ignore[arg-type]  # a stand-in


def test_a_launch_split_adds_up_and_the_report_gives_its_shares():
    """JobResult.launch_s: what the launch cost, split; the machine time readers take its total."""
    from dlvirt.core.machinetime import launch_cost_s, launch_machine_s, launch_overhead_s, split_line, split_totals

    split = {"startup_s": 4.0, "model_load_s": 1.0, "warmup_s": 3.0, "counted_s": 12.0, "other_s": 0.0,
             "total_s": 20.0, "framework_import_s": 3.0, "weights_check_s": 0.1}
    launch = dataclasses.replace(RECORDED, launch_s=split)
    assert launch_machine_s(launch) == 20.0 and launch_overhead_s(launch) == 5.0 and launch_cost_s(launch) == 8.0
    totals = split_totals([launch, launch, RECORDED])  # a record from before the split is left out
    assert totals is not None and totals["launches"] == 2 and totals["counted_s"] == 24.0
    line = split_line(totals)
    assert line.startswith("0.7 min over 2 launch(es): 60% counted repetitions, 15% warm-ups, 5% model loads, 20%")
    assert split_totals([RECORDED]) is None and split_line(None).startswith("not recorded")
