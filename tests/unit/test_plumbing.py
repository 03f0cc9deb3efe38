"""The plumbing, checked with the noop app instead of a real model: the commands the workflow's rules
run, in their order, for a BM study of two launches: ``dlvirt dataset`` and ``dlvirt weights`` (rules
dataset and weights), ``dlvirt bench`` (rule benchmark: the BM platform, the runner, the LoadGen
harness with real LoadGen, verification), ``dlvirt aggregate`` (rule summarise_app), ``dlvirt
tables`` (rule tables) and a figure notebook in-process (rule figure runs it through papermill).
No engine and no framework: seconds. The same study through Snakemake itself:
tests/integration/test_workflow.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from conftest import NOOP_SETTINGS, REPO, noop_job_spec, run_notebook_in_process, write_plan
from dlvirt.cli import main
from dlvirt.system import cgroups

SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")


@pytest.mark.skipif(cgroups.version() is None, reason="BM launches need a cgroup controller")
def test_a_noop_study_on_bm_goes_through_every_layer(tmp_path):
    dataset, weights = tmp_path / "resources/datasets/noop", tmp_path / "resources/weights/noop/seed0/model.npz"
    assert main(["dataset", "--app", "noop", "--settings", json.dumps({"dataset": NOOP_SETTINGS["dataset"]}),
                 "--output-dir", str(dataset), "--schema", SCHEMA]) == 0
    assert main(["weights", "--app", "noop", "--settings", json.dumps({"dataset": NOOP_SETTINGS["dataset"], "seed": 0}),
                 "--dataset-dir", str(dataset), "--output", str(weights)]) == 0
    runs = []
    for replicate in (1, 2):
        run = tmp_path / f"results/runs/mlperf/noop/BM/1/PIN/CPU/{replicate}.json"
        spec = noop_job_spec(dataset, weights, replicate=replicate)
        assert main(["bench", "--spec", json.dumps(spec), "--output", str(run),
                     "--loadgen-dir", str(tmp_path / f"results/loadgen/{replicate}")]) == 0
        runs.append(run)
    record = json.loads(runs[0].read_text())
    assert record["verified"] and record["app"] == "noop" and len(record["runs"]) == 3
    assert record["model"]["weights_sha256"] == Path(f"{weights}.sha256").read_text().strip()
    # the load's own usage, and the weights asked into the page cache while the framework was imported
    load = record["model"]["load"]
    assert load["cpu_s"] >= 0 and load["major_faults"] >= 0 and load["minor_faults"] >= 0
    assert load["weights_prefetch"]["bytes"] == weights.stat().st_size and load["weights_prefetch"]["asking_s"] >= 0
    first = record["runs"][0]
    assert first["loadgen"]["validity"] == "VALID" and first["samples"] == 32 and first["quality"]["scored"] == 32
    assert first["threads"]["framework"]["intra_op"] == first["threads"]["intra_op"] == 1
    assert all(first["phases"][phase] > 0 for phase in ("pre_s", "infer_s", "post_s"))

    summary = tmp_path / "results/summary/mlperf/noop.csv"
    assert main(["aggregate", "--output", str(summary), *map(str, runs)]) == 0
    row = pd.read_csv(summary).iloc[0]
    assert (row.app, row.scenario, row.reps, row.replicates) == ("noop", "BM/1/PIN/CPU", 6, 2)
    assert row.loadgen_valid and row.mean_s > 0 and row.ci95_s >= 0

    host, plan = tmp_path / "results/host.json", write_plan(tmp_path / "results/plan.json")
    assert main(["host", "--output", str(host)]) == 0
    table1, table2 = tmp_path / "table1.csv", tmp_path / "table2.csv"
    assert main(["tables", "--host", str(host), "--plan", str(plan), "--table1", str(table1),
                 "--table2", str(table2), *map(str, runs)]) == 0
    apps = pd.read_csv(table1).set_index("app")
    assert apps.loc["NOOP", "jobs"] == 2 and apps.loc["NOOP", "framework"] == "numpy"

    png, pdf = tmp_path / "noop.png", tmp_path / "noop.pdf"
    run_notebook_in_process(REPO / "notebooks" / "e2e_vs_cores.ipynb", {
        "tool": "mlperf", "app": "noop", "processors": ["CPU"], "summaries": [str(summary)], "host": str(host),
        "plan": str(plan), "title": "noop E2E inference time", "ylabel": "E2E (s)", "png": str(png), "pdf": str(pdf)})
    assert png.stat().st_size > 10_000 and pdf.read_bytes().startswith(b"%PDF")


def test_the_default_and_paper_studies_leave_the_noop_app_out():
    import yaml

    from dlvirt.plan.planner import study_gaps

    for name in ("config.yaml", "paper.yaml"):
        config = yaml.safe_load((REPO / "config" / name).read_text())
        assert "noop" not in config["study"]["apps"] and "noop" not in config.get("apps", {}), name
    study = {"apps": ["ic"], "tools": ["mlperf"], "scenarios": ["Offline"],
             "matrix": [{"platforms": ["BM"], "cores": [1], "pinning": ["PIN"], "processors": ["CPU"]}]}
    gaps = [what for what, _ in study_gaps([], study)]
    assert any(g.startswith("app sr ") for g in gaps) and not any(g.startswith("app noop ") for g in gaps)


@pytest.mark.skipif(cgroups.version() is None, reason="BM launches need a cgroup controller")
def test_alternating_turns_serve_every_sample_once(tmp_path):
    """The stages alternating, the harness pre-processes turns of whole batches (at least
    TURN_SAMPLES_PER_WORKER samples per worker), its workers draining each: 100 samples in batches
    of 8 make turns of 32 at one core (and 64 at two), the last one short; every sample is
    pre-processed, inferred and answered once, and the turns' wait is the stall."""
    from dlvirt.run.harness import TURN_SAMPLES_PER_WORKER

    settings = {**NOOP_SETTINGS, "dataset": {**NOOP_SETTINGS["dataset"], "count": 100},
                "loadgen": {**NOOP_SETTINGS["loadgen"], "min_query_count": 100}}
    dataset = tmp_path / "dataset"
    assert main(["dataset", "--app", "noop", "--settings", json.dumps({"dataset": settings["dataset"]}),
                 "--output-dir", str(dataset), "--schema", SCHEMA]) == 0
    assert 100 % TURN_SAMPLES_PER_WORKER != 0  # a short last turn
    cores = min(2, len(os.sched_getaffinity(0)))
    spec = noop_job_spec(dataset, None, cores=cores, app_settings=settings, loadgen=settings["loadgen"],
                         repetitions=2)
    run = tmp_path / "run.json"
    assert main(["bench", "--spec", json.dumps(spec), "--output", str(run), "--loadgen-dir", str(tmp_path / "lg")]) == 0
    for repetition in json.loads(run.read_text())["runs"]:
        assert repetition["samples"] == 100 and repetition["quality"]["scored"] == 100
        assert not repetition["threads"]["overlap"] and repetition["phases"]["stall_s"] > 0
    answered = sorted((tmp_path / "lg").rglob("predictions.txt"))
    assert answered
    for predictions in answered:
        assert sorted(int(line.split()[0]) for line in predictions.read_text().splitlines()) == list(range(100))
