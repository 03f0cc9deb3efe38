"""Extension: the sandbox's cost falls on pre-processing, not on inference (SCN, gVisor, over CN).

gVisor's kernel serves every system call of the app in user space: pre-processing (file reads,
decoding, allocation) makes many, inference on tensors already in memory few. Per phase, the
average over the SCN/CN pairs (same app, cores and CPU mode, CPU) of the phase's busy time, each
a contrast of the launch-level model fitted to that phase's launch means (``round_pre_s``,
``round_infer_s``) as the E2E claims fit theirs: pre-processing slower by more than the margin,
inference within it."""

from __future__ import annotations

import math
from collections.abc import Hashable

import pandas as pd

from dlvirt.analysis.claims.study import Study, pairs
from dlvirt.analysis.claims.verdicts import Part, Verdict, alike, decide, higher, untestable
from dlvirt.analysis.model import NO_CONTRAST, Contrast, combine, fit_groups, group_keys

PHASES = {"pre-processing": "round_pre_s", "inference": "round_infer_s"}


def _contrast(rows: pd.DataFrame, column: str, weights: dict[Hashable, float]) -> Contrast:
    """``Σ w · log(row's phase time)`` from the phase's models (several groups: combined, Welch df)."""
    models, keys = fit_groups(rows, column), group_keys(rows)
    by_group: dict[str, dict[Hashable, float]] = {}
    for label, weight in weights.items():
        by_group.setdefault(str(keys[label]), {})[label] = weight
    parts = [(1.0, models[key].contrast(w)) for key, w in by_group.items()]
    if not parts:
        return NO_CONTRAST
    return parts[0][1] if len(parts) == 1 else combine(parts)


def sandbox_costs_preprocessing_not_inference(study: Study) -> Verdict:
    rows = study.e2e[(study.e2e["processor"] == "CPU") & study.e2e["platform"].isin(["SCN", "CN"])]
    found = pairs(rows, "platform", "SCN", "CN", ["app", "cores", "pinning"])
    if not found:
        return untestable(["no SCN and CN rows of the same app, cores and CPU mode (CPU)",
                           *study.why_missing(platforms=("SCN",))])
    parts, missing = [], []
    for phase, column in PHASES.items():
        timed = [(a, b, j) for a, b, j in found if column in rows and all(
            isinstance(rows.at[x, column], str) and rows.at[x, column] != "" for x in (a, b))]
        if not timed:
            missing.append(f"no per-launch {phase} times ({column}) of an SCN and CN pair")
            continue
        weights: dict[Hashable, float] = {}
        for a, b, _ in timed:
            weights[a] = weights.get(a, 0.0) + 1.0 / len(timed)
            weights[b] = weights.get(b, 0.0) - 1.0 / len(timed)
        cases = [f"{j['app'].upper()} {j['cores']} cores {j['pinning']} "
                 f"{_contrast(rows, column, {a: 1.0, b: -1.0}).relative()}" for a, b, j in timed]
        hypothesis = (higher("the sandbox slows pre-processing", study.margin) if column == "round_pre_s"
                      else alike("inference as fast in the sandbox", study.margin))
        contrast = _contrast(rows, column, weights)
        parts.append(Part(f"{phase} SCN/CN over {len(timed)} pair(s)",
                          contrast if math.isfinite(contrast.log) else NO_CONTRAST, hypothesis, cases))
    return decide(parts, missing, study.notes)
