"""LLM on llama.cpp: a real smoke run on BM through the workflow (dataset, weights rule writing the
GGUF, the launch under LoadGen with token latencies, the summary's token columns). The pieces:
tests/unit/test_app_llm.py."""

import pytest

from conftest import run_one_job
from dlvirt.analysis.aggregate import summarise


@pytest.mark.slow
def test_smoke_run_llm_mlperf_on_bm(workflow_dir):
    config, run = run_one_job(workflow_dir, "llm", "BM/1/PIN/CPU")
    row = summarise([workflow_dir / "results/runs/mlperf/llm/BM/1/PIN/CPU/1.json"]).iloc[0]
    assert row.reps == 2 and row.loadgen_valid
    assert row.ttft_s > 0 and row.tpot_s > 0 and row.tokens_per_s > 0
    assert row.pre_s > 0 and row.infer_s > 0 and row.post_s > 0
    assert row.weights == "random" and row.dataset_source == "synthetic"
    settings = config["apps"]["llm"]
    rep = run["runs"][0]
    assert rep["phases"]["prefill_s"] > 0 and rep["phases"]["decode_s"] > 0 and rep["phases"]["decode_cpu_s"] > 0
    assert rep["quality"]["requests"] == settings["loadgen"]["min_query_count"]
    assert rep["loadgen"]["tokens"]["tokens_per_s"] > 0 and rep["loadgen"]["settings"]
    model = run["model"]
    assert model["engine"] == "llama.cpp" and model["architecture"]["name"] == settings["architecture"]
    assert model["gguf"]["vocab"] == model["architecture"]["vocab"] and model["weights_sha256"]
    assert run["verified"] and rep["threads"]["framework"]["n_threads"] == 1
