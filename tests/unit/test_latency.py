"""LoadGen's SingleStream and Server scenarios (study.scenarios): run tools, the streaming pipeline
under real LoadGen with a stand-in app (no framework, sleeps as inference), what a repetition keeps,
and how the summary counts latency repetitions. Real apps: tests/integration/test_workflow.py."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from conftest import FIXTURES, StubModel
from dlvirt.analysis.aggregate import summarise
from dlvirt.apps.base import ThreadPlan
from dlvirt.core.loadgen import counts, is_latency, run_tool, run_tools, split_tool
from dlvirt.core.records import HarnessJob
from dlvirt.core.scenario import Scenario
from dlvirt.plan.planner import RUN_TOOLS
from dlvirt.run import harness
from dlvirt.run.tools import KINDS as TOOL_KINDS


def test_run_tools_keep_offline_as_mlperf_and_name_the_others():
    mlperf, dlbs = TOOL_KINDS["mlperf"], TOOL_KINDS["dlbs"]
    assert run_tools([mlperf, dlbs]) == ["mlperf", "dlbs"]
    assert run_tools([mlperf, dlbs], ["Offline", "SingleStream", "Server"]) == \
        ["mlperf", "mlperf-SingleStream", "mlperf-Server", "dlbs"]
    assert run_tools([dlbs], ["Server"]) == ["dlbs"]  # DLBS declares no LoadGen scenario: model-only, once
    assert split_tool("mlperf-Server") == ("mlperf", "Server")
    assert split_tool("mlperf") == ("mlperf", "Offline")
    assert split_tool("dlbs") == ("dlbs", "Offline")
    assert run_tool("mlperf", "SingleStream") in RUN_TOOLS and len(RUN_TOOLS) == 4
    assert is_latency("mlperf-SingleStream") and not is_latency("mlperf") and not is_latency("dlbs")
    with pytest.raises(ValueError, match="MultiStream"):
        run_tool("mlperf", "MultiStream")


class SleepyApp:
    """A stand-in app: pre-processing and inference sleep, inference per batch; records the batches."""

    def __init__(self, batch_infer_s: float = 0.004, pre_s: float = 0.001, plan: ThreadPlan | None = None) -> None:
        self.threads = plan or ThreadPlan(policy="granted", cores=1, intra_op=1, inter_op=1, pre_workers=1,
                                          overlap=False, post_thread=False, sharing="alternate")
        self.batch_infer_s, self.pre_s = batch_infer_s, pre_s
        self.batches: list[int] = []
        self.lock = threading.Lock()

    def sample_count(self) -> int:
        return 8

    def preprocess(self, index: int) -> int:
        time.sleep(self.pre_s)
        return index

    def infer(self, items: list[int]) -> list[int]:
        time.sleep(self.batch_infer_s)
        with self.lock:
            self.batches.append(len(items))
        return items

    def postprocess(self, indices: list[int], outputs: Any) -> list[bytes]:
        return [bytes([i % 256]) for i in indices]

    def begin_repetition(self, out_dir: Path) -> None:
        pass

    def end_repetition(self) -> dict[str, Any]:
        return {}


def job(tool: str, **loadgen: Any) -> HarnessJob:
    return HarnessJob(tool=tool, app="ic", scenario=Scenario("BM", 1, "VNL", "CPU"), scenario_name="BM/1/VNL/CPU",
                      repetitions=1, warmup_repetitions=1, threads="granted", batch_size=4,
                      loadgen={"min_query_count": 24, **loadgen}, app_settings={}, dataset_dir=".", run_id="t")


def test_single_stream_issues_one_query_at_a_time_and_keeps_the_percentiles(tmp_path):
    app = SleepyApp()
    record = harness.run_repetition(app, job("mlperf-SingleStream"), 0, tmp_path, scenario="SingleStream")  # type: ignore[arg-type]  # a stand-in app
    lg = record.loadgen
    assert lg["scenario"] == "SingleStream" and lg["queries"] == 24 and record.samples == 24
    assert set(app.batches) == {1}  # one sample in flight: every batch is that one sample
    latency = lg["latency_ns"]
    assert set(latency) == {"p50", "p90", "p95", "p99", "p99.9"}
    # each query sleeps ~5 ms (pre + inference): the percentiles are at least that, and ordered
    assert 4e6 < latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["p99.9"]
    assert lg["achieved_qps"] > 0 and lg["min_queries_met"] is True
    assert lg["early_stopping_met"] is False and "queries" in lg["early_stopping"]  # 24 queries: too few
    assert counts(lg)  # issued as asked: it counts, its early-stopping verdict kept beside it
    assert record.e2e_s >= 24 * 0.004
    assert (tmp_path / "rep-0000" / "mlperf_log_summary.txt").exists()


def test_a_partial_warm_up_issues_its_share_of_the_workload_in_whole_batches(tmp_path):
    app = SleepyApp()
    record = harness.run_repetition(app, job("mlperf"), 0, tmp_path, share=0.3)  # type: ignore[arg-type]  # a stand-in app
    assert record.samples == 8 and sorted(app.batches) == [4, 4]  # 0.3 x 24 = 7.2: two batches of 4
    # the repetition after it runs without a rate estimate (run.launch), as a launch's first does
    whole = harness.run_repetition(SleepyApp(), job("mlperf"), 1, tmp_path)  # type: ignore[arg-type]
    assert whole.samples == 24 and counts(whole.loadgen)


@pytest.mark.parametrize("overlap", [False, True])
def test_server_batches_what_has_arrived_through_the_same_pipeline(tmp_path, overlap):
    plan = ThreadPlan(policy="granted", cores=2, intra_op=1, inter_op=1, pre_workers=1, overlap=overlap,
                      post_thread=overlap, sharing="split" if overlap else "alternate")
    app = SleepyApp(batch_infer_s=0.02, plan=plan)
    # 400 queries/s against a server that takes 20 ms a batch: queries queue, batches fill up
    record = harness.run_repetition(app, job("mlperf-Server"), 0, tmp_path, scenario="Server",  # type: ignore[arg-type]  # a stand-in app
                                    target_qps=(400.0, "configured"))
    lg = record.loadgen
    assert lg["scenario"] == "Server" and record.samples == 24 == sum(app.batches)
    assert max(app.batches) > 1 and max(app.batches) <= 4  # batch_size caps what one call takes
    assert lg["settings"]["target_qps"] == 400.0 and lg["settings"]["target_latency_ns"] == harness.UNBOUNDED_LATENCY_NS
    assert lg["latency_ns"]["p99"] >= lg["latency_ns"]["p50"] > 0
    assert lg["perf_constraints_met"] is True


def test_server_target_rate_is_a_share_of_the_offline_throughput_or_as_given():
    assert harness.server_target_qps({"server_qps_fraction": 0.25}, [40.0, 80.0])[0] == 20.0
    assert harness.server_target_qps({}, [10.0])[0] == 10.0 * harness.SERVER_QPS_FRACTION
    assert harness.server_target_qps({"server_target_qps": 7}, [])[0] == 7.0
    with pytest.raises(RuntimeError, match="Offline warm-up"):
        harness.server_target_qps({}, [])


def test_offline_repetitions_count_only_when_valid_latency_ones_when_issued_as_asked():
    assert counts(None) and counts({"validity": "VALID"})
    assert not counts({"validity": "INVALID", "min_queries_met": True, "min_duration_met": True})
    latency = {"scenario": "Server", "validity": "INVALID", "min_queries_met": True, "min_duration_met": True,
               "early_stopping_met": False}
    assert counts(latency)
    assert not counts({**latency, "min_queries_met": False})


FIXTURE = FIXTURES / "runs" / "mlperf-ic-BM-1-VNL-CPU.json"


def latency_result(tool: str, replicate: int, p50_ms: list[float], early: bool = False) -> dict:
    """The fixture run record as a latency launch: one repetition per p50 given (p99 = 3 x p50)."""
    result = json.loads(FIXTURE.read_text())
    result["tool"], result["replicate"], result["run_id"] = tool, replicate, f"{tool}-{replicate}"
    scenario = split_tool(tool)[1]
    template = result["runs"][0]
    runs = []
    for i, p50 in enumerate(p50_ms):
        run = json.loads(json.dumps(template))
        run["repetition"] = i + 1
        latency = {"p50": p50 * 1e6, "p90": 2 * p50 * 1e6, "p95": 2.5 * p50 * 1e6, "p99": 3 * p50 * 1e6,
                   "p99.9": 4 * p50 * 1e6}
        run["loadgen"] = {**run["loadgen"], "scenario": scenario, "validity": "VALID" if early else "INVALID",
                          "min_queries_met": True, "min_duration_met": True, "early_stopping_met": early,
                          "latency_ns": latency, "achieved_qps": 50.0, "queries": 24 + i,
                          "settings": {**run["loadgen"]["settings"], "target_qps": 40.0}}
        runs.append(run)
    result["runs"] = runs
    return result


def test_a_latency_row_keeps_percentiles_per_launch_and_its_early_stopping_verdict(tmp_path):
    paths = []
    for replicate, p50s in ((1, [10.0, 12.0]), (2, [20.0, 22.0])):
        path = tmp_path / f"{replicate}.json"
        path.write_text(json.dumps(latency_result("mlperf-Server", replicate, p50s)))
        paths.append(path)
    row = summarise(paths).iloc[0]
    assert row["tool"] == "mlperf-Server" and row["scenario"] == "BM/1/VNL/CPU"
    assert row["loadgen_scenario"] == "Server"
    # INVALID only for early stopping: the repetitions count, LoadGen's verdict is kept beside them
    assert row["reps"] == 4 and row["invalid"] == 0 and not row["loadgen_valid"] and not row["early_stopping_met"]
    assert row["round_p50_s"] == "0.011;0.021" and row["round_p99_s"] == "0.033;0.063"
    assert row["p50_s"] == pytest.approx(0.016) and row["p99_s"] == pytest.approx(0.048)
    assert row["p999_s"] == pytest.approx(0.064) and row["target_qps"] == 40.0 and row["achieved_qps"] == 50.0
    assert row["latency_queries"] == 24  # the fewest of any repetition: its p99 is about the largest of 24


def test_an_offline_row_has_no_latency_columns(tmp_path):
    row = summarise([FIXTURE]).iloc[0]
    assert row["tool"] == "mlperf" and math.isnan(row["p99_s"]) and pd.isna(row["loadgen_scenario"])


# -- the extension's claim and figure -------------------------------------------------------------------

def latency_row(platform, pinning, p50_ms, tail, tool="mlperf-SingleStream", app="ic", cores=1, launches=4,
                throttled=0.0, spread=0.03, reference=True):
    """A summary row of a latency run tool: each launch's p50 around ``p50_ms`` and p99 = ``tail`` x p50
    (with a small launch-to-launch wobble in both)."""
    wobble = [1 + spread * w for w in (-1, 1, 0.5, -0.5, 0.2, -0.2)[:launches]]
    p50 = [p50_ms / 1e3 * w for w in wobble]
    p99 = [v * tail * (1 + spread * w) for v, w in zip(p50, (0.3, -0.6, 0.9, -0.2, 0.1, -0.5), strict=False)]
    return {"tool": tool, "app": app, "platform": platform, "cores": cores, "pinning": pinning, "processor": "CPU",
            "site": "local", "scenario": f"{platform}/{cores}/{pinning}/CPU", "reps": 2 * launches,
            "replicates": launches, "mean_s": 1.0, "ci95_s": 0.01, "accel": "none", "reference_model": reference,
            "round_means_s": ";".join("1.0" for _ in p50),
            "launch_rounds": ";".join(str(i + 1) for i in range(launches)),
            "round_p50_s": ";".join(f"{v:.6g}" for v in p50), "round_p99_s": ";".join(f"{v:.6g}" for v in p99),
            "p50_s": sum(p50) / launches, "p99_s": sum(p99) / launches, "throttled_pct": throttled,
            "loadgen_valid": False, "early_stopping_met": False}


def claim(rows):
    from dlvirt.analysis.claims import evaluate

    table = evaluate(pd.DataFrame(rows), 4, []).set_index("id")
    return table.loc["latency_tail_quota", "verdict"], table.loc["latency_tail_quota", "evidence"]


def test_the_quota_claim_holds_when_vanilla_launches_have_a_longer_tail_than_pinned_ones():
    rows = [latency_row(p, "PIN", 10.0, 1.5) for p in ("BM", "CN")]
    rows += [latency_row("BM", "VNL", 10.5, 2.4, throttled=20.0), latency_row("CN", "VNL", 11.0, 3.0, throttled=40.0)]
    verdict, evidence = claim(rows)
    assert verdict == "holds", evidence
    assert "VNL throttled 40 %" in evidence and "early stopping" in evidence


def test_the_quota_claim_is_negligible_when_the_tails_are_alike():
    rows = [latency_row(p, m, 10.0, 1.5, spread=0.005) for p in ("BM", "CN") for m in ("VNL", "PIN")]
    assert claim(rows)[0] == "negligible"  # does not hold: the tails shown alike within ±5 %


def test_the_quota_claim_needs_latency_rows_and_says_what_is_missing():
    verdict, evidence = claim([latency_row("BM", "VNL", 10.0, 2.0)])
    assert verdict == "not testable here" and "pinned" in evidence
    from dlvirt.analysis.claims import evaluate

    offline_only = evaluate(pd.DataFrame([{**latency_row("BM", "VNL", 10, 2), "tool": "mlperf"}]), 4, [])
    assert "study.scenarios" in offline_only.set_index("id").loc["latency_tail_quota", "evidence"]
    one_launch = [latency_row(p, m, 10.0, 2.0, launches=1) for p in ("BM",) for m in ("VNL", "PIN")]
    assert "fewer than 2 launches" in claim(one_launch)[1]


def test_the_latency_figure_normalises_p50_and_p99_to_the_baseline_beside_throttling(tmp_path):
    from conftest import write_plan
    from dlvirt.analysis import figures
    from dlvirt.analysis.plandoc import PlanDocument
    from dlvirt.analysis.rows import latency_beside_throttling

    rows = [latency_row("BM", "VNL", 10.0, 2.0, throttled=5.0), latency_row("CN", "VNL", 12.0, 3.0, throttled=30.0),
            latency_row("BM", "VNL", 50.0, 2.0, app="nlp")]
    columns = ["tool", "app", "platform", "cores", "pinning", "processor", "site", "scenario", "mean_s", "ci95_s",
               "round_p50_s", "round_p99_s", "p50_s", "p99_s", "throttled_pct", "early_stopping_met"]
    summary = tmp_path / "s.csv"
    pd.DataFrame(rows)[columns].to_csv(summary, index=False)
    plan = PlanDocument.load(write_plan(tmp_path / "plan.json"))
    table = latency_beside_throttling(pd.DataFrame(rows), plan.kinds.baseline).set_index(["app", "platform"])
    cn = table.loc[("IC", "CN")]
    assert cn["p50/BM"] == pytest.approx(1.2, rel=0.02) and cn["p99/BM"] == pytest.approx(1.8, rel=0.03)
    assert cn["p50/BM ci"] > 0 and cn["throttled share"] == pytest.approx(0.30)
    assert table.loc[("IC", "BM"), "p99/BM"] == 1.0
    fig = figures.latency_figure([summary], tool="mlperf-SingleStream", plan=plan)
    figures.save(fig, tmp_path / "latency.png")
    assert (tmp_path / "latency.png").stat().st_size > 10_000
    empty = figures.latency_figure([summary], tool="mlperf-Server", plan=plan)  # nothing measured: says so
    assert "not measured" in " ".join(t.get_text() for t in empty.axes[0].texts)


class SleepyLaunchApp(StubModel, SleepyApp):
    """SleepyApp with what the launch loop asks of an app."""

    model_name = "sleepy"

    def __init__(self, settings, dataset_dir, processor, threads, initial_weights=None):
        SleepyApp.__init__(self, batch_infer_s=0.003, pre_s=0.001, plan=threads)


@pytest.mark.parametrize("tool", ["mlperf-SingleStream", "mlperf-Server"])
def test_a_latency_launch_end_to_end_through_real_loadgen(tmp_path, monkeypatch, tool):
    """The launch loop with the real mlperf tool and LoadGen, a stand-in app: Server measures its
    rate in an Offline warm-up first, then every counted repetition is a latency test at that rate."""
    from dlvirt.core.records import HarnessOutput
    from dlvirt.run import launch

    monkeypatch.setattr(launch, "app_class", lambda name: SleepyLaunchApp)
    job = HarnessJob(tool=tool, app="ic", scenario=Scenario.parse("BM/1/VNL/CPU"), scenario_name="BM/1/VNL/CPU",
                     repetitions=2, warmup_repetitions=1, threads="granted", batch_size=4,
                     loadgen={"min_query_count": 16, "server_qps_fraction": 0.5}, app_settings={},
                     dataset_dir=str(tmp_path), run_id="1-test")
    job.write(tmp_path / "job.json")
    assert launch.main([str(tmp_path / "job.json"), str(tmp_path / "out")]) == 0
    out = HarnessOutput.read(tmp_path / "out" / "harness.json")
    scenario = split_tool(tool)[1]
    assert len(out.runs) == 2 and all(r.loadgen["scenario"] == scenario for r in out.runs)
    assert all(counts(r.loadgen) and r.loadgen["latency_ns"]["p99"] > 0 for r in out.runs)
    if scenario == "Server":
        # the Offline calibration first (a noisy first counted repetition may join the warm-ups: unsteady)
        assert "scenario" not in out.warmups[0].loadgen
        target = out.runs[0].loadgen["settings"]["target_qps"]
        assert target == pytest.approx(0.5 * out.warmups[0].samples_per_s)
        assert "Offline warm-up throughput" in out.runs[0].loadgen["settings"]["target_qps_from"]
    else:
        assert out.warmups[0].loadgen["scenario"] == "SingleStream"
