"""LLM on llama.cpp: its smoke jobs in the shared smoke study (dataset, weights rule writing the GGUF,
the launch under LoadGen with token latencies, the summary's token columns) on the CPU and, where the
host has a GPU, on it. The pieces: tests/unit/test_app_llm.py."""

import pytest

from conftest import copy_study, smoke_config, smoke_job, snakemake, write_config
from dlvirt.analysis.aggregate import summarise
from dlvirt.system.hostinfo import capabilities


@pytest.mark.slow
def test_smoke_run_llm_mlperf_on_bm(smoke_study):
    config, run = smoke_job(smoke_study, "llm", "BM/1/PIN/CPU")
    row = summarise([smoke_study / "results/runs/mlperf/llm/BM/1/PIN/CPU/1.json"]).iloc[0]
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
    try:
        import llama_cpp
    except ImportError as err:
        return f"llama-cpp-python is not installed ({err})"
    if not llama_cpp.llama_supports_gpu_offload():
        return "this llama-cpp-python build has no GPU backend (./setup.sh builds the GPU stack's where a GPU is)"
    return None


NO_GPU_ENGINE = _no_gpu_engine()


@pytest.mark.slow
@pytest.mark.skipif(NO_GPU_ENGINE is not None, reason=str(NO_GPU_ENGINE))
def test_smoke_run_llm_mlperf_on_a_gpu(smoke_study, tmp_path):
    """Where a GPU is: the smoke job on BM's GPU scenario (the smoke study's dataset and GGUF), every
    layer offloaded, TTFT and TPOT measured."""
    workdir = copy_study(smoke_study, tmp_path / "wf", runs=False)
    config = smoke_config()
    config["study"].update(apps=["llm"], tools=["mlperf"], matrix=[
        {"platforms": ["BM"], "cores": [1], "pinning": ["VNL"], "processors": ["GPU"]}])
    target = "results/runs/mlperf/llm/BM/1/VNL/GPU/1.json"
    snakemake(workdir, target, "--configfile", str(write_config(workdir / "gpu.yaml", config)))
    _, run = smoke_job(workdir, "llm", "BM/1/VNL/GPU")
    assert run["verified"] and run["model"]["offload"] == {"gpu_layers": -1, "supports_gpu_offload": True}
    row = summarise([workdir / target]).iloc[0]
    assert row.ttft_s > 0 and row.tpot_s > 0 and row.tokens_per_s > 0
