"""Tables from run records, the self-contained HTML report and the drift table (the report opened in
Chromium, the short targets and Snakemake's report: tests/integration/test_report_rendered.py)."""

import math
import re

import pandas as pd

from conftest import RUNS
from dlvirt.analysis.catalog import FIGURES


def test_table1_from_run_records(built_report):
    table = pd.read_csv(built_report["table1"]).set_index("app")
    assert list(table.index) == ["IC", "SR", "NLP", "RS"]
    ic = table.loc["IC"]
    assert (ic["model"], ic["framework"], ic["dataset_source"], ic["weights"]) == ("ResNet50", "tensorflow",
                                                                                 "synthetic", "random")
    assert str(ic["requests_per_workload"]) == "16" and ic["jobs"] == 2
    assert table.loc["SR", "note"] == "no runs: app sr: not in study.apps of this config"


def test_table2_platforms_as_measured(built_report):
    table = pd.read_csv(built_report["table2"]).set_index("platform")
    bm, vm = table.loc["BM"], table.loc["VM"]
    assert bm["engine"] == "host process" and bm["accelerator"] == "none" and bm["cpu_modes"] == "VNL"
    assert vm["engine"] == "libvirt" and vm["hypervisor"] == "qemu" and vm["accelerator"] == "tcg"
    # the fixture's VM run predates recorded versions: the host's, as its daemons reported them
    assert vm["engine_version"] == "libvirtd 9.0.0 (host); qemu 7.2.22 (host)"
    assert vm["guest_kernel"] == "vmlinuz-6.1.0-fixture-amd64" and vm["kernel_inside"] == "6.1.0-fixture-amd64"
    assert vm["image"] == "dlvirt-guest.qcow2" and vm["cpu_modes"] == "PIN"


def test_report_is_self_contained(built_report):
    html = built_report["report"].read_text()
    assert not re.search(r"""(src|href)=["']?(https?:|//|file:)""", html)
    assert "<link" not in html and "<script" not in html
    assert html.count('<img src="data:image/png;base64,') == len(FIGURES)
    for spec in FIGURES:
        assert f'id="{spec.id}"' in html
    for heading in ("The paper's claims on this host", "Phase breakdown per app", "What was left out, and why",
                    "Table 1", "Table 2", "Provenance"):
        assert heading in html
    assert "inputs are synthetic" in html and "random weights" in html
    assert "Rows with fewer than 2 launches" in html  # the claims' evidence rule, as the code applies it
    assert "The paper's Table I as this study ran it" in html and "The paper's Table II as measured" in html
    assert "no GPU on this host" in html  # the plan's left-out reasons
    # machine time: measured from the run records' repetitions beside what the plan projected
    assert re.search(rf"Machine time: [0-9.]+ (min|h) measured over {len(RUNS)} launch\(es\)", html)
    assert ("when the plan was written: projected from 3 run record(s): adaptive repetitions 1.50 h, "
            "1 of 4 job(s) unknown") in html


# Added to a copy of the report only: after load, record each image's decoded size in the DOM.


def test_drift_table_flags_a_trend_over_three_rounds_and_shows_two():
    from dlvirt.analysis.report import drift_table

    frame = pd.DataFrame([
        {"tool": "mlperf", "app": "ic", "scenario": "BM/1/PIN/CPU", "round_means_s": "10;11;12.1", "drift_p": 0.01},
        {"tool": "mlperf", "app": "ic", "scenario": "BM/2/PIN/CPU", "round_means_s": "6;6.1;5.9", "drift_p": 0.8},
        {"tool": "mlperf", "app": "ic", "scenario": "CN/1/VNL/CPU", "round_means_s": "10;10.5", "drift_p": math.nan},
        {"tool": "mlperf", "app": "ic", "scenario": "CN/2/VNL/CPU", "round_means_s": "7", "drift_p": math.nan},
    ])
    table = drift_table(frame).set_index("scenario")
    assert table.loc["BM/1/PIN/CPU", "drift"] == "TREND" and table.loc["BM/2/PIN/CPU", "drift"] == ""
    assert table.loc["CN/1/VNL/CPU", "drift"] == "needs ≥ 3 rounds"
    assert table.loc["CN/1/VNL/CPU", "last vs first"] == "+5.0%" and "CN/2/VNL/CPU" not in table.index
