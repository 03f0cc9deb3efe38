"""Tables from run records and the drift table (the self-contained HTML report with every figure, opened
in Chromium, the short targets and Snakemake's report: tests/integration/test_report_rendered.py)."""

import math

import pandas as pd

from conftest import RUNS
from dlvirt.analysis.columns import read_table
from dlvirt.analysis.report import claim_parts, render


def test_table1_from_run_records(built_tables):
    table = pd.read_csv(built_tables["table1"]).set_index("app")
    assert list(table.index) == ["IC", "SR", "NLP", "RS", "LLM"]
    ic = table.loc["IC"]
    assert (ic["model"], ic["framework"], ic["dataset_source"], ic["weights"]) == ("ResNet50", "tensorflow",
                                                                                 "synthetic", "random")
    assert str(ic["requests_per_workload"]) == "16" and ic["jobs"] == 2
    assert table.loc["SR", "note"] == "no runs: app sr: not in study.apps of this config"


def test_table2_platforms_as_measured(built_tables):
    table = pd.read_csv(built_tables["table2"]).set_index("platform")
    bm, vm = table.loc["BM"], table.loc["VM"]
    assert bm["engine"] == "host process" and bm["accelerator"] == "none" and bm["cpu_modes"] == "VNL"
    assert vm["engine"] == "libvirt" and vm["hypervisor"] == "qemu" and vm["accelerator"] == "tcg"
    # the fixture's VM run predates recorded versions: the host's, as its daemons reported them
    assert vm["engine_version"] == "libvirtd 9.0.0 (host); qemu 7.2.22 (host)"
    assert vm["guest_kernel"] == "vmlinuz-6.1.0-fixture-amd64" and vm["kernel_inside"] == "6.1.0-fixture-amd64"
    assert vm["image"] == "dlvirt-guest.qcow2" and vm["cpu_modes"] == "PIN"


def test_drift_table_flags_a_trend_over_three_rounds_and_shows_two():
    from dlvirt.analysis.report import drift_table

    frame = pd.DataFrame([
        {"tool": "mlperf", "app": "ic", "scenario": "BM/1/PIN/CPU", "round_means_s": "10;11;12.1", "drift_p": 0.01},
        {"tool": "mlperf", "app": "ic", "scenario": "BM/2/PIN/CPU", "round_means_s": "6;6.1;5.9;6;20", "drift_p": 0.8,
         "outlier_launches": "round 5"},
        {"tool": "mlperf", "app": "ic", "scenario": "CN/1/VNL/CPU", "round_means_s": "10;10.5", "drift_p": math.nan},
        {"tool": "mlperf", "app": "ic", "scenario": "CN/2/VNL/CPU", "round_means_s": "7", "drift_p": math.nan},
    ])
    table = drift_table(frame).set_index("scenario")
    assert table.loc["BM/1/PIN/CPU", "drift"] == "TREND" and table.loc["BM/2/PIN/CPU", "drift"] == ""
    assert table.loc["CN/1/VNL/CPU", "drift"] == "needs ≥ 3 rounds"
    assert table.loc["CN/1/VNL/CPU", "last vs first"] == "+5.0%" and "CN/2/VNL/CPU" not in table.index
    assert table.loc["BM/2/PIN/CPU", "outlier launch"] == "round 5"
    assert table.loc["BM/1/PIN/CPU", "outlier launch"] == ""


def test_every_claim_part_shows_margin_estimate_interval_df_and_n(built_tables):
    claims = read_table(built_tables["claims"], "claims").set_index("id")
    parts = claim_parts({"id": "pinning", **claims.loc["pinning"].to_dict()})
    assert parts and all(p["margin"] == "−5%" and p["outcome"] == "yes" for p in parts)
    assert parts[0]["estimate"].startswith("-") and parts[0]["interval"].startswith("[-")
    assert float(parts[0]["df"]) > 0 and int(parts[0]["n"]) >= 4
    assert claim_parts({"id": "scale_up_limit", **claims.loc["scale_up_limit"].to_dict()}) == []
    html = render(figures={}, runs=RUNS, **{k: v for k, v in built_tables.items() if k != "dir"})
    assert "margin −5%" in html and "again across this study's tested claims" in html
