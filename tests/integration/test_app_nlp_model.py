"""NLP models: BERT output shapes, the app's phases on BERT-tiny, the weights resource, and a real
smoke run on BM (the data: tests/unit/test_app_nlp.py)."""

import json

import numpy as np
import pytest

from conftest import smoke_job
from dlvirt.analysis.aggregate import summarise
from dlvirt.apps import squad
from dlvirt.apps.base import ThreadPlan, verified_weights
from dlvirt.apps.nlp import ARCHITECTURES, QuestionAnswering, bert_config


def test_bert_large_is_the_mlperf_size():
    """The architecture the default config runs, built on the meta device (no memory, no compute)."""
    import torch
    from transformers import BertForQuestionAnswering

    with torch.device("meta"):
        model = BertForQuestionAnswering(bert_config("bert-large", 1000))
        ids = torch.zeros(2, squad.MAX_SEQ_LENGTH, dtype=torch.long)
        out = model(input_ids=ids, token_type_ids=ids)
    assert len(model.bert.encoder.layer) == 24 and model.config.hidden_size == 1024
    assert model.config.vocab_size == 30522
    assert 330e6 < sum(p.numel() for p in model.parameters()) < 340e6
    assert out.start_logits.shape == out.end_logits.shape == (2, squad.MAX_SEQ_LENGTH)


def test_app_phases_and_model_output_shape(nlp_dataset):
    settings = {"batch_size": 2, "seed": 0, "architecture": "bert-tiny", "vocab": {"path": None},
                "dataset": {"path": None, "count": 40, "seed": 3}, "weights": {"path": None}}
    app = QuestionAnswering(settings, nlp_dataset, "CPU", ThreadPlan("granted", 1, 1, 1, 1))
    app.load_model()
    assert app.sample_count() == 40
    items = [app.preprocess(0), app.preprocess(1)]
    outputs = app.infer(items)
    assert len(outputs) == 2
    # padding "longest": every window cut after the batch's longest, the real tokens' logits those
    # of the windows at full length (the attention mask hides the padding)
    longest = max(int(f.attention_mask.sum(axis=1).max()) for f in items)
    assert longest < squad.MAX_SEQ_LENGTH
    app.padding = "max_length"
    padded = app.infer(items)
    for (features, starts, ends), (_, full_starts, full_ends) in zip(outputs, padded, strict=True):
        assert starts.shape == ends.shape == (features.windows, longest)
        assert full_starts.shape == (features.windows, squad.MAX_SEQ_LENGTH)
        real = features.attention_mask[:, :longest] == 1
        assert np.allclose(starts[real], full_starts[:, :longest][real], atol=1e-5)
        assert np.allclose(ends[real], full_ends[:, :longest][real], atol=1e-5)
    app.padding = "longest"
    app.begin_repetition(nlp_dataset / "rep")
    answers = app.postprocess([0, 1], outputs)
    quality = app.end_repetition()
    for index, answer in enumerate(answers):
        assert answer.decode() and answer.decode() in app.examples[index].context
    assert quality["scored"] == 2 and 0 <= quality["f1"] <= 100
    assert set(json.loads((nlp_dataset / "rep" / "predictions.json").read_text())) == {e.qid for e in app.examples[:2]}
    synthetic = app.infer(app.synthetic_batch(3))
    assert [s.shape for _, s, _ in synthetic] == [(1, squad.MAX_SEQ_LENGTH)] * 3
    provenance = app.model_provenance()
    assert provenance["model"] == "BERT-tiny" and provenance["mlperf_reference_size"] is False
    assert "NOT the MLPerf BERT-large" in provenance["note"]
    assert provenance["config"]["num_hidden_layers"] == ARCHITECTURES["bert-tiny"]["num_hidden_layers"]
    assert provenance["vocab"]["source"].startswith("trained")
    assert provenance["padding"] == "longest"


def test_the_weights_resource_holds_every_tensor_non_persistent_buffers_too(nlp_dataset, tmp_path):
    settings = {"batch_size": 2, "seed": 1, "architecture": "bert-tiny", "vocab": {"path": None},
                "dataset": {"path": None, "count": 40, "seed": 3}, "weights": {"path": None}}
    assert QuestionAnswering.weights_tag(settings) == "bert-tiny-seed1"
    path = tmp_path / QuestionAnswering.weights_file_name(settings)
    QuestionAnswering.build_weights(settings, nlp_dataset, path)
    built = QuestionAnswering(settings, nlp_dataset, "CPU", ThreadPlan("granted", 1, 1, 1, 1))
    built.load_model()
    cached = QuestionAnswering(settings, nlp_dataset, "CPU", ThreadPlan("granted", 1, 1, 1, 1),
                               initial_weights=verified_weights(path))
    cached.load_model()
    # position_ids and token_type_ids are buffers BERT does not save in its state dict
    assert not any(t.is_meta for t in [*cached.model.parameters(), *cached.model.buffers()])
    batch = built.synthetic_batch(2)
    for (_, s1, e1), (_, s2, e2) in zip(built.infer(batch), cached.infer(batch), strict=True):
        assert np.array_equal(s1, s2) and np.array_equal(e1, e2)
    assert cached.model_provenance()["weights"] == "random"


@pytest.mark.slow
def test_smoke_run_nlp_mlperf_on_bm(smoke_study):
    config, run = smoke_job(smoke_study, "nlp", "BM/1/PIN/CPU")
    row = summarise([smoke_study / "results/runs/mlperf/nlp/BM/1/PIN/CPU/1.json"]).iloc[0]
    assert row.reps == 2 and row.loadgen_valid
    assert row.infer_s > 0 and row.pre_s > 0 and row.post_s > 0
    assert row.dataset_source == "synthetic" and row.weights == "random"
    assert run["verified"] and run["runs"][0]["observed"]["affinity"] == run["expected"]["affinity"]
    assert run["model"]["model"] == "BERT-tiny" and not run["model"]["mlperf_reference_size"]
    assert run["runs"][0]["quality"]["scored"] == config["apps"]["nlp"]["loadgen"]["min_query_count"]
    predictions = smoke_study / "results/loadgen/mlperf/nlp/BM/1/PIN/CPU/1/rep-0001/predictions.json"
    assert len(json.loads(predictions.read_text())) == config["apps"]["nlp"]["dataset"]["count"]
