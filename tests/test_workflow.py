"""The real smoke study end to end: summary, host facts and Figure 4a; then incremental behaviour."""

import json

import pandas as pd
import pytest

from conftest import smoke_config, snakemake, write_config

pytestmark = pytest.mark.slow


def jobs_that_would_run(workdir, *args):
    # targets come before --configfile, which takes every following word as a file
    proc = snakemake(workdir, *args, "-n", "--quiet", "rules")
    counts = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] != "total":
            counts[parts[0]] = int(parts[1])
    return counts


def test_smoke_study_end_to_end_then_incremental(workflow_dir):
    config = write_config(workflow_dir / "smoke.yaml", smoke_config())
    snakemake(workflow_dir, "all", "--configfile", str(config))

    summary = pd.read_csv(workflow_dir / "results" / "summary.csv")
    bm = summary[(summary.platform == "BM") & (summary.app == "ic") & (summary.tool == "mlperf")]
    assert sorted(bm.scenario) == ["BM/1/PIN/CPU", "BM/1/VNL/CPU", "BM/2/PIN/CPU", "BM/2/VNL/CPU"]
    assert (bm.reps == 2).all() and (bm.mean_s > 0).all() and bm.loadgen_valid.all()
    assert (bm.dataset_source == "synthetic").all() and (bm.weights == "random").all()
    assert (workflow_dir / "results" / "figures" / "fig4a.png").stat().st_size > 10_000
    assert (workflow_dir / "results" / "notebooks" / "fig4a.ipynb").exists()
    host = json.loads((workflow_dir / "results" / "host.json").read_text())
    assert host["capabilities"]["cores"] >= 1 and "packages" in host

    run = json.loads((workflow_dir / "results/runs/mlperf/ic/BM/1/VNL/CPU.json").read_text())
    assert run["verified"] and len(run["runs"]) == 2
    assert run["runs"][0]["observed"]["quota_cores"] == pytest.approx(1.0)
    assert run["runs"][0]["threads"]["intra_op"] == 1

    # A second run has nothing to do.
    assert jobs_that_would_run(workflow_dir, "all", "--configfile", str(config)) == {}

    # Changing one app setting reruns that app's benchmark jobs and what depends on them, not the dataset.
    changed = smoke_config()
    changed["apps"]["ic"]["batch_size"] = 4
    write_config(config, changed)
    counts = jobs_that_would_run(workflow_dir, "all", "--configfile", str(config))
    assert counts.get("benchmark") == len(summary[summary.app == "ic"])  # every ic scenario (BM, CN)
    assert "dataset" not in counts and "host_facts" not in counts and "cn_image" not in counts


def test_one_figure_builds_only_what_it_needs(workflow_dir):
    config = write_config(workflow_dir / "smoke.yaml", smoke_config())
    counts = jobs_that_would_run(workflow_dir, "results/figures/fig4a.png", "--configfile", str(config))
    assert counts["figure"] == 1 and "summary" not in counts and "all" not in counts
