"""SR: speech recognition with the MLPerf RNN-T (PyTorch) on LibriSpeech-style 16 kHz WAVs.

Written on plain torch (torchaudio does not import beside the CPU torch build used here), following
the MLPerf inference reference (``speech_recognition/rnnt/pytorch``):

- pre-processing: 16-bit WAV → float, pre-emphasis 0.97, STFT (n_fft 512, 20 ms Hann window,
  10 ms hop), power spectrum + deterministic dither (1e-5)², 80 Slaney mel filters, log, frame
  splicing 3 (240 features, every third frame), per-feature normalisation;
- model: encoder LSTM 2 × 1024 → time stacking × 2 → LSTM 3 × 1024, prediction network embedding
  + LSTM 2 × 320, joint 1344 → 512 → 29 (28 characters + blank); parameter names match the
  reference checkpoint's;
- decoding: greedy with at most 30 symbols per encoder step; post-processing maps labels to text.

Random weights never emit blank under greedy decoding, so decoding would always run to the cap.
With random weights the decoder therefore follows a seeded emission schedule (as many characters as
the reference transcript has, at random encoder steps) while still running the prediction and
joint networks at every step exactly as greedy decoding does; every result file says so.
"""

from __future__ import annotations

import json
import math
import tarfile
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlvirt.apps import torch_runtime
from dlvirt.apps.base import App, AppError, checked_weights
from dlvirt.core.atomic import write_text_atomic

SAMPLE_RATE = 16000
LABELS = " abcdefghijklmnopqrstuvwxyz'"
BLANK = len(LABELS)
NUM_CLASSES = len(LABELS) + 1
SOS = -1  # "no symbol yet": the prediction network sees a zero embedding
WINDOW = 320  # 20 ms
HOP = 160  # 10 ms
N_FFT = 512
N_MELS = 80
FRAME_SPLICING = 3
FEATURES = N_MELS * FRAME_SPLICING
PREEMPHASIS = 0.97
DITHER = 1e-5
STACK_TIME = 2
ENCODER_HIDDEN = 1024
PRE_LAYERS = 2
POST_LAYERS = 3
PRED_HIDDEN = 320
PRED_LAYERS = 2
JOINT_HIDDEN = 512
DROPOUT = 0.32  # identity at inference; kept so the joint's layer indices match the checkpoint
FORGET_GATE_BIAS = 1.0
MAX_SECONDS = 15.0  # MLPerf keeps dev-clean clips up to 15 s
SECONDS_PER_ENCODER_STEP = HOP * FRAME_SPLICING * STACK_TIME / SAMPLE_RATE
# Speaking rate of LibriSpeech dev-clean, about 15 characters per second (54,402 words in 5.4 h,
# ~5.6 characters per word with its space): synthetic transcripts and model-only batches use it.
CHARS_PER_SECOND = 15.0
MANIFEST = "dev-clean-wav.json"
LIBRISPEECH_DEV_CLEAN_URL = "https://www.openslr.org/resources/12/dev-clean.tar.gz"
# SHA-256 of OpenSLR's archive (OpenSLR itself publishes md5 42e2234ba48799c1f50f24a7926300a1).
LIBRISPEECH_DEV_CLEAN_SHA256 = "76f87d090650617fca0cac8f88b9416e0ebf80350acb97b343a85fa903728ab3"


# -- audio and features ------------------------------------------------------------------------
def read_wav(path: Path) -> np.ndarray:
    """Samples of a 16 kHz mono 16-bit PCM WAV as float32 in [-1, 1)."""
    try:
        with wave.open(str(path), "rb") as wav:
            shape = (wav.getnchannels(), wav.getsampwidth(), wav.getframerate())
            frames = wav.readframes(wav.getnframes())
    except (OSError, EOFError, wave.Error) as err:
        raise AppError(f"{path}: not a readable WAV file ({err})") from err
    if shape != (1, 2, SAMPLE_RATE):
        raise AppError(f"{path}: {shape[0]} channel(s), {8 * shape[1]}-bit, {shape[2]} Hz; "
                       f"RNN-T needs mono 16-bit {SAMPLE_RATE} Hz")
    return np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0


def write_wav(path: Path, samples: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(SAMPLE_RATE)
        wav.writeframes(np.asarray(samples, dtype="<i2").tobytes())


def _hz_to_mel(hz: np.ndarray | float) -> np.ndarray:
    """Slaney's mel scale (librosa's default): linear below 1 kHz, logarithmic above."""
    hz = np.asarray(hz, dtype=np.float64)
    linear = hz / (200.0 / 3)
    log_part = 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(hz >= 1000.0, log_part, linear)


def _mel_to_hz(mel: np.ndarray | float) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    linear = mel * (200.0 / 3)
    log_part = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0))
    return np.where(mel >= 15.0, log_part, linear)


