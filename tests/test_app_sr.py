"""SR app (RNN-T): WAV reading, features, model shapes, decoding and post-processing on known
inputs, LibriSpeech conversion, checked weights, and one real benchmark job on BM."""

import io
import json
import tarfile
import wave

import numpy as np
import pytest
import torch

from conftest import run_one_job
from dlvirt.apps.base import AppError, ThreadPlan, sha256_file, verified_weights
from dlvirt.apps.sr import SpeechRecognition
from dlvirt.apps.sr.decoder import Decoded, emission_schedule, greedy_decode, transcript, word_errors
from dlvirt.apps.sr.features import FEATURES, SAMPLE_RATE, LogMelFeatures, mel_filterbank, read_wav, write_wav
from dlvirt.apps.sr.librispeech import MANIFEST, convert_librispeech
from dlvirt.apps.sr.model import BLANK, LABELS, NUM_CLASSES, build_model

THREADS = ThreadPlan(policy="granted", cores=1, intra_op=1, inter_op=1, pre_workers=1)


def tone(hz: float, seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (8000 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("sr-dataset")
    SpeechRecognition.prepare_dataset(out, {"dataset": {"path": None, "count": 2, "seconds": 2.0, "seed": 3}})
    return out


def test_wav_roundtrip_and_format_check(tmp_path):
    samples = np.array([0, 16384, -32768, 32767], dtype=np.int16)
    write_wav(tmp_path / "a.wav", samples)
    assert read_wav(tmp_path / "a.wav").tolist() == [0.0, 0.5, -1.0, 32767 / 32768]
    with wave.open(str(tmp_path / "stereo.wav"), "wb") as wav:
        wav.setnchannels(2)
        wav.setsampwidth(2)
        wav.setframerate(8000)
        wav.writeframes(b"\0" * 16)
    with pytest.raises(AppError, match="stereo.wav.*mono 16-bit 16000 Hz"):
        read_wav(tmp_path / "stereo.wav")


def test_mel_filterbank_is_slaney_shaped():
    bank = mel_filterbank()
    assert bank.shape == (80, 257) and (bank >= 0).all()
    peaks = bank.argmax(axis=1)
    assert (np.diff(peaks) >= 0).all() and peaks[-1] > 240
    # Slaney normalisation: each triangle's height is 2 / its width in Hz, so its area is about 1 per Hz bin width
    bin_hz = SAMPLE_RATE / 2 / 256
    assert np.allclose(bank.sum(axis=1) * bin_hz, 1.0, rtol=0.15)


def test_features_shape_and_a_tone_lands_in_its_mel_band():
    features = LogMelFeatures()
    noise = np.random.default_rng(0).normal(0, 0.1, size=15 * SAMPLE_RATE).astype(np.float32)
    out = features(noise)
    assert tuple(out.shape) == (500, FEATURES) == (LogMelFeatures.frames(15 * SAMPLE_RATE), 240)
    # per-feature normalisation over the utterance
    assert torch.allclose(out.mean(dim=0), torch.zeros(FEATURES), atol=1e-3)
    assert torch.allclose(out.std(dim=0), torch.ones(FEATURES), atol=1e-3)
    short = features(tone(1000, 3.0).astype(np.float32) / 32768)
    assert tuple(short.shape) == (100, 240)
    # before normalisation the strongest mel band of a 1 kHz tone is the one whose centre is nearest 1 kHz
    x = torch.from_numpy(tone(1000, 1.0).astype(np.float32) / 32768)
    power = torch.stft(x, 512, 160, 320, window=features.window, return_complex=True).abs().square()
    band = int((features.filterbank @ power).mean(dim=1).argmax())
    centre_bin = int(np.argmax(mel_filterbank()[band]))
    assert abs(centre_bin * SAMPLE_RATE / 512 - 1000) < 60


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


def test_postprocessing_on_known_labels(tmp_path, dataset):
    assert transcript([LABELS.index(c) for c in "hi there"]) == "hi there"
    assert word_errors("the cat sat", "the bat sat") == (1, 3)
    assert word_errors("a b", "") == (2, 2)
    app = SpeechRecognition({"dataset": {"count": 2}, "seed": 0}, dataset, "CPU", THREADS)
    app.decoding = "scheduled"
    app.begin_repetition(tmp_path)
    reference = app.entries[0]["transcript"]
    labels = [LABELS.index(c) for c in reference]
    answers = app.postprocess([0], [Decoded(labels, joint_steps=len(labels) + 5)])
    quality = app.end_repetition()
    assert np.frombuffer(answers[0], dtype=np.int64).tolist() == labels
    assert quality["wer"] == 0.0 and quality["symbols_emitted"] == len(labels) and quality["decoding"] == "scheduled"
    assert (tmp_path / "transcripts.tsv").read_text().strip().endswith(reference)


def test_synthetic_dataset_is_mlperf_shaped_and_preprocesses(dataset):
    info = json.loads((dataset / "dataset.json").read_text())
    assert info["source"] == "synthetic" and info["count"] == 2
    manifest = json.loads((dataset / MANIFEST).read_text())
    entry = manifest[0]["files"][0]
    assert entry["sample_rate"] == 16000.0 and entry["duration"] == 2.0 and entry["fname"].startswith("dev-clean-wav/")
    assert len(read_wav(dataset / entry["fname"])) == 2 * SAMPLE_RATE
    assert set(manifest[0]["transcript"]) <= set(LABELS)
    app = SpeechRecognition({"dataset": {"count": 2}, "seed": 0}, dataset, "CPU", THREADS)
    utterance = app.preprocess(1)
    assert tuple(utterance.features.shape) == (LogMelFeatures.frames(2 * SAMPLE_RATE), 240)
    assert utterance.symbols == len(manifest[1]["transcript"])


def test_model_only_batch_has_the_workloads_shape_and_decodes(dataset):
    app = SpeechRecognition({"dataset": {"count": 2}, "seed": 0}, dataset, "CPU", THREADS)
    app.load_model()
    batch = app.synthetic_batch(2)
    assert [tuple(u.features.shape) for u in batch] == [(LogMelFeatures.frames(2 * SAMPLE_RATE), 240)] * 2
    decoded = app.infer(batch)
    assert [len(d.labels) for d in decoded] == [u.symbols for u in batch] == [30, 30]


def test_librispeech_conversion_drops_long_clips(tmp_path):
    import soundfile

    archive = tmp_path / "dev-clean.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        def add(name, data):
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))

        chapter = "LibriSpeech/dev-clean/84/121123"
        add(f"{chapter}/84-121123.trans.txt", b"84-121123-0000 GO DO YOU HEAR\n84-121123-0001 A LONG ONE\n")
        for utterance, seconds in (("0000", 2.0), ("0001", 16.0)):
            flac = io.BytesIO()
            soundfile.write(flac, tone(440, seconds), SAMPLE_RATE, format="FLAC")
            add(f"{chapter}/84-121123-{utterance}.flac", flac.getvalue())
    out = tmp_path / "converted"
    assert convert_librispeech(archive, out) == {"utterances": 1, "dropped_over_max_seconds": 1}
    facts = SpeechRecognition.check_real_dataset(out, {})
    assert facts["count"] == 1
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest[0]["transcript"] == "go do you hear"
    assert np.array_equal(read_wav(out / manifest[0]["files"][0]["fname"]), tone(440, 2.0) / 32768)
    with pytest.raises(AppError, match="apps.sr.dataset.path.*dev-clean-wav.json"):
        SpeechRecognition.check_real_dataset(tmp_path, {})


