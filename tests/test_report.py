"""Tables from run records, the self-contained HTML report (opened in a real headless Chromium),
and the short targets for figures, tables, claims and the report."""

import base64
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from conftest import CHROMIUM_FLAGS, smoke_config, snakemake, write_config, write_plan
from dlvirt.analysis.catalog import FIGURES, LATENCY_FIGURES
from dlvirt.analysis.claims import write_claims
from dlvirt.analysis.report import write_report
from dlvirt.analysis.tables import write_tables
from test_figures import CASES, FIXTURES, REPO, parameters, run_notebook_in_process
from test_workflow import jobs_that_would_run

RUNS = sorted((FIXTURES / "runs").glob("*.json"))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """Figures, tables, claims and the report from the fixtures, built once for this module."""
    out = tmp_path_factory.mktemp("report")
    summary, host, gaps = CASES["full"]
    for spec in FIGURES:
        run_notebook_in_process(REPO / "notebooks" / f"{spec.notebook_name}.ipynb", parameters(spec, "full", out))
    plan = write_plan(out / "plan.json", CASES["partial"][2],
                      estimate={"records": 3, "jobs": 4, "unknown_jobs": 1, "fixed_s": None, "adaptive_s": 5400.0})
    paths = {"summary": summary, "host": host, "plan": plan, "claims": out / "claims.csv",
             "table1": out / "table1.csv", "table2": out / "table2.csv"}
    write_tables(RUNS, host, plan, paths["table1"], paths["table2"])
    write_claims(summary, host, plan, paths["claims"])
    write_report(out / "report.html", figures={s.id: out / f"{s.id}.png" for s in FIGURES}, runs=RUNS, **paths)
    return {**paths, "report": out / "report.html", "dir": out}


def test_table1_from_run_records(built):
    table = pd.read_csv(built["table1"]).set_index("app")
    assert list(table.index) == ["IC", "SR", "NLP", "RS"]
    ic = table.loc["IC"]
    assert (ic["model"], ic["framework"], ic["dataset_source"], ic["weights"]) == ("ResNet50", "tensorflow",
                                                                                 "synthetic", "random")
    assert str(ic["requests_per_workload"]) == "16" and ic["jobs"] == 2
    assert table.loc["SR", "note"] == "no runs: app sr: not in study.apps of this config"


def test_table2_platforms_as_measured(built):
    table = pd.read_csv(built["table2"]).set_index("platform")
    bm, vm = table.loc["BM"], table.loc["VM"]
    assert bm["engine"] == "host process" and bm["accelerator"] == "none" and bm["cpu_modes"] == "VNL"
    assert vm["engine"] == "libvirt" and vm["hypervisor"] == "qemu" and vm["accelerator"] == "tcg"
    # the fixture's VM run predates recorded versions: the host's, as its daemons reported them
    assert vm["engine_version"] == "libvirtd 9.0.0 (host); qemu 7.2.22 (host)"
    assert vm["guest_kernel"] == "vmlinuz-6.1.0-fixture-amd64" and vm["kernel_inside"] == "6.1.0-fixture-amd64"
    assert vm["image"] == "dlvirt-guest.qcow2" and vm["cpu_modes"] == "PIN"


def test_report_is_self_contained(built):
    html = built["report"].read_text()
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
    assert "when the plan was written: projected from 3 run record(s): adaptive repetitions 1.50 h, 1 of 4 job(s) unknown" \
        in html


# Added to a copy of the report only: after load, record each image's decoded size in the DOM.
IMAGE_PROBE = """<script>window.addEventListener("load", () => { document.body.setAttribute("data-images",
  JSON.stringify([...document.images].map(i => [i.alt.split(":")[0], i.complete, i.naturalWidth, i.naturalHeight])));
});</script>"""


def test_report_renders_every_figure_in_chromium(built):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (setup.sh installs it)")
    probed = built["dir"] / "probed.html"
    probed.write_text(built["report"].read_text().replace("</body>", IMAGE_PROBE + "</body>"))
    profile = built["dir"] / "chromium-profile"
    proc = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", probed.as_uri()],
                          capture_output=True, text=True, timeout=120)
    match = re.search(r'data-images="([^"]*)"', proc.stdout)
    assert match, f"no image probe in Chromium's DOM (rc {proc.returncode}): {proc.stderr[-2000:]}"
    images = json.loads(match.group(1).replace("&quot;", '"'))
    assert sorted(i[0] for i in images) == sorted(s.id for s in FIGURES)
    broken = [i for i in images if not (i[1] and i[2] >= 600 and i[3] >= 300)]
    assert not broken, f"figures not decoded by Chromium: {broken}"


