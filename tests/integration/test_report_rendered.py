"""The self-contained HTML report with every figure, and opened in a real headless Chromium; the
workflow's short targets for figures, tables, claims and the report (snakemake -n); the captions of
Snakemake's own report."""

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import CHROMIUM_FLAGS, REPO, RUNS, jobs_that_would_run, smoke_config, snakemake, write_config
from dlvirt.analysis.catalog import FIGURES, LATENCY_FIGURES


def test_report_is_self_contained(built_report):
    html = built_report["report"].read_text()
    assert not re.search(r"""(src|href)=["']?(https?:|//|file:)""", html)
    assert "<link" not in html and "<script" not in html
    drawn = re.findall(r'<figure id="([^"]+)">', html)
    assert html.count('<img src="data:image/png;base64,') == len(drawn) > 0
    listed = re.findall(r'<li id="([^"]+)"><strong>', html)  # "Not measured here": a line, not an empty frame
    assert sorted(drawn + listed) == sorted(spec.id for spec in FIGURES)
    assert not listed or "Not measured here" in html
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


IMAGE_PROBE = """<script>window.addEventListener("load", () => { document.body.setAttribute("data-images",
  JSON.stringify([...document.images].map(i => [i.alt.split(":")[0], i.complete, i.naturalWidth, i.naturalHeight])));
});</script>"""


def test_report_renders_every_figure_in_chromium(built_report):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (setup.sh installs it)")
    probed = built_report["dir"] / "probed.html"
    probed.write_text(built_report["report"].read_text().replace("</body>", IMAGE_PROBE + "</body>"))
    profile = built_report["dir"] / "chromium-profile"
    proc = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", probed.as_uri()],
                          capture_output=True, text=True, timeout=120)
    match = re.search(r'data-images="([^"]*)"', proc.stdout)
    assert match, f"no image probe in Chromium's DOM (rc {proc.returncode}): {proc.stderr[-2000:]}"
    images = json.loads(match.group(1).replace("&quot;", '"'))
    assert sorted(i[0] for i in images) == sorted(re.findall(r'<figure id="([^"]+)">', probed.read_text()))
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
