"""Estimates of one row a reviewer can check: robust outliers, Student-t intervals, a drift trend.

- Outliers: the modified z-score of Iglewicz & Hoaglin, ``0.6745 · |x − median| / MAD > 3.5``
  (with MAD = 0, the mean absolute deviation · 1.2533 stands in). Unlike a 3σ rule on the sample's
  own standard deviation (largest possible |z| at n is (n−1)/√n: 0.71 at n = 2, 2.85 at n = 10), it
  can flag a value from n = 3 on; it never flags half of the values or more. Flagged values are
  counted and listed, never dropped: every statistic uses every value (the median stands beside
  the mean for a reader who wants the robust one).
- Intervals: 95 % Student-t half-width of the mean of the launch means (the unit is the launch).
- Comparisons and their tests are contrasts of the study's model: ``dlvirt.analysis.model`` and
  ``dlvirt.analysis.claims``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from dlvirt.core.interval import outliers, t_half_width


@dataclass(frozen=True)
class Estimate:
    n: int           # values (all of them: outliers are flagged, not dropped)
    outliers: int    # values the modified z-score rule flags
    mean: float
    std: float
    ci95: float      # half-width of the 95 % Student-t interval (NaN for a single value)
    median: float
    iqr: float       # interquartile range (linear interpolation)


def estimate(values: list[float]) -> Estimate:
    """Mean, 95 % CI, median and IQR of every one of ``values``, and how many the outlier rule flags."""
    if not values:
        raise ValueError("no values to estimate from")
    array = np.asarray(values, dtype=float)
    n = array.size
    flagged = len(outliers(values))
    mean = float(array.mean())
    median = float(np.median(array))
    iqr = float(np.subtract(*np.percentile(array, [75, 25])))
    if n < 2:
        return Estimate(n, flagged, mean, math.nan, math.nan, median, iqr)
    std = float(array.std(ddof=1))
    return Estimate(n, flagged, mean, std, t_half_width(std, n), median, iqr)


def trend(values: list[float]) -> tuple[float, float]:
    """Slope per step and two-sided p-value of a least-squares line through ``values`` in order
    (NaN below three points)."""
    if len(values) < 3 or np.ptp(values) == 0:
        return math.nan, math.nan
    fit = sps.linregress(np.arange(len(values), dtype=float), np.asarray(values, dtype=float))
    return float(fit.slope), float(fit.pvalue)
