"""Variance components of repeated launches (Kalibera & Jones, "Rigorous Benchmarking in Reasonable
Time", ISMM 2013): how much of a scenario's spread is within a launch (repetition to repetition)
and how much between launches (boot, placement, page cache, the machine's drift).

On the log scale (so that the components are relative, comparable across scenarios of any speed,
and a ratio of two scenarios is a difference), with launches ``i`` of ``n_i`` repetitions:

- within: the pooled variance of the repetitions about their launch's mean,
  ``S²_w = Σ_i Σ_j (x_ij − x̄_i)² / (N − L)``;
- between: the one-way random-effects (ANOVA moment) estimator
  ``σ²_b = (MS_b − S²_w) / n₀`` with ``MS_b = Σ_i n_i (x̄_i − x̄)² / (L − 1)`` and
  ``n₀ = (N − Σ n_i² / N) / (L − 1)``; with equal ``n`` it is Kalibera & Jones's
  ``var(launch means) − S²_w / n``. The variance of the launch means alone overstates it by
  ``S²_w / n`` (the within-launch noise every launch mean still carries). Floored at 0.

Scenarios are pooled by their sums of squares (each keeps its own mean): the study-wide
components the design calculator (``dlvirt.plan.design``) sizes a study from.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Components:
    """Within- and between-launch variance components (log scale) and what they rest on."""

    within: float          # σ²_w: NaN without a launch of two or more repetitions
    between: float         # σ²_b, floored at 0: NaN below two launches
    launches: int
    repetitions: int       # N, over all launches
    df_within: int         # N − L (launches of one repetition add nothing)
    df_between: int        # L − 1 (summed over pooled scenarios)
    ss_between: float = math.nan  # Σ n_i (x̄_i − x̄)², kept for pooling
    n0: float = math.nan   # the effective repetitions per launch of the between estimator

    @property
    def within_sd(self) -> float:
        """σ_w: about the coefficient of variation of a repetition within a launch."""
        return math.sqrt(self.within) if self.within >= 0 else math.nan

    @property
    def between_sd(self) -> float:
        """σ_b: about the coefficient of variation of the launches' true means."""
        return math.sqrt(self.between) if self.between >= 0 else math.nan

    def launch_mean_variance(self, repetitions: float) -> float:
        """The variance (log scale) of one launch's mean of ``repetitions`` repetitions."""
        return self.between + self.within / repetitions


def of_launches(launches: Iterable[Sequence[float]]) -> Components:
    """The components of one scenario's launches, each the list of its repetitions' times (> 0)."""
    logs = [np.log(np.asarray(values, dtype=float)) for values in launches if len(values)]
    if any(not np.all(np.isfinite(x)) for x in logs):
        raise ValueError("variance components need positive, finite times")
    sizes = np.array([x.size for x in logs], dtype=float)
    total, count = float(sizes.sum()), len(logs)
    ss_within = float(sum(((x - x.mean()) ** 2).sum() for x in logs))
    df_within = int(total) - count
    within = ss_within / df_within if df_within > 0 else math.nan
    if count < 2:
        return Components(within, math.nan, count, int(total), df_within, 0)
    means = np.array([x.mean() for x in logs])
    grand = float((sizes * means).sum() / total)
    ss_between = float((sizes * (means - grand) ** 2).sum())
    n0 = (total - float((sizes ** 2).sum()) / total) / (count - 1)
    raw = (ss_between / (count - 1) - within) / n0 if n0 > 0 else math.nan  # NaN within: NaN
    return Components(within, math.nan if math.isnan(raw) else max(0.0, raw), count, int(total), df_within,
                      count - 1, ss_between, n0)


def pooled(parts: Iterable[Components]) -> Components:
    """Several scenarios' components as one (each scenario keeps its own mean): sums of squares and
    degrees of freedom added; ``n₀`` the between-df-weighted mean of theirs."""
    parts = list(parts)
    df_within = sum(p.df_within for p in parts if p.df_within > 0)
    ss_within = sum(p.within * p.df_within for p in parts if p.df_within > 0)
    within = ss_within / df_within if df_within else math.nan
    between_parts = [p for p in parts if p.df_between > 0]
    df_between = sum(p.df_between for p in between_parts)
    launches = sum(p.launches for p in parts)
    repetitions = sum(p.repetitions for p in parts)
    if not df_between or math.isnan(within):  # nothing to separate the launches' noise from
        return Components(within, math.nan, launches, repetitions, df_within, df_between)
    ss_between = sum(p.ss_between for p in between_parts)
    n0 = sum(p.n0 * p.df_between for p in between_parts) / df_between
    raw = (ss_between / df_between - within) / n0
    return Components(within, max(0.0, raw), launches, repetitions, df_within, df_between, ss_between, n0)
