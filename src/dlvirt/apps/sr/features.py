"""SR pre-processing as the MLPerf RNN-T reference does it: 16-bit WAV → float, pre-emphasis 0.97, STFT
(n_fft 512, 20 ms Hann window, 10 ms hop), power spectrum + deterministic dither (1e-5)², 80 Slaney
mel filters, log, frame splicing 3 (240 features, every third frame), per-feature normalisation.
Written on plain torch (torchaudio does not import beside the CPU torch build used here).
"""

from __future__ import annotations

import math
import wave
from pathlib import Path
from typing import Any

import numpy as np

from dlvirt.apps.base import AppError

SAMPLE_RATE = 16000
WINDOW = 320  # 20 ms
HOP = 160  # 10 ms
N_FFT = 512
N_MELS = 80
FRAME_SPLICING = 3
FEATURES = N_MELS * FRAME_SPLICING
PREEMPHASIS = 0.97
DITHER = 1e-5


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
