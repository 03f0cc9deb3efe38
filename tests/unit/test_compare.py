"""``dlvirt compare``: two results folders built from the fixture run record through the real summary
code (``aggregate.write_summary``), compared through the CLI."""

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from conftest import FIXTURES, compare_scenarios, compare_study
from dlvirt.analysis.aggregate import write_summary
from dlvirt.analysis.compare import ALIKE, FORMAT, INCONCLUSIVE, REFUSED, SLOWER
from dlvirt.cli import main
from dlvirt.core.records import JobResult


def verdicts(out: Path) -> dict[str, str]:
    table = pd.read_csv(out / "compare.csv")
    return dict(zip(table["scenario"], table["verdict"], strict=True))


def test_the_same_study_twice_is_alike_or_inconclusive(tmp_path, capsys):
    a = compare_study(tmp_path / "a")
    b = tmp_path / "b"
    shutil.copytree(a, b)
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "out")]) == 0
    found = verdicts(tmp_path / "out")
    assert set(found) == {s.name for s in compare_scenarios()}
    assert set(found.values()) <= {ALIKE, INCONCLUSIVE}, found
    assert "B/A 1 " in capsys.readouterr().out


def test_a_scenario_slowed_by_30_percent_is_slower_and_fails_ci(tmp_path, capsys):
    a = compare_study(tmp_path / "a")
    b = compare_study(tmp_path / "b", scale={"CN/1/VNL/CPU": 1.3}, seed=1)
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "out")]) == 1
    found = verdicts(tmp_path / "out")
    assert found["CN/1/VNL/CPU"] == SLOWER
    assert found["BM/1/VNL/CPU"] != SLOWER
    table = pd.read_csv(tmp_path / "out" / "compare.csv").set_index("scenario")
    cn = table.loc["CN/1/VNL/CPU"]
    assert cn["low90"] < 1.3 < cn["high90"] and cn["low90"] > 1.05
    assert table["format_version"].eq(FORMAT).all() and table["others_cores_a"].isna().all()  # not recorded


def test_a_different_model_is_refused_with_the_reason(tmp_path):
    a = compare_study(tmp_path / "a")
    b = compare_study(tmp_path / "b", model={"CN/1/VNL/CPU": {"model": "ResNet18"}})
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "out")]) == 0
    table = pd.read_csv(tmp_path / "out" / "compare.csv").set_index("scenario")
    assert table.loc["CN/1/VNL/CPU", "verdict"] == REFUSED
    assert "model: A ResNet50, B ResNet18" in table.loc["CN/1/VNL/CPU", "why"]
    assert table.loc["BM/1/VNL/CPU", "verdict"] != REFUSED


def test_the_same_model_run_another_way_is_refused_with_the_reason(tmp_path):
    """NLP's padding (or a frozen graph against eager) changes the work a launch does: not a change of
    platform or host that compare could judge."""
    eager = {"optimisation": "inference_mode"}
    a = compare_study(tmp_path / "a", model={"CN/1/VNL/CPU": {**eager, "padding": "max_length"}})
    b = compare_study(tmp_path / "b", model={"CN/1/VNL/CPU": {**eager, "padding": "longest"}})
    assert pd.read_csv(b / "summary.csv").set_index("scenario")["execution"]["CN/1/VNL/CPU"] \
        == "inference_mode; padding longest"
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "out")]) == 0
    table = pd.read_csv(tmp_path / "out" / "compare.csv").set_index("scenario")
    assert table.loc["CN/1/VNL/CPU", "verdict"] == REFUSED
    assert ("how the model ran: A inference_mode; padding max_length, B inference_mode; padding longest"
            in table.loc["CN/1/VNL/CPU", "why"])
    assert table.loc["BM/1/VNL/CPU", "verdict"] != REFUSED


def test_nothing_comparable_is_bad_input_naming_both_folders(tmp_path, capsys):
    a = compare_study(tmp_path / "a")
    b = compare_study(tmp_path / "b", model={s.name: {"model": "ResNet18"} for s in compare_scenarios()})
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "no scenario is comparable" in err and str(a) in err and "model: A ResNet50" in err


