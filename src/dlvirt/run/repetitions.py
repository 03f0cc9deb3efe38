"""How many counted repetitions a launch runs: ``study.repetitions`` is a fixed count (as in the
paper) or adaptive ``{min, max, rel_ci95}``: stop once the 95 % CI half-width of the repetitions'
E2E is within ``rel_ci95`` of their mean (never before ``min``), or at ``max``. The interval is
that of the repetitions the summary will keep: outliers by its rule (``interval.inliers``) set aside,
so one slow repetition (a cold cache, a daemon waking up) does not keep a stable launch running,
and at least ``min`` of them kept."""

from __future__ import annotations

from typing import Any

from dlvirt.core.interval import inliers, relative_half_width

FIXED, PRECISE, AT_MAX = "fixed count", "rel_ci95 reached", "max reached"


def kept(values: list[float]) -> list[float]:
    """The repetitions' E2E times the summary keeps (outliers set aside)."""
    return [v for v, keep in zip(values, inliers(values), strict=True) if keep]


def precision(values: list[float]) -> float:
    """The relative 95 % CI half-width of the kept repetitions (what the run record calls rel_ci95)."""
    return relative_half_width(kept(values))


def stop_reason(setting: int | dict[str, Any], values: list[float]) -> str | None:
    """Why the launch stops after ``values`` (E2E of the counted repetitions so far), or None to go on."""
    n = len(values)
    if isinstance(setting, int):
        return FIXED if n >= setting else None
    if len(kept(values)) >= int(setting["min"]) and precision(values) <= float(setting["rel_ci95"]):
        return PRECISE
    return AT_MAX if n >= int(setting["max"]) else None


def count_problem(setting: int | dict[str, Any], ran: int, reason: str | None) -> str | None:
    """What is wrong with a launch that ran ``ran`` repetitions and stopped for ``reason`` (None: fine)."""
    if isinstance(setting, int):
        return None if ran == setting else f"{ran} repetitions ran, {setting} asked"
    if not int(setting["min"]) <= ran <= int(setting["max"]):
        return f"{ran} repetitions ran, {setting['min']} to {setting['max']} asked"
    return None if reason in (PRECISE, AT_MAX) else f"the harness gave no adaptive stop reason ({reason!r})"
