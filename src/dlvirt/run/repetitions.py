"""How many counted repetitions a launch runs: ``study.repetitions`` is a fixed count (as in the
paper) or adaptive ``{min, max, rel_ci95}``: stop once the 95 % CI half-width of the repetitions'
E2E is within ``rel_ci95`` of their mean (never before ``min``), or at ``max``. The interval is
that of every counted repetition, as the summary counts them (outliers are flagged, not dropped:
a slow repetition is part of what the platform costs). A cold start is the warm-up's business:
after ``study.warmup_repetitions`` warm-ups (each ``study.warmup_share`` of a repetition's workload:
``warmup_workload``), a first counted repetition that does not agree with the
next within ``study.warmup_tolerance`` becomes a warm-up too (``unsteady``), at most
``study.warmup_max`` in all."""

from __future__ import annotations

import math
from typing import Any

from dlvirt.core.interval import relative_half_width

FIXED, PRECISE, AT_MAX = "fixed count", "rel_ci95 reached", "max reached"


def precision(values: list[float]) -> float:
    """The relative 95 % CI half-width of the repetitions (what the run record calls rel_ci95)."""
    return relative_half_width(values)


def stop_reason(setting: int | dict[str, Any], values: list[float]) -> str | None:
    """Why the launch stops after ``values`` (E2E of the counted repetitions so far), or None to go on."""
    n = len(values)
    if isinstance(setting, int):
        return FIXED if n >= setting else None
    if n >= int(setting["min"]) and precision(values) <= float(setting["rel_ci95"]):
        return PRECISE
    return AT_MAX if n >= int(setting["max"]) else None


def count_problem(setting: int | dict[str, Any], ran: int, reason: str | None) -> str | None:
    """What is wrong with a launch that ran ``ran`` repetitions and stopped for ``reason`` (None: fine)."""
    if isinstance(setting, int):
        return None if ran == setting else f"{ran} repetitions ran, {setting} asked"
    if not int(setting["min"]) <= ran <= int(setting["max"]):
        return f"{ran} repetitions ran, {setting['min']} to {setting['max']} asked"
    return None if reason in (PRECISE, AT_MAX) else f"the harness gave no adaptive stop reason ({reason!r})"


def agree(first: float, second: float, tolerance: float) -> bool:
    """Do two consecutive repetitions' E2E agree within ``tolerance`` (relative to the faster)?"""
    return abs(second - first) <= tolerance * min(first, second)


def unsteady(warmups: int, counted: list[float], maximum: int | None, tolerance: float | None) -> bool:
    """Is the launch not yet in steady state, so that its first counted repetition is a warm-up
    after all? So when its first two counted repetitions (E2E ``counted``) do not agree within
    ``tolerance`` and fewer than ``maximum`` warm-ups (``warmups``) have run (None: no check).
    The launch's first ``study.warmup_repetitions`` are warm-ups regardless; this makes warm-up last
    until two consecutive repetitions agree, the first of them counted, at most ``maximum``."""
    if maximum is None or tolerance is None or warmups >= maximum or len(counted) != 2:
        return False
    return not agree(counted[0], counted[1], tolerance)


def steady(counted: list[float], tolerance: float | None) -> bool | None:
    """Did the launch reach steady state: its first two counted repetitions agree (None: not checked,
    fewer than two)? False: ``warmup_max`` warm-ups ran first."""
    if tolerance is None or len(counted) < 2:
        return None
    return agree(counted[0], counted[1], tolerance)


def warmup_workload(workload: int, share: float, unit: int = 1) -> int:
    """What a warm-up of ``share`` (``study.warmup_share``) processes of a repetition's ``workload``:
    that share rounded up to whole ``unit``s (batches), at least one unit, at most the workload."""
    units = max(1, math.ceil(share * workload / unit - 1e-9))
    return min(workload, units * unit)


def warmup_problem(minimum: int, maximum: int | None, ran: int) -> str | None:
    """What is wrong with a launch that ran ``ran`` warm-ups (None: fine)."""
    top = minimum if maximum is None else max(minimum, maximum)
    return None if minimum <= ran <= top else f"{ran} warm-ups ran, {minimum} to {top} asked"