def test_one_launch_is_never_evidence(tmp_path):
    a = compare_study(tmp_path / "a", launches=1)
    b = compare_study(tmp_path / "b", launches=1, scale={"CN/1/VNL/CPU": 2.0})
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "out")]) == 0
    table = pd.read_csv(tmp_path / "out" / "compare.csv")
    assert table["verdict"].eq(INCONCLUSIVE).all()
    assert table["why"].str.contains("a single launch").all()


def test_a_folder_without_a_summary_is_named(tmp_path, capsys):
    a = compare_study(tmp_path / "a")
    (tmp_path / "b").mkdir()
    assert main(["compare", str(a), str(tmp_path / "b"), "--out", str(tmp_path / "out")]) == 2
    assert f"{tmp_path / 'b' / 'summary.csv'}: missing" in capsys.readouterr().err


def test_the_html_page_is_self_contained_and_lists_differences(tmp_path):
    a = compare_study(tmp_path / "a")
    b = compare_study(tmp_path / "b", scale={"CN/1/VNL/CPU": 1.3}, seed=1)
    host = json.loads((b / "host.json").read_text())
    host["kernel"] = "6.19.0-other"
    (b / "host.json").write_text(json.dumps(host))
    main(["compare", str(a), str(b), "--out", str(tmp_path / "out")])
    html = (tmp_path / "out" / "compare.html").read_text()
    assert "<svg" in html and "CN/1/VNL/CPU" in html
    assert "6.19.0-other" in html and "6.18.44-fc-v657" in html
    # nothing fetched from elsewhere: no external scripts, stylesheets or images
    assert "<script" not in html and "<link" not in html and "src=\"http" not in html


# Added to a copy of the page only: after load, record the figure's drawn size in the DOM.


def test_a_deliberately_slowed_scenario_is_marked_in_the_summary_and_named_as_a_difference(tmp_path, capsys):
    """``slowdown_cpu_quota`` marks the run records (platform.slowed): the summary row says so, and
    compare lists it first among what could explain the slow-down."""
    from dlvirt.analysis.compare import Results, differences, load

    a = compare_study(tmp_path / "a")
    b = compare_study(tmp_path / "b", scale={"CN/1/VNL/CPU": 1.6}, seed=1)
    slowed = {"cpu_quota_fraction": 0.5, "quota_cores": 0.5, "note": "deliberately slowed"}
    paths = sorted((b / "runs").rglob("*.json"))
    for path in paths:
        record = JobResult.read(path)
        if record.scenario.platform == "CN":
            dataclasses.replace(record, platform={**record.platform, "slowed": slowed}).write(path)
    write_summary(paths, b / "summary.csv")
    summary = pd.read_csv(b / "summary.csv").set_index("scenario")
    assert summary.loc["CN/1/VNL/CPU", "slowed"] == "deliberately slowed: CFS quota 0.5 of 1 core(s)"
    assert pd.isna(summary.loc["BM/1/VNL/CPU", "slowed"])
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "out")]) == 1
    assert verdicts(tmp_path / "out")["CN/1/VNL/CPU"] == SLOWER
    found = {what: (va, vb) for what, va, vb in differences(load(a), load(b))}
    assert found["deliberately slowed rows"][0] == "none"
    assert "CN/1/VNL/CPU (deliberately slowed: CFS quota 0.5" in found["deliberately slowed rows"][1]
    assert isinstance(load(a), Results)


