"""RNN-T decoding: greedy with at most ``max_symbols`` symbols per encoder step, as in the reference;
post-processing maps labels to text and scores the word errors.

Random weights never emit blank under greedy decoding, so decoding would always run to the cap.
With random weights the decoder therefore follows a seeded emission schedule (as many characters as
the reference transcript has, at random encoder steps) while still running the prediction and
joint networks at every step exactly as greedy decoding does; every result file says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dlvirt.apps.sr.model import BLANK, LABELS, PRED_HIDDEN, PRED_LAYERS

SOS = -1  # "no symbol yet": the prediction network sees a zero embedding


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
    # one step of a 320-wide LSTM at a time: oneDNN's RNN primitive costs more to set up at each call
    # than the step computes (a joint step took 1.40 ms with oneDNN, 0.72 ms without, on one core of a
    # Xeon guest); the encoder's long sequences keep it (alike either way). The switch is the
    # process's: a pre-processing worker beside it runs SR's STFT and mel matmul, which never use oneDNN
    with torch.backends.mkldnn.flags(enabled=False):
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
