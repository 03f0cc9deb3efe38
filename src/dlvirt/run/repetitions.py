"""How many counted repetitions a launch runs: ``study.repetitions`` is a fixed count (as in the
paper) or adaptive ``{min, max, rel_ci95}``: stop once the 95 % CI half-width of the repetitions'
E2E is within ``rel_ci95`` of their mean (never before ``min``), or at ``max``. The interval is
that of every counted repetition, as the summary counts them (outliers are flagged, not dropped:
a slow repetition is part of what the platform costs). A cold start is the warm-up's business:
``study.warmup_repetitions`` warm-ups, a count fixed in advance per app and tool (Kalibera & Jones;
``dlvirt warmup`` suggests one from a pilot), the first over ``study.warmup_share`` of a
repetition's workload (``warmup_workload``), the rest whole. Every counted repetition counts: one
that disagrees with the next is never made a warm-up after the fact, since dropping whichever of two
disagrees (slow ones included) biases the launch mean and hides its spread. Whether a launch was
steady (``steady``: its first two counted repetitions agree within ``study.warmup_tolerance``) is
recorded and reported, never acted on."""

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


def steady(counted: list[float], tolerance: float | None) -> bool | None:
    """Was the launch steady: do its first two counted repetitions agree (None: not judged, no
    tolerance or fewer than two)? Reported only."""
    if tolerance is None or len(counted) < 2:
        return None
    return agree(counted[0], counted[1], tolerance)


def warmup_workload(workload: int, share: float, unit: int = 1) -> int:
    """What a warm-up of ``share`` (``study.warmup_share``) processes of a repetition's ``workload``:
    that share rounded up to whole ``unit``s (batches), at least one unit, at most the workload."""
    units = max(1, math.ceil(share * workload / unit - 1e-9))
    return min(workload, units * unit)


def warmup_problem(asked: int, ran: int) -> str | None:
    """What is wrong with a launch that ran ``ran`` warm-ups (None: fine). A tool's own warm-up
    (LoadGen Server calibrating its rate) may add one where none was asked."""
    return None if asked <= ran <= max(asked, 1) else f"{ran} warm-ups ran, {asked} asked"
