"""SR data (RNN-T), without a model: WAV reading, features, post-processing on known labels, the
synthetic dataset and LibriSpeech conversion (the model: tests/integration/test_app_sr_model.py)."""

import io
import json
import tarfile
import wave

import numpy as np
import pytest
import torch

from conftest import one_thread
from dlvirt.apps.base import AppError
from dlvirt.apps.sr import SpeechRecognition
from dlvirt.apps.sr.decoder import Decoded, transcript, word_errors
from dlvirt.apps.sr.features import FEATURES, SAMPLE_RATE, LogMelFeatures, mel_filterbank, read_wav, write_wav
from dlvirt.apps.sr.librispeech import MANIFEST, convert_librispeech
from dlvirt.apps.sr.model import LABELS

THREADS = one_thread()


def tone(hz: float, seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (8000 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


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


def test_postprocessing_on_known_labels(tmp_path, sr_dataset):
    assert transcript([LABELS.index(c) for c in "hi there"]) == "hi there"
    assert word_errors("the cat sat", "the bat sat") == (1, 3)
    assert word_errors("a b", "") == (2, 2)
    app = SpeechRecognition({"dataset": {"count": 2}, "seed": 0}, sr_dataset, "CPU", THREADS)
    app.decoding = "scheduled"
    app.begin_repetition(tmp_path)
    reference = app.entries[0]["transcript"]
    labels = [LABELS.index(c) for c in reference]
    answers = app.postprocess([0], [Decoded(labels, joint_steps=len(labels) + 5)])
    quality = app.end_repetition()
    assert np.frombuffer(answers[0], dtype=np.int64).tolist() == labels
    assert quality["wer"] == 0.0 and quality["symbols_emitted"] == len(labels) and quality["decoding"] == "scheduled"
    assert (tmp_path / "transcripts.tsv").read_text().strip().endswith(reference)


def test_synthetic_dataset_is_mlperf_shaped_and_preprocesses(sr_dataset):
    info = json.loads((sr_dataset / "dataset.json").read_text())
    assert info["source"] == "synthetic" and info["count"] == 2
    manifest = json.loads((sr_dataset / MANIFEST).read_text())
    entry = manifest[0]["files"][0]
    assert entry["sample_rate"] == 16000.0 and entry["duration"] == 2.0 and entry["fname"].startswith("dev-clean-wav/")
    assert len(read_wav(sr_dataset / entry["fname"])) == 2 * SAMPLE_RATE
    assert set(manifest[0]["transcript"]) <= set(LABELS)
    app = SpeechRecognition({"dataset": {"count": 2}, "seed": 0}, sr_dataset, "CPU", THREADS)
    utterance = app.preprocess(1)
    assert tuple(utterance.features.shape) == (LogMelFeatures.frames(2 * SAMPLE_RATE), 240)
    assert utterance.symbols == len(manifest[1]["transcript"])


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
