"""The dlbs tool on a real IC model-only smoke run on BM."""


import numpy as np
import pandas as pd
import pytest

from conftest import smoke_job
from dlvirt.analysis.aggregate import summarise
from dlvirt.run.tools import dlbs


@pytest.mark.slow
def test_smoke_run_ic_dlbs_on_bm(smoke_study):
    workflow_dir = smoke_study  # conftest.smoke_study's launch: read, never written
    config, run = smoke_job(workflow_dir, "ic", "BM/1/VNL/CPU", tool="dlbs")
    row = summarise([workflow_dir / "results/runs/dlbs/ic/BM/1/VNL/CPU/1.json"]).iloc[0]
    assert row.tool == "dlbs" and row.reps == 2
    assert row.mean_s == pytest.approx(row.infer_s) and row.mean_s > 0
    assert np.isnan(row.pre_s) and np.isnan(row.post_s) and pd.isna(row.loadgen_valid)

    assert run["verified"] and run["runs"][0]["observed"]["quota_cores"] == pytest.approx(1.0)
    batches = config["dlbs"]["exp.num_batches"]
    for rep in run["runs"]:
        log = workflow_dir / "results/loadgen/dlbs/ic/BM/1/VNL/CPU/1" / rep["tool_output"]["log"]
        logged = dlbs.parse_log_file(log)
        assert logged["exp.framework"] == "tensorflow" and logged["exp.model"] == "resnet50"
        assert logged["exp.phase"] == "inference" and logged["exp.num_batches"] == batches
        assert logged["exp.replica_batch"] == config["apps"]["ic"]["batch_size"]
        assert len(logged["results.time_data"]) == batches
        # the repetition's time is the sum of the timed batches, as logged in ms
        assert rep["e2e_s"] == pytest.approx(sum(logged["results.time_data"]) / 1000)
        assert logged["results.time"] == pytest.approx(1000 * rep["e2e_s"] / batches)
        assert rep["samples"] == batches * logged["exp.effective_batch"]