def mel_filterbank(sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS) -> np.ndarray:
    """Triangular Slaney-normalised mel filters, (n_mels, n_fft // 2 + 1): what the reference gets
    from ``librosa.filters.mel(sr, n_fft, n_mels, fmin=0, fmax=sr / 2)``."""
    fft_freqs = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)
    mel_freqs = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(sample_rate / 2), n_mels + 2))
    widths = np.diff(mel_freqs)
    ramps = mel_freqs[:, None] - fft_freqs[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (mel_freqs[2:] - mel_freqs[:-2]))[:, None]
    return weights.astype(np.float32)


class LogMelFeatures:
    """The reference's ``FilterbankFeatures`` for one utterance (read-only: safe across threads)."""

    def __init__(self) -> None:
        import torch

        self.window = torch.hann_window(WINDOW, periodic=False)
        self.filterbank = torch.from_numpy(mel_filterbank())

    @staticmethod
    def frames(num_samples: int) -> int:
        """Feature frames the model sees for ``num_samples`` of audio (the reference's seq_len)."""
        return math.ceil(math.ceil(num_samples / HOP) / FRAME_SPLICING)

    def __call__(self, audio: np.ndarray) -> Any:
        """(frames, 240) float32 features of a float waveform."""
        import torch

        x = torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))
        x = torch.cat((x[:1], x[1:] - PREEMPHASIS * x[:-1]))
        spectrum = torch.stft(x, n_fft=N_FFT, hop_length=HOP, win_length=WINDOW, window=self.window,
                              center=True, return_complex=True)
        power = spectrum.real.square() + spectrum.imag.square() + DITHER**2
        mel = torch.log(self.filterbank @ power + 1e-20)  # (80, stft frames)
        shifted = [mel] + [torch.nn.functional.pad(mel[:, n:], (0, n)) for n in range(1, FRAME_SPLICING)]
        spliced = torch.cat(shifted, dim=0)[:, ::FRAME_SPLICING]
        valid = spliced[:, :self.frames(len(audio))]
        normalised = (valid - valid.mean(dim=1, keepdim=True)) / (valid.std(dim=1, keepdim=True) + 1e-5)
        return normalised.T.contiguous()


