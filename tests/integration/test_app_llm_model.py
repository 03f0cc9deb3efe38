"""LLM on llama.cpp: a real smoke run on BM through the workflow (dataset, weights rule writing the
GGUF, the launch under LoadGen with token latencies, the summary's token columns), on the CPU and,
where the host has a GPU, on it. The pieces: tests/unit/test_app_llm.py."""

import pytest

from conftest import run_one_job
from dlvirt.analysis.aggregate import summarise
from dlvirt.system.hostinfo import capabilities


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


def _no_gpu_engine() -> str | None:
    if not capabilities().gpus:
        return "no GPU on this host (nvidia-smi lists none): LLM's GPU path (every layer offloaded) is not run"
    import llama_cpp

    if not llama_cpp.llama_supports_gpu_offload():
        return "this llama-cpp-python build has no GPU backend (./setup.sh builds the GPU stack's where a GPU is)"
    return None


@pytest.mark.slow
def test_smoke_run_llm_mlperf_on_a_gpu(workflow_dir):
    """Where a GPU is: the same smoke job on BM's GPU scenario, every layer offloaded, TTFT and TPOT measured."""
    missing = _no_gpu_engine()
    if missing:
        pytest.skip(missing)
    _, run = run_one_job(workflow_dir, "llm", "BM/1/VNL/GPU")
    assert run["verified"] and run["model"]["offload"] == {"gpu_layers": -1, "supports_gpu_offload": True}
    row = summarise([workflow_dir / "results/runs/mlperf/llm/BM/1/VNL/GPU/1.json"]).iloc[0]
    assert row.ttft_s > 0 and row.tpot_s > 0 and row.tokens_per_s > 0
