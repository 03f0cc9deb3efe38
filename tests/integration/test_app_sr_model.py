"""SR model (RNN-T): shapes, greedy and scheduled decoding, checked weights, the weights resource,
and one real benchmark job on BM (the data: tests/unit/test_app_sr.py)."""


from typing import Any

import pytest
import torch

from conftest import one_thread, smoke_job
from dlvirt.apps.base import AppError, sha256_file, verified_weights
from dlvirt.apps.sr import SpeechRecognition
from dlvirt.apps.sr.decoder import emission_schedule, greedy_decode, transcript
from dlvirt.apps.sr.features import FEATURES, SAMPLE_RATE, LogMelFeatures
from dlvirt.apps.sr.model import BLANK, LABELS, NUM_CLASSES, build_model

THREADS = one_thread()


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model()


def test_model_output_shapes(model):
    with torch.inference_mode():
        encoded, lengths = model.encoder(torch.randn(101, 2, FEATURES), torch.tensor([101, 80]))
        assert tuple(encoded.shape) == (2, 51, 1024) and lengths.tolist() == [51, 40]
        g, (h, c) = model.prediction(torch.tensor([-1, 5]), None)
        assert tuple(g.shape) == (2, 320) and tuple(h.shape) == tuple(c.shape) == (2, 2, 320)
        assert tuple(model.joint(encoded[:, 0], g).shape) == (2, NUM_CLASSES)
    names = dict(model.named_parameters())
    assert "encoder.pre_rnn.lstm.weight_ih_l0" in names and "joint.net.3.weight" in names  # the reference's names
    assert names["encoder.pre_rnn.lstm.bias_ih_l0"][1024:2048].eq(1).all()  # forget-gate bias


def test_greedy_decoding_follows_the_joint_network(model):
    encoded = torch.randn(1, 4, 1024)
    joint_bias = model.joint.net[3].bias
    saved = joint_bias.detach().clone()
    try:
        with torch.no_grad():
            joint_bias.copy_(torch.zeros(NUM_CLASSES))
            joint_bias[BLANK] = 1e6  # always blank: one joint step per encoder step, nothing emitted
            blank = greedy_decode(model, encoded, [4], max_symbols=30, schedules=None)[0]
            joint_bias[BLANK] = 0
            joint_bias[LABELS.index("a")] = 1e6  # never blank: capped at max_symbols per step
            capped = greedy_decode(model, encoded, [4], max_symbols=3, schedules=None)[0]
    finally:
        with torch.no_grad():
            joint_bias.copy_(saved)
    assert blank.labels == [] and blank.joint_steps == 4
    assert transcript(capped.labels) == "a" * 12 and capped.joint_steps == 12


def test_scheduled_decoding_emits_the_schedule_and_runs_the_joint_at_every_step(model):
    schedule = emission_schedule(seed=0, key=7, steps=10, symbols=8, cap=30)
    assert schedule.sum() == 8 and (schedule == emission_schedule(0, 7, 10, 8, 30)).all()
    with torch.inference_mode():
        out = greedy_decode(model, torch.randn(1, 10, 1024), [10], max_symbols=30, schedules=[schedule])[0]
    assert len(out.labels) == 8 and BLANK not in out.labels
    assert out.joint_steps == 8 + 10  # each emitted symbol, plus the blank that ends every step
    # a batch decodes each utterance on its own schedule and length
    short = emission_schedule(seed=0, key=8, steps=6, symbols=3, cap=30)
    with torch.inference_mode():
        pair = greedy_decode(model, torch.randn(2, 10, 1024), [10, 6], max_symbols=30, schedules=[schedule, short])
    assert [len(d.labels) for d in pair] == [8, 3] and [d.joint_steps for d in pair] == [18, 9]


def test_model_only_batch_has_the_workloads_shape_and_decodes(sr_dataset):
    app = SpeechRecognition({"dataset": {"count": 2}, "seed": 0}, sr_dataset, "CPU", THREADS)
    app.load_model()
    batch = app.synthetic_batch(2)
    assert [tuple(u.features.shape) for u in batch] == [(LogMelFeatures.frames(2 * SAMPLE_RATE), 240)] * 2
    decoded = app.infer(batch)
    assert [len(d.labels) for d in decoded] == [u.symbols for u in batch] == [30, 30]


def test_checked_weights_load_and_switch_to_greedy(tmp_path, sr_dataset, model):
    path = tmp_path / "rnnt.pt"
    torch.save({"state_dict": {("joint_net" + k[len("joint.net"):] if k.startswith("joint.net") else k): v
                               for k, v in model.state_dict().items()}}, path)
    settings: dict[str, Any] = {"dataset": {"count": 2}, "seed": 0,
                                "weights": {"path": str(path), "sha256": sha256_file(path)}}
    app = SpeechRecognition(settings, sr_dataset, "CPU", THREADS)
    app.load_model()
    assert app.decoding == "greedy"
    provenance = app.model_provenance()
    assert provenance["weights"] == "loaded" and provenance["sha256"] == sha256_file(path)
    assert "decoding_note" not in provenance
    settings["weights"]["sha256"] = "0" * 64
    with pytest.raises(AppError, match="sha256"):
        SpeechRecognition(settings, sr_dataset, "CPU", THREADS).load_model()


def test_the_weights_resource_loads_into_working_lstms(tmp_path, sr_dataset):
    settings = {"dataset": {"count": 2}, "seed": 3, "weights": {"path": None}}
    path = tmp_path / SpeechRecognition.weights_file_name(settings)
    SpeechRecognition.build_weights(settings, sr_dataset, path)
    built = SpeechRecognition(settings, sr_dataset, "CPU", THREADS)
    built.load_model()
    cached = SpeechRecognition(settings, sr_dataset, "CPU", THREADS, initial_weights=verified_weights(path))
    cached.load_model()
    # the LSTMs run on the assigned tensors (their flat weight lists follow the assignment)
    batch = built.synthetic_batch(1)
    with torch.inference_mode():
        frames = batch[0].features.unsqueeze(1)
        lengths = torch.tensor([len(frames)])
        assert torch.equal(built.model.encoder(frames, lengths)[0], cached.model.encoder(frames, lengths)[0])
    assert [d.labels for d in built.infer(batch)] == [d.labels for d in cached.infer(batch)]
    assert cached.model_provenance()["weights"] == "random" and cached.decoding == "scheduled"


@pytest.mark.slow
def test_smoke_benchmark_on_bm(smoke_study):
    config, result = smoke_job(smoke_study, "sr", "BM/1/PIN/CPU")
    assert result["verified"] and len(result["runs"]) == config["study"]["repetitions"]
    assert result["dataset"]["source"] == "synthetic" and result["model"]["weights"] == "random"
    assert result["model"]["decoding"] == "scheduled" and "never emit blank" in result["model"]["decoding_note"]
    for run in result["runs"]:
        assert run["loadgen"]["validity"] == "VALID" and run["samples"] == 2
        assert run["quality"]["decoding"] == "scheduled" and run["quality"]["scored"] == 2
        assert run["quality"]["joint_steps"] > run["quality"]["symbols_emitted"] > 0
        assert all(run["phases"][phase] > 0 for phase in ("pre_s", "infer_s", "post_s"))
        assert run["threads"]["intra_op"] == 1
