"""How many counted repetitions a launch runs: ``study.repetitions`` is a fixed count (as in the
paper) or adaptive ``{min, max, rel_ci95}``: stop once the 95 % CI half-width of the repetitions'
E2E is within ``rel_ci95`` of their mean (never before ``min``), or at ``max``. The interval is
that of every counted repetition, as the summary counts them (outliers are flagged, not dropped:
a slow repetition is part of what the platform costs). A cold start is the warm-up's business:
``is_warmup`` keeps warming up until two consecutive repetitions agree within
``study.warmup_tolerance`` (at least ``study.warmup_repetitions``, at most ``study.warmup_max``)."""

from __future__ import annotations

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


def agree(previous: float, value: float, tolerance: float) -> bool:
    """Do two consecutive repetitions' E2E agree within ``tolerance`` (relative to the faster)?"""
    return abs(value - previous) <= tolerance * min(value, previous)


def is_warmup(warmups: list[float], counted: int, value: float, minimum: int, maximum: int | None,
              tolerance: float | None) -> bool:
    """Is the repetition just run (E2E ``value``, after the warm-ups ``warmups`` and ``counted``
    counted ones) a warm-up too? The first ``minimum`` are; after them one that does not agree with
    the previous within ``tolerance`` is, until ``maximum`` warm-ups have run (None: no steady-state
    check, ``minimum`` exactly). The repetition that agrees is the launch's first counted one, and
    once counting has begun every repetition counts."""
    n = len(warmups)
    if counted:
        return False
    if n < minimum:
        return True
    if maximum is None or tolerance is None or n == 0 or n >= maximum:
        return False
    return not agree(warmups[-1], value, tolerance)


def steady(warmups: list[float], counted: list[float], tolerance: float | None) -> bool | None:
    """Did the launch reach steady state: its first counted repetition agreed with its last warm-up
    (None: not checked, no warm-up or no counted repetition)?"""
    if tolerance is None or not warmups or not counted:
        return None
    return agree(warmups[-1], counted[0], tolerance)


def warmup_problem(minimum: int, maximum: int | None, ran: int) -> str | None:
    """What is wrong with a launch that ran ``ran`` warm-ups (None: fine)."""
    top = minimum if maximum is None else max(minimum, maximum)
    return None if minimum <= ran <= top else f"{ran} warm-ups ran, {minimum} to {top} asked"