# -- model ---------------------------------------------------------------------------------------
def build_model() -> Any:
    """The MLPerf RNN-T with its parameter names (``encoder.pre_rnn.lstm.weight_ih_l0`` ...)."""
    import torch
    from torch import nn

    class Lstm(nn.Module):
        def __init__(self, input_size: int, hidden: int, layers: int) -> None:
            super().__init__()
            self.lstm = nn.LSTM(input_size, hidden, layers)
            # The reference initialises the forget gate's input bias to 1 and its recurrent bias to 0.
            for name, value in self.lstm.named_parameters():
                if name.startswith("bias_"):
                    with torch.no_grad():
                        value[hidden:2 * hidden] = FORGET_GATE_BIAS if name.startswith("bias_ih") else 0.0

        def forward(self, x: Any, state: Any = None) -> Any:
            return self.lstm(x, state)

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pre_rnn = Lstm(FEATURES, ENCODER_HIDDEN, PRE_LAYERS)
            self.post_rnn = Lstm(STACK_TIME * ENCODER_HIDDEN, ENCODER_HIDDEN, POST_LAYERS)

        def forward(self, x: Any, lengths: Any) -> tuple[Any, Any]:
            """(T, B, 240) padded features → (B, ceil(T / 2), 1024) and the new lengths."""
            x, _ = self.pre_rnn(x)
            steps, batch, hidden = x.shape
            pad = (-steps) % STACK_TIME
            if pad:
                x = torch.cat([x, x.new_zeros(pad, batch, hidden)])
            x = x.transpose(0, 1).reshape(batch, (steps + pad) // STACK_TIME, STACK_TIME * hidden).transpose(0, 1)
            x, _ = self.post_rnn(x)
            return x.transpose(0, 1), (lengths + STACK_TIME - 1) // STACK_TIME

    class Prediction(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(NUM_CLASSES - 1, PRED_HIDDEN)  # blank is never fed back
            self.dec_rnn = Lstm(PRED_HIDDEN, PRED_HIDDEN, PRED_LAYERS)

        def forward(self, last: Any, state: Any) -> tuple[Any, Any]:
            """Last symbols (B,) (SOS = none yet) → (B, 320) and the new LSTM state."""
            embedded = self.embed(last.clamp(min=0)) * (last >= 0).unsqueeze(1)
            out, state = self.dec_rnn(embedded.unsqueeze(0), state)
            return out[0], state

    class Joint(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(ENCODER_HIDDEN + PRED_HIDDEN, JOINT_HIDDEN), nn.ReLU(),
                                     nn.Dropout(DROPOUT), nn.Linear(JOINT_HIDDEN, NUM_CLASSES))

        def forward(self, f: Any, g: Any) -> Any:
            return self.net(torch.cat([f, g], dim=-1))

    class RNNT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = Encoder()
            self.prediction = Prediction()
            self.joint = Joint()

    return RNNT().eval()


def emission_schedule(seed: int, key: int, steps: int, symbols: int, cap: int) -> np.ndarray:
    """Symbols to emit at each encoder step: ``symbols`` characters at seeded random steps."""
    rng = np.random.default_rng([seed, key])
    counts = np.bincount(rng.integers(0, steps, size=symbols), minlength=steps) if steps else np.zeros(0, int)
    return np.minimum(counts, cap)


@dataclass(frozen=True)
class Utterance:
    """A pre-processed sample: features plus what the scheduled decoder needs."""

    features: Any  # torch (frames, 240) float32
    symbols: int   # characters in the reference transcript
    key: int       # sample index: seeds its emission schedule


@dataclass(frozen=True)
class Decoded:
    labels: list[int]
    joint_steps: int


def greedy_decode(model: Any, encoded: Any, lengths: list[int], max_symbols: int,
                  schedules: list[np.ndarray] | None) -> list[Decoded]:
    """Greedy RNN-T decoding of a batch. Each round runs the prediction and joint networks once for
    every utterance with encoder steps left; a symbol is emitted while the joint's best class is not
    blank (or, with ``schedules``, while the step's scheduled count is not reached, the best non-blank
    class), at most ``max_symbols`` per step as in the reference."""
    import torch

    batch = len(lengths)
    layers_state = (encoded.new_zeros(PRED_LAYERS, batch, PRED_HIDDEN),
                    encoded.new_zeros(PRED_LAYERS, batch, PRED_HIDDEN))
    last = torch.full((batch,), SOS, dtype=torch.long, device=encoded.device)
    step = [0] * batch
    emitted_here = [0] * batch
    labels: list[list[int]] = [[] for _ in range(batch)]
    joint_steps = [0] * batch
    while True:
        active = [b for b in range(batch) if step[b] < lengths[b]]
        if not active:
            break
        rows = torch.tensor(active, device=encoded.device)
        f = encoded[rows, torch.tensor([step[b] for b in active], device=encoded.device)]
        g, (h, c) = model.prediction(last[rows], (layers_state[0][:, rows], layers_state[1][:, rows]))
        logits = model.joint(f, g)
        if schedules is None:
            best = logits.argmax(dim=-1).tolist()
            emit = [k != BLANK for k in best]
        else:
            best = logits[:, :BLANK].argmax(dim=-1).tolist()
            emit = [emitted_here[b] < schedules[b][step[b]] for b in active]
        for j, b in enumerate(active):
            joint_steps[b] += 1
            if emit[j]:
                labels[b].append(best[j])
                last[b] = best[j]
                layers_state[0][:, b] = h[:, j]
                layers_state[1][:, b] = c[:, j]
                emitted_here[b] += 1
                if emitted_here[b] < max_symbols:
                    continue
            step[b] += 1
            emitted_here[b] = 0
    return [Decoded(labels[b], joint_steps[b]) for b in range(batch)]


def transcript(labels: list[int]) -> str:
    return "".join(LABELS[k] for k in labels)


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(word edit distance, reference words): the terms of the word error rate."""
    ref = reference.split()
    hyp = hypothesis.split()
    previous = list(range(len(hyp) + 1))
    for i, word in enumerate(ref, start=1):
        current = [i] + [0] * len(hyp)
        for j, guess in enumerate(hyp, start=1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (word != guess))
        previous = current
    return previous[-1], len(ref)


# -- dataset -------------------------------------------------------------------------------------
def manifest_entry(fname: str, num_samples: int, text: str) -> dict[str, Any]:
    """One utterance in the shape of MLPerf's ``dev-clean-wav.json``."""
    duration = num_samples / SAMPLE_RATE
    return {"transcript": text, "original_duration": duration, "original_num_samples": num_samples,
            "files": [{"channels": 1, "sample_rate": float(SAMPLE_RATE), "bitrate": 16, "duration": duration,
                       "num_samples": num_samples, "encoding": "Signed Integer PCM", "silent": False,
                       "fname": fname, "speed": 1}]}


def read_manifest(root: Path) -> list[dict[str, Any]]:
    path = root / MANIFEST
    try:
        entries = json.loads(path.read_text())
        return [{"fname": e["files"][0]["fname"], "duration": float(e["files"][0]["duration"]),
                 "transcript": str(e["transcript"])} for e in entries]
    except FileNotFoundError as err:
        raise AppError(f"apps.sr.dataset.path {root}: no {MANIFEST} (MLPerf's LibriSpeech manifest)") from err
    except (ValueError, KeyError, IndexError, TypeError) as err:
        raise AppError(f"{path}: not a {MANIFEST}-style manifest ({err!r})") from err


def synthetic_speech(rng: np.random.Generator, seconds: float) -> np.ndarray:
    """Speech-like 16-bit audio: voiced syllables (harmonics of a wandering pitch, ~4 per second)
    separated by pauses, over low background noise, at conversational level."""
    n = int(seconds * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    knots = np.linspace(0, seconds, max(2, int(seconds * 3)))
    pitch = np.interp(t, knots, rng.uniform(90, 240, size=knots.size))
    phase = 2 * np.pi * np.cumsum(pitch) / SAMPLE_RATE
    voice = sum(np.sin(h * phase) / h for h in range(1, 16))
    beats = np.arange(0, seconds + 0.25, 0.25)
    syllables = np.interp(t, beats, rng.random(beats.size))
    envelope = np.clip((syllables - 0.3) * 2.5, 0, 1) ** 2
    audio = 0.12 * voice * envelope + rng.normal(0, 0.004, size=n)
    return np.clip(audio * 32768, -32768, 32767).astype(np.int16)


def synthetic_transcript(rng: np.random.Generator, seconds: float) -> str:
    """Lower-case words of English-like lengths, about CHARS_PER_SECOND characters per second."""
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    weights = np.array([12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8, 2.4, 2.4, 2.2,
                        2.0, 2.0, 1.9, 1.5, 1.0, 0.8, 0.2, 0.2, 0.1, 0.1])
    words: list[str] = []
    length = 0
    while length < CHARS_PER_SECOND * seconds:
        word = "".join(rng.choice(letters, size=int(rng.integers(1, 10)), p=weights / weights.sum()))
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


def convert_librispeech(archive: Path, out_dir: Path, max_seconds: float = MAX_SECONDS) -> dict[str, Any]:
    """LibriSpeech ``dev-clean.tar.gz`` → ``dev-clean-wav/…/*.wav`` plus ``dev-clean-wav.json``,
    dropping clips longer than ``max_seconds`` (as MLPerf's SR workload does)."""
    import soundfile

    out_dir = Path(out_dir)
    entries = []
    dropped = 0
    with tarfile.open(archive, "r:gz") as tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}
        for name in sorted(n for n in members if n.endswith(".trans.txt")):
            chapter = name.rsplit("/", 1)[0]
            text = tar.extractfile(members[name])
            assert text is not None
            for line in text.read().decode().splitlines():
                if not line.strip():
                    continue
                utterance, words = line.split(" ", 1)
                flac = tar.extractfile(members[f"{chapter}/{utterance}.flac"])
                assert flac is not None
                audio, rate = soundfile.read(flac, dtype="int16")
                if rate != SAMPLE_RATE or audio.ndim != 1:
                    raise AppError(f"{archive}: {utterance}.flac is {rate} Hz with shape {audio.shape}, "
                                   "not 16 kHz mono")
                if len(audio) > max_seconds * SAMPLE_RATE:
                    dropped += 1
                    continue
                speaker, book, _ = utterance.split("-")
                fname = f"dev-clean-wav/{speaker}/{book}/{utterance}.wav"
                write_wav(out_dir / fname, audio)
                entries.append(manifest_entry(fname, len(audio), words.lower()))
    if not entries:
        raise AppError(f"{archive}: no LibriSpeech utterances of at most {max_seconds} s found")
    write_text_atomic(out_dir / MANIFEST, json.dumps(entries))
    return {"utterances": len(entries), "dropped_over_max_seconds": dropped}


class SpeechRecognition(App):
    name = "sr"
    title = "Speech recognition"
    model_name = "RNN-T"
    framework = "pytorch"
    dataset_name = "LibriSpeech dev-clean"
    dataset_index = MANIFEST
    processors = ("CPU",)
    why_no_gpu = "MLPerf's RNN-T reference runs on CPU only, as in the paper's Table I"

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
        torch.manual_seed(self.seed)
        self.model = build_model()
        self.weights_path = checked_weights(self.settings)
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

    def framework_versions(self) -> dict[str, str]:
        return torch_runtime.versions()
