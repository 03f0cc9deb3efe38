"""LLM's workload: prompts whose input and output token lengths are drawn from a declared distribution.

Shape: MLPerf Inference's LLM benchmarks draw their queries from real datasets whose lengths are
right-skewed and bounded: Llama 2 70B's OpenOrca subset has inputs and outputs of at most 1024
tokens each (MLCommons, "Llama 2 70B: an MLPerf Inference benchmark for large language models",
2024; the reference implementation's README, mlcommons/inference language/llama2-70b), GPT-J's and
Llama 3.1 8B's CNN/DailyMail articles are long inputs with short summaries. dlvirt draws each
length from a log-normal (``median``, ``sigma``) clipped to [``min``, ``max``]: that shape, with
parameters that are a study's choice (config ``apps.llm.dataset.lengths``), not fitted to either
dataset, and small enough for this machine kind. Every result records the distribution it drew from.

A prompt file (``prompts.jsonl``) holds one JSON object a line: ``id``, ``prompt`` (text),
``input_tokens`` (the prompt is cut to this many tokens after tokenisation; null: not cut) and
``output_tokens`` (the tokens generated for it: the model does not stop earlier). Synthetic prompts
are paragraphs of SQuAD's generator (pseudo-words, function words, names and numbers), at least
one word per input token; a real one is the user's file of the same format (for instance converted
from MLPerf's OpenOrca set).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlvirt.apps.base import AppError
from dlvirt.apps.squad import SquadGenerator

PROMPTS = "prompts.jsonl"
LENGTH_KEYS = ("median", "sigma", "min", "max")
DISTRIBUTION = ("log-normal clipped to [min, max], shaped like MLPerf Inference's LLM datasets (Llama 2 70B: "
                "OpenOrca, inputs and outputs of at most 1024 tokens); parameters are the study's, not fitted")


@dataclass(frozen=True)
class Prompt:
    id: str
    prompt: str
    input_tokens: int | None
    output_tokens: int


def draw_lengths(rng: np.random.Generator, spec: dict[str, Any], count: int, what: str) -> np.ndarray:
    """``count`` token lengths from ``spec`` (``LENGTH_KEYS``): log-normal, rounded, clipped."""
    missing = [key for key in LENGTH_KEYS if key not in spec]
    if missing:
        raise AppError(f"apps.llm.dataset.lengths.{what}: missing {', '.join(missing)}")
    low, high = int(spec["min"]), int(spec["max"])
    if not 1 <= low <= high or float(spec["median"]) <= 0 or float(spec["sigma"]) < 0:
        raise AppError(f"apps.llm.dataset.lengths.{what}: need 1 <= min <= max, median > 0, sigma >= 0 (got {spec})")
    drawn = rng.lognormal(np.log(float(spec["median"])), float(spec["sigma"]), size=count)
    return np.clip(np.rint(drawn), low, high).astype(int)


def generate(out: Path, count: int, seed: int, lengths: dict[str, Any]) -> dict[str, Any]:
    """Write ``count`` synthetic prompts to ``out``; return the facts a dataset record keeps."""
    rng = np.random.default_rng(seed)
    inputs = draw_lengths(rng, lengths["input"], count, "input")
    outputs = draw_lengths(rng, lengths["output"], count, "output")
    generator = SquadGenerator(rng)
    lines = []
    for k, (n_in, n_out) in enumerate(zip(inputs, outputs, strict=True)):
        text = ""
        while len(text.split()) < n_in:
            text = f"{text} {generator.paragraph()}".strip()
        lines.append(json.dumps({"id": f"{k:06d}", "prompt": text, "input_tokens": int(n_in),
                                 "output_tokens": int(n_out)}))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"count": count, "format": "JSON lines", "lengths": lengths, "distribution": DISTRIBUTION,
            "input_tokens": _stats(inputs), "output_tokens": _stats(outputs)}


def _stats(values: np.ndarray) -> dict[str, float]:
    return {"mean": float(np.mean(values)), "p50": float(np.median(values)), "max": int(np.max(values)),
            "sum": int(np.sum(values))}


def read_prompts(path: Path, limit: int | None = None) -> list[Prompt]:
    """The prompts of a prompt file, checked (a bad line is an error naming it)."""
    prompts: list[Prompt] = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            if limit is not None and len(prompts) >= limit:
                break
            try:
                item = json.loads(line)
                n_in = item.get("input_tokens")
                prompt = Prompt(str(item["id"]), str(item["prompt"]), None if n_in is None else int(n_in),
                                int(item["output_tokens"]))
            except (ValueError, KeyError, TypeError) as err:
                raise AppError(f"{path}:{number}: not a prompt line (id, prompt, output_tokens): {err!r}") from err
            if prompt.output_tokens < 1 or (prompt.input_tokens is not None and prompt.input_tokens < 1):
                raise AppError(f"{path}:{number}: input_tokens and output_tokens must be at least 1")
            prompts.append(prompt)
    if not prompts:
        raise AppError(f"{path}: no prompts")
    return prompts
