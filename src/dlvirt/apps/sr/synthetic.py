"""SR's synthetic inputs: speech-like audio and English-like transcripts at LibriSpeech's speaking rate."""

from __future__ import annotations

import numpy as np

from dlvirt.apps.sr.features import SAMPLE_RATE

# Speaking rate of LibriSpeech dev-clean, about 15 characters per second (54,402 words in 5.4 h,
# ~5.6 characters per word with its space): synthetic transcripts and model-only batches use it.
CHARS_PER_SECOND = 15.0


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