def test_a_slowdown_beside_other_processes_work_is_no_evidence(tmp_path):
    """A study run beside other work: 30 % slower with a core of other processes' work during B's
    repetitions is inconclusive (the load may explain it), and CI is not failed for it."""
    def loaded(others_cores: float, scale: float) -> Any:
        def repetition(template: Any, scenario: Any, index: int, rng: Any) -> Any:
            e2e = 0.75 * scale * (1.0 + 0.01 * rng.standard_normal())
            telemetry = {"others_cpu_s": others_cores * e2e, "voluntary_ctx": 0, "involuntary_ctx": 0}
            return dataclasses.replace(template, repetition=index, e2e_s=e2e, telemetry=telemetry)
        return repetition

    a = compare_study(tmp_path / "a", repetition=loaded(0.02, 1.0))
    b = compare_study(tmp_path / "b", seed=1, repetition=loaded(1.0, 1.3))
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "out")]) == 0
    table = pd.read_csv(tmp_path / "out" / "compare.csv")
    assert (table["verdict"] == INCONCLUSIVE).all() and table["ratio"].gt(1.2).all()
    assert table["why"].str.contains("kept 0.02 cores busy during A's repetitions and 1.00 during B's").all()
    assert table["others_cores_a"].round(2).eq(0.02).all() and table["others_cores_b"].round(2).eq(1.0).all()
    # a quiet machine in both: the slow-down stands
    c = compare_study(tmp_path / "c", seed=2, repetition=loaded(0.05, 1.3))
    assert main(["compare", str(a), str(c), "--out", str(tmp_path / "out-c")]) == 1
    assert (pd.read_csv(tmp_path / "out-c" / "compare.csv")["verdict"] == SLOWER).all()


def test_how_busy_the_machine_was_is_among_the_facts():
    """A loaded machine explains a ratio no version or setting does: the cores other processes used
    during the repetitions (others_cpu_s / E2E) and the steal time, from the run records."""
    from dlvirt.analysis.compare import _load

    template = JobResult.read(FIXTURES / "runs" / "mlperf-ic-BM-1-VNL-CPU.json")
    runs = [dataclasses.replace(template.runs[0], e2e_s=2.0, telemetry={"others_cpu_s": o, "steal_pct": 1.0,
                                                                        "voluntary_ctx": 0, "involuntary_ctx": 0})
            for o in (1.0, 3.0)]
    found = _load([dataclasses.replace(template, runs=runs)])
    assert found["cores other processes used during the repetitions (mean)"] == "1.00"
    assert found["steal time during the repetitions (mean %)"] == "1.0"
    assert set(_load([template]).values()) == {None}  # not recorded: not listed as a difference


def test_latency_rows_are_compared_on_p99_and_early_stopping_alone_sets_none_aside(tmp_path):
    """A SingleStream row is compared on its launches' p99 latency (not E2E), and LoadGen's INVALID
    for early stopping alone does not make it weak."""
    from dlvirt.analysis.compare import P99

    def latency_study(folder: Path, p99_scale: float, seed: int) -> Path:
        def repetition(template: Any, scenario: Any, index: int, rng: Any) -> Any:
            scale = p99_scale if scenario.platform == "CN" else 1.0
            p50 = 10e6 * (1 + 0.01 * rng.standard_normal())
            loadgen = {**template.loadgen, "scenario": "SingleStream", "validity": "INVALID",
                       "min_queries_met": True, "min_duration_met": True, "early_stopping_met": False,
                       "latency_ns": {"p50": p50, "p90": 2 * p50, "p95": 2 * p50, "p99": 3 * p50 * scale,
                                      "p99.9": 4 * p50 * scale}}
            return dataclasses.replace(template, repetition=index, e2e_s=0.75, loadgen=loadgen)

        return compare_study(folder, seed=seed, tool="mlperf-SingleStream", repetition=repetition)

    a, b = latency_study(tmp_path / "a", 1.0, 0), latency_study(tmp_path / "b", 1.5, 1)
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "out")]) == 1
    table = pd.read_csv(tmp_path / "out" / "compare.csv").set_index("scenario").loc["CN/1/VNL/CPU"]
    assert table["tool"] == "mlperf-SingleStream" and table["measure"] == P99 and table["format_version"] == FORMAT
    assert table["verdict"] == SLOWER and table["ratio"] == pytest.approx(1.5, rel=0.05)  # E2E did not change
    assert table["mean_b_s"] == pytest.approx(0.045, rel=0.05)  # the mean p99, in seconds