def test_checked_weights_load_and_switch_to_greedy(tmp_path, dataset, model):
    path = tmp_path / "rnnt.pt"
    torch.save({"state_dict": {("joint_net" + k[len("joint.net"):] if k.startswith("joint.net") else k): v
                               for k, v in model.state_dict().items()}}, path)
    settings = {"dataset": {"count": 2}, "seed": 0, "weights": {"path": str(path), "sha256": sha256_file(path)}}
    app = SpeechRecognition(settings, dataset, "CPU", THREADS)
    app.load_model()
    assert app.decoding == "greedy"
    provenance = app.model_provenance()
    assert provenance["weights"] == "loaded" and provenance["sha256"] == sha256_file(path)
    assert "decoding_note" not in provenance
    settings["weights"]["sha256"] = "0" * 64
    with pytest.raises(AppError, match="sha256"):
        SpeechRecognition(settings, dataset, "CPU", THREADS).load_model()


def test_the_weights_resource_loads_into_working_lstms(tmp_path, dataset):
    settings = {"dataset": {"count": 2}, "seed": 3, "weights": {"path": None}}
    path = tmp_path / SpeechRecognition.weights_file_name(settings)
    SpeechRecognition.build_weights(settings, dataset, path)
    built = SpeechRecognition(settings, dataset, "CPU", THREADS)
    built.load_model()
    cached = SpeechRecognition(settings, dataset, "CPU", THREADS, initial_weights=verified_weights(path))
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
def test_smoke_benchmark_on_bm(workflow_dir):
    config, result = run_one_job(workflow_dir, "sr", "BM/1/PIN/CPU")
    assert result["verified"] and len(result["runs"]) == config["study"]["repetitions"]
    assert result["dataset"]["source"] == "synthetic" and result["model"]["weights"] == "random"
    assert result["model"]["decoding"] == "scheduled" and "never emit blank" in result["model"]["decoding_note"]
    for run in result["runs"]:
        assert run["loadgen"]["validity"] == "VALID" and run["samples"] == 2
        assert run["quality"]["decoding"] == "scheduled" and run["quality"]["scored"] == 2
        assert run["quality"]["joint_steps"] > run["quality"]["symbols_emitted"] > 0
        assert all(run["phases"][phase] > 0 for phase in ("pre_s", "infer_s", "post_s"))
        assert run["threads"]["intra_op"] == 1
