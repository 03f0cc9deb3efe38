"""Estimates and tests a reviewer can check: robust outliers, Student-t intervals, Welch tests and
equivalence (TOST) on relative differences.

- Outliers: the modified z-score of Iglewicz & Hoaglin, ``0.6745 · |x − median| / MAD > 3.5``
  (with MAD = 0, the mean absolute deviation · 1.2533 stands in). Unlike a 3σ rule on the sample's
  own standard deviation (largest possible |z| at n is (n−1)/√n: 0.71 at n = 2, 2.85 at n = 10), it
  can flag a value from n = 3 on; it never flags half of the values or more. Flagged values are
  counted and listed, never dropped: every statistic uses every value (the median stands beside
  the mean for a reader who wants the robust one).
- Intervals: 95 % Student-t half-width of the mean of the *units* (launch means when a scenario ran
  as several replicates, else its repetitions).
- Comparisons work on the relative difference ``d = a / b − 1`` with its delta-method standard error
  and Welch–Satterthwaite degrees of freedom. Every decision reads the 90 % interval of ``d``,
  i.e. two one-sided tests at α = 0.05 each: "lower" = its upper bound below 0 (one-sided Welch
  test); "alike" = the interval inside ±margin (TOST); a decision the other way needs the interval
  beyond the margin; anything between is *undecided* (``None``): the data cannot tell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from dlvirt.core.interval import outliers, t_half_width

ALPHA = 0.05  # per one-sided test


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


@dataclass(frozen=True)
class Mean:
    """A mean with its standard error and degrees of freedom (NaN se: no interval)."""

    mean: float
    se: float
    df: float

    @classmethod
    def from_ci95(cls, mean: float, ci95: float, n: int) -> Mean:
        if n < 2 or math.isnan(ci95):
            return cls(mean, math.nan, math.nan)
        return cls(mean, ci95 / float(sps.t.ppf(0.975, n - 1)), n - 1)

    @property
    def ci95(self) -> float:
        return math.nan if math.isnan(self.se) else float(sps.t.ppf(0.975, self.df) * self.se)


def _welch_df(parts: list[tuple[float, float]]) -> float:
    """Welch–Satterthwaite degrees of freedom of a sum of variances ``(variance, df)``."""
    total = sum(v for v, _ in parts)
    denominator = sum(v * v / df for v, df in parts if v > 0)
    return total * total / denominator if denominator > 0 else math.inf


def ratio(a: Mean, b: Mean) -> Mean:
    """``a / b`` with the delta-method standard error and Welch–Satterthwaite df."""
    r = a.mean / b.mean
    va, vb = (r * a.se / a.mean) ** 2, (r * b.se / b.mean) ** 2
    return Mean(r, math.sqrt(va + vb), _welch_df([(va, a.df), (vb, b.df)]))


@dataclass(frozen=True)
class Interval:
    """The estimate and the 90 % interval (two one-sided 5 % tests) of a quantity."""

    value: float
    low: float
    high: float
    df: float

    def __str__(self) -> str:
        return f"{self.value:+.1%} [90 % CI {self.low:+.1%}, {self.high:+.1%}; df {self.df:.3g}]"


def interval(m: Mean) -> Interval:
    if math.isnan(m.se):
        return Interval(m.mean, math.nan, math.nan, math.nan)
    half = float(sps.t.ppf(1 - ALPHA, m.df)) * m.se if m.se > 0 else 0.0
    return Interval(m.mean, m.mean - half, m.mean + half, m.df)


def relative_difference(a: Mean, b: Mean) -> Interval:
    """``a / b − 1`` with its 90 % interval (Welch, delta method)."""
    r = interval(ratio(a, b))
    return Interval(r.value - 1, r.low - 1, r.high - 1, r.df)


def lower(d: Interval, margin: float) -> bool | None:
    """Is ``a`` lower than ``b`` (``d`` = a / b − 1)? True: one-sided Welch test, upper bound < 0.
    False: ``a`` is not lower by more than ``margin`` (lower bound ≥ −margin). None: undecided."""
    if math.isnan(d.low):
        return None
    if d.high < 0:
        return True
    if d.low >= -margin:
        return False
    return None


def alike(d: Interval, margin: float) -> bool | None:
    """Equivalence by TOST: True if the 90 % interval lies inside ±margin; False if it lies wholly
    beyond the margin (the difference exceeds it, one-sided test); None: undecided."""
    if math.isnan(d.low):
        return None
    if -margin < d.low and d.high < margin:
        return True
    if d.low > margin or d.high < -margin:
        return False
    return None


def above(m: Mean, threshold: float) -> bool | None:
    """Is the mean above ``threshold``? True: lower 90 % bound above it; False: upper bound below it."""
    i = interval(m)
    if math.isnan(i.low):
        return None
    if i.low > threshold:
        return True
    if i.high < threshold:
        return False
    return None


def trend(values: list[float]) -> tuple[float, float]:
    """Slope per step and two-sided p-value of a least-squares line through ``values`` in order
    (NaN below three points)."""
    if len(values) < 3 or np.ptp(values) == 0:
        return math.nan, math.nan
    fit = sps.linregress(np.arange(len(values), dtype=float), np.asarray(values, dtype=float))
    return float(fit.slope), float(fit.pvalue)
