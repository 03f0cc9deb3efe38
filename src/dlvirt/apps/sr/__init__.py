"""SR: speech recognition with the MLPerf RNN-T (PyTorch) on LibriSpeech-style 16 kHz WAVs, following
the MLPerf inference reference (``speech_recognition/rnnt/pytorch``). The app is here; its parts are
``features`` (pre-processing), ``model`` (the RNN-T), ``decoder`` (greedy and scheduled decoding,
post-processing), ``librispeech`` (the dataset's layout and conversion) and ``synthetic`` (generated
inputs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from dlvirt.apps import torch_runtime
from dlvirt.apps.base import AppError, checked_weights
from dlvirt.apps.sr.decoder import Decoded, Utterance, emission_schedule, greedy_decode, transcript, word_errors
from dlvirt.apps.sr.features import FEATURES, SAMPLE_RATE, LogMelFeatures, read_wav, write_wav
from dlvirt.apps.sr.librispeech import (
    LIBRISPEECH_DEV_CLEAN_SHA256,
    LIBRISPEECH_DEV_CLEAN_URL,
    MANIFEST,
    MAX_SECONDS,
    convert_librispeech,
    manifest_entry,
    read_manifest,
)
from dlvirt.apps.sr.model import (
    ENCODER_HIDDEN,
    JOINT_HIDDEN,
    NUM_CLASSES,
    POST_LAYERS,
    PRE_LAYERS,
    PRED_HIDDEN,
    PRED_LAYERS,
    STACK_TIME,
    build_model,
)
from dlvirt.apps.sr.synthetic import CHARS_PER_SECOND, synthetic_speech, synthetic_transcript
from dlvirt.core.atomic import write_text_atomic
from dlvirt.core.kinds import AppKind


class SpeechRecognition(torch_runtime.TorchModelApp):
    kind = AppKind(name="sr", title="Speech recognition", model="RNN-T", framework="pytorch",
                   dataset="LibriSpeech dev-clean", order=1, processors=("CPU",), framework_packages=("torch",),
                   why_no_gpu="MLPerf's RNN-T reference runs on CPU only, as in the paper's Table I")
    dataset_index = MANIFEST
    preprocess_on_framework_threads = True  # LogMelFeatures: torch's STFT, matmul, log, statistics

    @classmethod
    def generate_dataset(cls, out_dir: Path, settings: dict[str, Any]) -> dict[str, Any]:
        dataset = settings["dataset"]
        rng = np.random.default_rng(dataset["seed"])
        seconds = float(dataset["seconds"])
        entries = []
        total_bytes = 0
        for i in range(dataset["count"]):
            speaker, book = 1000 + i // 100, 10000 + i // 20
            fname = f"dev-clean-wav/{speaker}/{book}/{speaker}-{book}-{i % 20:04d}.wav"
            audio = synthetic_speech(rng, seconds)
            write_wav(out_dir / fname, audio)
            total_bytes += (out_dir / fname).stat().st_size
            entries.append(manifest_entry(fname, len(audio), synthetic_transcript(rng, seconds)))
        write_text_atomic(out_dir / MANIFEST, json.dumps(entries))
        return {"count": dataset["count"], "format": "WAV 16 kHz mono 16-bit + dev-clean-wav.json",
                "seconds": seconds, "bytes": total_bytes}

    @classmethod
    def check_real_dataset(cls, root: Path, settings: dict[str, Any]) -> dict[str, Any]:
        entries = read_manifest(root)
        kept = [e for e in entries if e["duration"] <= MAX_SECONDS]
        if not kept:
            raise AppError(f"apps.sr.dataset.path {root}: no utterance of at most {MAX_SECONDS} s in {MANIFEST}")
        missing = [e["fname"] for e in kept[:50] if not (root / e["fname"]).is_file()]
        if missing:
            raise AppError(f"apps.sr.dataset.path {root}: WAVs listed in {MANIFEST} are missing: {missing[:5]}")
        read_wav(root / kept[0]["fname"])
        return {"count": len(kept), "format": "WAV 16 kHz mono 16-bit + dev-clean-wav.json",
                "dropped_over_max_seconds": len(entries) - len(kept)}

    @classmethod
    def download_dataset(cls, out_dir: Path) -> list[Path]:
        """Fetch LibriSpeech dev-clean (SHA-256 checked) and convert it to MLPerf's WAV layout."""
        from dlvirt.apps.download import fetch_verified

        out_dir = Path(out_dir)
        archive = fetch_verified(LIBRISPEECH_DEV_CLEAN_URL, out_dir / "dev-clean.tar.gz", LIBRISPEECH_DEV_CLEAN_SHA256)
        convert_librispeech(archive, out_dir)
        return [out_dir / MANIFEST]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entries = [e for e in read_manifest(self.data_root) if e["duration"] <= MAX_SECONDS]
        limit = self.settings["dataset"].get("count")
        if self.dataset_info["source"] == "real" and limit:
            self.entries = self.entries[:limit]
        self.max_symbols = int(self.settings.get("max_symbols_per_step", 30))
        self.seed = int(self.settings.get("seed", 0))
        self.features = LogMelFeatures()

    def sample_count(self) -> int:
        return len(self.entries)

    def load_model(self) -> None:
        import torch

        self.device = torch_runtime.configure(self.threads, self.processor)
        self.weights_path = checked_weights(self.settings)
        if self.weights_path is None and self.cached_weights is not None:
            self.model = torch_runtime.load_module(build_model, self.cached_weights, "apps.sr weights resource")
        else:
            torch.manual_seed(self.seed)
            self.model = build_model()
        if self.weights_path is not None:
            state = torch_runtime.load_state_dict(self.weights_path, "apps.sr.weights.path")
            # The reference checkpoint keeps its feature extractor's buffers and an older joint name.
            state = {k.replace("joint_net", "joint.net"): v for k, v in state.items()
                     if not k.startswith("audio_preprocessor.")}
            try:
                self.model.load_state_dict(state, strict=True)
            except RuntimeError as err:
                raise AppError(f"apps.sr.weights.path {self.weights_path}: not an MLPerf RNN-T state dict "
                               f"({err})") from err
        mode = self.settings.get("decoding", "auto")
        self.decoding = ("greedy" if self.weights_path is not None else "scheduled") if mode == "auto" else mode

    def preprocess(self, index: int) -> Utterance:
        entry = self.entries[index]
        features = self.features(read_wav(self.data_root / entry["fname"]))
        return Utterance(features, len(entry["transcript"]), index)

    def infer(self, batch: list[Utterance]) -> list[Decoded]:
        import torch

        lengths = [len(u.features) for u in batch]
        padded = torch.nn.utils.rnn.pad_sequence([u.features for u in batch]).to(self.device)  # (T, B, 240)
        with torch.inference_mode():
            encoded, encoded_lengths = self.model.encoder(padded, torch.tensor(lengths))
            steps = encoded_lengths.tolist()
            schedules = None
            if self.decoding == "scheduled":
                schedules = [emission_schedule(self.seed, u.key, n, u.symbols, self.max_symbols)
                             for u, n in zip(batch, steps, strict=True)]
            return greedy_decode(self.model, encoded, steps, self.max_symbols, schedules)

    def synthetic_batch(self, batch_size: int) -> list[Utterance]:
        import torch

        seconds = float(np.mean([e["duration"] for e in self.entries]))  # the workload's mean utterance
        frames = LogMelFeatures.frames(int(seconds * SAMPLE_RATE))
        generator = torch.Generator().manual_seed(0)
        return [Utterance(torch.randn(frames, FEATURES, generator=generator), int(CHARS_PER_SECOND * seconds), i)
                for i in range(batch_size)]

    def begin_repetition(self, out_dir: Path) -> None:
        super().begin_repetition(out_dir)
        self.transcripts = open(self.out_dir / "transcripts.tsv", "w")  # noqa: SIM115 - closed in end_repetition
        self.errors = 0
        self.reference_words = 0
        self.emitted = 0
        self.joint_steps = 0
        self.seen = 0

    def postprocess(self, indices: list[int], outputs: list[Decoded]) -> list[bytes]:
        answers = []
        lines = []
        for index, decoded in zip(indices, outputs, strict=True):
            entry = self.entries[index]
            text = transcript(decoded.labels)
            errors, words = word_errors(entry["transcript"], text)
            self.errors += errors
            self.reference_words += words
            self.emitted += len(decoded.labels)
            self.joint_steps += decoded.joint_steps
            self.seen += 1
            lines.append(f"{entry['fname']}\t{text}\n")
            answers.append(np.asarray(decoded.labels, dtype=np.int64).tobytes())
        self.transcripts.writelines(lines)
        return answers

    def end_repetition(self) -> dict[str, Any]:
        self.transcripts.close()
        return {"wer": self.errors / max(self.reference_words, 1), "scored": self.seen,
                "decoding": self.decoding, "symbols_emitted": self.emitted, "joint_steps": self.joint_steps}

    def model_provenance(self) -> dict[str, Any]:
        provenance = super().model_provenance()
        provenance["decoding"] = self.decoding
        if self.decoding == "scheduled":
            provenance["decoding_note"] = (
                "random RNN-T weights never emit blank, so greedy decoding would always run to the "
                f"{self.max_symbols}-symbols-per-step cap; instead each utterance emits as many symbols as its "
                "reference transcript has characters, at seeded random encoder steps, and the prediction and "
                "joint networks still run at every decoding step")
        provenance["config"] = {"features": FEATURES, "encoder": [PRE_LAYERS, POST_LAYERS, ENCODER_HIDDEN],
                                "stack_time": STACK_TIME, "prediction": [PRED_LAYERS, PRED_HIDDEN],
                                "joint": JOINT_HIDDEN, "classes": NUM_CLASSES,
                                "max_symbols_per_step": self.max_symbols}
        return provenance
