"""Mean and 95 % Student-t confidence interval after removing outliers beyond 3 sigma."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

OUTLIER_SIGMAS = 3.0


@dataclass(frozen=True)
class Estimate:
    n: int           # values kept
    outliers: int    # values removed as beyond 3 sigma
    mean: float
    std: float
    ci95: float      # half-width of the 95 % Student-t interval (NaN for a single value)


def inliers(values: list[float], sigmas: float = OUTLIER_SIGMAS) -> np.ndarray:
    """Mask of the values within ``sigmas`` standard deviations of the mean (one pass)."""
    array = np.asarray(values, dtype=float)
    if array.size < 3 or array.std(ddof=1) == 0:
        return np.ones(array.size, dtype=bool)
    return np.abs(array - array.mean()) <= sigmas * array.std(ddof=1)


def drop_outliers(values: list[float], sigmas: float = OUTLIER_SIGMAS) -> tuple[list[float], int]:
    """Values within ``sigmas`` standard deviations of the mean, and how many were dropped."""
    keep = inliers(values, sigmas)
    return list(np.asarray(values, dtype=float)[keep]), int((~keep).sum())


def estimate(values: list[float]) -> Estimate:
    if not values:
        raise ValueError("no values to estimate from")
    kept, removed = drop_outliers(values)
    array = np.asarray(kept, dtype=float)
    n = array.size
    mean = float(array.mean())
    if n < 2:
        return Estimate(n, removed, mean, math.nan, math.nan)
    std = float(array.std(ddof=1))
    half = float(sps.t.ppf(0.975, n - 1) * std / math.sqrt(n))
    return Estimate(n, removed, mean, std, half)