def test_short_targets_build_only_what_they_need(workflow_dir):
    config = write_config(workflow_dir / "smoke.yaml", smoke_config())
    fig10 = jobs_that_would_run(workflow_dir, "fig10", "--configfile", str(config))
    assert fig10["figure"] == 1 and fig10["summarise_app"] == 4  # one summary per app it draws
    assert not {"summary", "report", "claims", "tables"} & set(fig10)
    claims = jobs_that_would_run(workflow_dir, "claims", "--configfile", str(config))
    assert claims["claims"] == 1 and claims["study_plan"] == 1 and "figure" not in claims
    report = jobs_that_would_run(workflow_dir, "report", "--configfile", str(config))
    paper = [s for s in FIGURES if s not in LATENCY_FIGURES]  # latency figures: only where study.scenarios asks
    assert report["figure"] == len(paper) and report["tables"] == 1 and report["claims"] == 1
    config = write_config(workflow_dir / "latency.yaml", smoke_config(study={**smoke_config()["study"],
                                                                           "scenarios": ["Offline", "Server"]}))
    latency = jobs_that_would_run(workflow_dir, "latency", "--configfile", str(config))
    assert latency["figure"] == 1 and latency["summarise_app"] == 4  # the Server figure, its summaries


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


def report_outputs() -> list[tuple[str, str, str]]:
    """Every output the rules flag for Snakemake's report: (rule file, path, its report() arguments)."""
    found = []
    for smk in sorted((REPO / "workflow" / "rules").glob("*.smk")):
        for path, args in re.findall(r'report\(\s*"([^"]+)"([^)]*)\)', smk.read_text()):
            found.append((smk.name, path, args))
    return found


ONE_PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def plain_words(rst: str) -> str:
    """Four words in a row on one line of a caption, free of markup: they reach the report as written."""
    for line in rst.splitlines():
        words = line.split()
        for i in range(len(words) - 3):
            if all(re.fullmatch(r"[A-Za-z]+", w) for w in words[i:i + 4]):
                return " ".join(words[i:i + 4])
    raise AssertionError(f"no four plain words in a row in {rst!r}")


def test_snakemake_report_captions_render(tmp_path):
    """Every output flagged for `snakemake --report` has a caption file under workflow/report/, and
    Snakemake renders each (Jinja, then reStructuredText) into its report, as does the workflow's
    own description: a mini workflow with the same captions, labels and input names."""
    outputs = report_outputs()
    assert {path for _, path, _ in outputs} >= {"results/figures/{fig}.png", "results/summary.csv",
                                                "results/claims.csv", "results/report.html"}
    rules, want = [], {}
    for i, (smk, path, args) in enumerate(outputs):
        caption = re.search(r'caption="([^"]+)"', args)
        assert caption, f"{smk}: report({path!r}) has no caption"
        rst = (REPO / "workflow" / "rules" / caption.group(1)).resolve()
        assert rst.is_file(), f"{smk}: caption {caption.group(1)} of {path} does not exist"
        category = re.search(r'category="([^"]+)"', args)
        assert category, f"{smk}: report({path!r}) has no category"
        want[rst.name] = plain_words(rst.read_text())
        labels = ', labels=lambda w: {"figure": w.fig, "title": "Fig. 4a"}' if "{fig}" in path else ""
        rules.append(f"""
rule r{i}:
    input:
        notebook="notebook.ipynb",
        summaries=["a.csv", "b.csv"],
    output:
        report("{path}", caption="{rst}", category="{category.group(1)}"{labels}),
    shell:
        "cp sample{Path(path).suffix} {{output}}"
""")
    (tmp_path / "sample.csv").write_text("a,b\n1,2\n")
    (tmp_path / "sample.html").write_text("<p>the study's report</p>")
    (tmp_path / "sample.png").write_bytes(base64.b64decode(ONE_PIXEL_PNG))
    (tmp_path / "Snakefile").write_text(
        f'report: "{REPO / "workflow" / "report" / "workflow.rst"}"\n\n'
        f'rule all:\n    input:\n        {[o.replace("{fig}", "fig4a") for _, o, _ in outputs]!r},\n\n'
        'rule inputs:\n    output:\n        "notebook.ipynb", "a.csv", "b.csv",\n    shell:\n        "touch {output}"\n'
        + "".join(rules))
    snakemake(tmp_path)
    snakemake(tmp_path, "--report", "report.html")
    page = (tmp_path / "report.html").read_text()
    assert "dlvirt measures how the execution platform" in page
    for name, words in want.items():
        assert words in page, f"caption {name} not in Snakemake's report (looked for {words!r})"
    # the Jinja in figure.rst filled from the job: its wildcard and its input files
    assert "notebooks/fig4a.ipynb" in page.replace("\\/", "/") and "a.csv</tt>, <tt" in page.replace("\\\"", "\"")
