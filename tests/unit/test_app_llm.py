"""The LLM app (dlvirt.apps.llm): its prompts' declared length distribution, its tokenizer of the
architecture's vocabulary size, its GGUF writer, and the app on llama.cpp at the tiny shape (real
llama.cpp through llama-cpp-python, a fraction of a second)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import one_thread
from dlvirt.apps import llm_model, llm_workload
from dlvirt.apps.base import AppError, verified_weights
from dlvirt.apps.llm import TextGeneration
from dlvirt.run.harness import token_record

LENGTHS = {"input": {"median": 24, "sigma": 0.5, "min": 4, "max": 64},
           "output": {"median": 6, "sigma": 0.4, "min": 2, "max": 12}}
SETTINGS = {"dataset": {"count": 6, "seed": 3, "path": None, "lengths": LENGTHS}, "seed": 0, "architecture": "tiny",
            "quantisation": "Q8_0", "engine": "llama.cpp"}


@pytest.fixture(scope="module")
def llm_dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("llm-dataset")
    TextGeneration.prepare_dataset(out, {"dataset": SETTINGS["dataset"]})  # all the dataset rule hands over
    return out


@pytest.fixture(scope="module")
def llm_weights(llm_dataset, tmp_path_factory):
    path = tmp_path_factory.mktemp("llm-weights") / TextGeneration.weights_file_name(SETTINGS)
    TextGeneration.build_weights(SETTINGS, llm_dataset, path)
    return verified_weights(path)


def test_lengths_are_drawn_log_normal_and_clipped():
    rng = np.random.default_rng(0)
    drawn = llm_workload.draw_lengths(rng, {"median": 100, "sigma": 1.0, "min": 20, "max": 300}, 4000, "input")
    assert drawn.min() == 20 and drawn.max() == 300 and 80 <= np.median(drawn) <= 120
    with pytest.raises(AppError, match=r"apps.llm.dataset.lengths.output: missing sigma"):
        llm_workload.draw_lengths(rng, {"median": 5, "min": 1, "max": 9}, 3, "output")
    with pytest.raises(AppError, match=r"1 <= min <= max"):
        llm_workload.draw_lengths(rng, {"median": 5, "sigma": 1, "min": 9, "max": 1}, 3, "input")


def test_the_prompt_file_holds_enough_words_and_says_its_distribution(llm_dataset):
    prompts = llm_workload.read_prompts(llm_dataset / llm_workload.PROMPTS)
    assert len(prompts) == 6 and len({p.id for p in prompts}) == 6
    assert all(len(p.prompt.split()) >= p.input_tokens and 2 <= p.output_tokens <= 12 for p in prompts)
    info = json.loads((llm_dataset / "dataset.json").read_text())
    assert info["lengths"] == LENGTHS and "MLPerf" in info["distribution"] and info["source"] == "synthetic"
    assert info["output_tokens"]["sum"] == sum(p.output_tokens for p in prompts)


def test_a_bad_prompt_line_is_named(tmp_path):
    path = tmp_path / llm_workload.PROMPTS
    path.write_text('{"id": "a", "prompt": "hi", "output_tokens": 3}\n{"id": "b", "prompt": "x"}\n')
    with pytest.raises(AppError, match=r"prompts.jsonl:2: not a prompt line"):
        llm_workload.read_prompts(path)
    path.write_text('{"id": "a", "prompt": "hi", "input_tokens": 0, "output_tokens": 3}\n')
    with pytest.raises(AppError, match=r":1: input_tokens and output_tokens must be at least 1"):
        llm_workload.read_prompts(path)


def test_the_vocabulary_has_the_architectures_size_with_byte_fallback():
    words = [f"w{k}ord{k * 7}" for k in range(600)]
    vocabulary = llm_model.train_vocabulary(["the cat sat on the mat"], words, 512)
    assert len(vocabulary.tokens) == len(set(vocabulary.tokens)) == 512
    assert vocabulary.tokens[:3] == list(llm_model.SPECIAL) and vocabulary.tokens[3] == "<0x00>"
    assert vocabulary.types[3:259] == [llm_model.BYTE] * 256 and vocabulary.scores[259:262] == [0.0, -1.0, -2.0]
    with pytest.raises(AppError, match="more text"):
        llm_model.train_vocabulary(["a b"], [], 2000)


def test_the_gguf_holds_the_architecture_quantised(llm_dataset, llm_weights):
    facts = llm_model.read_metadata(llm_weights["path"])
    tiny = llm_model.ARCHITECTURES["tiny"]
    assert facts["architecture"] == "llama" and facts["vocab"] == tiny.vocab
    assert (facts["layers"], facts["embedding"], facts["heads"], facts["kv_heads"]) == (2, 64, 4, 2)
    assert facts["tokenizer.ggml.model"] == "llama" and facts["tensors"] == 2 + 9 * tiny.layers + 1
    import gguf

    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(llm_weights["path"]).tensors}
    assert types["blk.0.ffn_down.weight"] == "Q8_0" and types["blk.0.attn_norm.weight"] == "F32"


def test_the_model_file_is_the_same_bytes_whenever_it_is_written(llm_dataset, llm_weights, tmp_path):
    again = tmp_path / "again.gguf"
    TextGeneration.write_model(SETTINGS, llm_dataset, again)
    assert again.read_bytes() == Path(llm_weights["path"]).read_bytes()
    other = tmp_path / "q4.gguf"
    TextGeneration.write_model({**SETTINGS, "quantisation": "Q4_0"}, llm_dataset, other)
    assert other.stat().st_size < again.stat().st_size


def test_published_model_is_pinned_by_revision_and_digest():
    published = llm_model.PUBLISHED
    assert published["architecture"] in llm_model.ARCHITECTURES and len(published["sha256"]) == 64
    assert "/resolve/" in published["url"] and published["url"].endswith(published["file"])


def test_the_app_generates_the_drawn_lengths_on_llama_cpp(llm_dataset, llm_weights, tmp_path):
    app = TextGeneration(SETTINGS, llm_dataset, "CPU", one_thread(), initial_weights=llm_weights)
    app.load_model()
    app.first_call()
    firsts: list[tuple[int, int]] = []
    app.first_token = lambda position, token: firsts.append((position, token))
    app.begin_repetition(tmp_path)
    items = [app.preprocess(i) for i in range(3)]
    assert [len(tokens) for tokens, _ in items] == [p.input_tokens for p in app.prompts[:3]]
    assert all(tokens[0] == llm_model.BOS for tokens, _ in items)
    outputs = app.infer(items)
    assert [len(o) for o in outputs] == [p.output_tokens for p in app.prompts[:3]]
    assert firsts == [(k, outputs[k][0]) for k in range(3)]
    answers = app.postprocess([0, 1, 2], outputs)
    assert [np.frombuffer(a, dtype=np.int32).tolist() for a in answers] == outputs
    phases = app.infer_phases()
    assert phases["prefill_s"] > 0 and phases["decode_s"] > 0 and phases["decode_cpu_s"] > 0
    quality = app.end_repetition()
    assert quality["output_tokens"] == sum(len(o) for o in outputs) and quality["requests"] == 3
    assert app.framework_threads()["intra_op"] == 1
    provenance = app.model_provenance()
    assert provenance["weights"] == "random" and provenance["weights_sha256"] == llm_weights["sha256"]
    assert provenance["gguf"]["vocab"] == 512 and provenance["engine"] == "llama.cpp"
    # greedy decoding: the same request gives the same tokens (every platform generates the same text)
    assert app.infer(items[:1]) == outputs[:1]
    model_only = app.synthetic_batch(2)
    assert len(app.infer(model_only)) == 2 and len(model_only[0][0]) == int(np.median(
        [p.input_tokens for p in app.prompts]))
    text = "the cat sat on the mat"
    assert app.engine.detokenize(app.engine.tokenize(text)[1:]).strip() == text


def test_a_gpu_job_needs_a_build_with_a_gpu_backend(llm_dataset, llm_weights):
    import llama_cpp

    if llama_cpp.llama_supports_gpu_offload():
        pytest.skip("this llama-cpp-python build has a GPU backend: the refusal cannot be seen")
    app = TextGeneration(SETTINGS, llm_dataset, "GPU", one_thread(), initial_weights=llm_weights)
    with pytest.raises(AppError, match="no GPU backend"):
        app.load_model()


def test_loadgens_token_measurements_are_kept():
    detail = {"result_tokens_per_second": 12.5, "result_completed_tokens_per_second": 11.0,
              "result_first_token_50.00_percentile_latency_ns": 5,
              "result_time_per_output_token_99.00_percentile_ns": 7}
    assert token_record(detail, "Offline") == {"tokens_per_s": 12.5}
    latency = token_record(detail, "Server")
    assert latency["tokens_per_s"] == 11.0 and latency["first_token_ns"]["p50"] == 5
    assert latency["time_per_output_token_ns"]["p99"] == 7
