"""The Student-t confidence interval of a mean and the outlier rule: shared by the harness's
stopping rule (inside the platform) and the analysis, so both mean the same by "95 % CI" of a
launch's repetitions. Outliers are flagged, never dropped: every repetition counts in every
statistic (dropping at n = 3-4 underestimates the spread and removes the interference a platform
may cause); the rule only lists the ones to look at."""

from __future__ import annotations

import math

import numpy as np

MODIFIED_Z_LIMIT = 3.5


def t_half_width(std: float, n: int, level: float = 0.95) -> float:
    """Half-width of the two-sided ``level`` Student-t interval of a mean of ``n`` values (NaN below 2)."""
    if n < 2:
        return math.nan
    # The t quantile from scipy.special (stdtrit, what scipy.stats.t.ppf computes): the harness of
    # every job computes one at its end, and importing scipy.stats cost 0.64 s here (38 s in a TCG
    # guest) against 0.18 s for scipy.special: most of what a launch spent after its last repetition
    from scipy.special import stdtrit

    return float(stdtrit(n - 1, 0.5 + level / 2) * std / math.sqrt(n))


def relative_half_width(values: list[float]) -> float:
    """95 % CI half-width of the mean of ``values`` relative to the mean (NaN below two values)."""
    n = len(values)
    if n < 2:
        return math.nan
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return t_half_width(std, n) / abs(mean) if mean else math.inf


def outliers(values: list[float], limit: float = MODIFIED_Z_LIMIT) -> list[int]:
    """Positions of the values whose modified z-score exceeds ``limit`` (none below n = 3): flagged
    for a reader, never removed."""
    array = np.asarray(values, dtype=float)
    if array.size < 3:
        return []
    deviation = np.abs(array - np.median(array))
    mad = float(np.median(deviation))
    scale = mad / 0.6745 if mad > 0 else 1.253314 * float(deviation.mean())
    if scale == 0:
        return []
    return [int(i) for i in np.flatnonzero(deviation / scale > limit)]
