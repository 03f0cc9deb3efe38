"""How many counted repetitions a launch runs: ``study.repetitions`` is a fixed count (as in the
paper) or adaptive ``{min, max, rel_ci95}``: stop once the 95 % CI half-width of the repetitions'
E2E is within ``rel_ci95`` of their mean (never before ``min``), or at ``max``."""

from __future__ import annotations

from typing import Any

from dlvirt.core.interval import relative_half_width

FIXED, PRECISE, AT_MAX = "fixed count", "rel_ci95 reached", "max reached"


def stop_reason(setting: int | dict[str, Any], values: list[float]) -> str | None:
    """Why the launch stops after ``values`` (E2E of the counted repetitions so far), or None to go on."""
    n = len(values)
    if isinstance(setting, int):
        return FIXED if n >= setting else None
    if n >= int(setting["min"]) and relative_half_width(values) <= float(setting["rel_ci95"]):
        return PRECISE
    return AT_MAX if n >= int(setting["max"]) else None


def count_problem(setting: int | dict[str, Any], ran: int, reason: str | None) -> str | None:
    """What is wrong with a launch that ran ``ran`` repetitions and stopped for ``reason`` (None: fine)."""
    if isinstance(setting, int):
        return None if ran == setting else f"{ran} repetitions ran, {setting} asked"
    if not int(setting["min"]) <= ran <= int(setting["max"]):
        return f"{ran} repetitions ran, {setting['min']} to {setting['max']} asked"
    return None if reason in (PRECISE, AT_MAX) else f"the harness gave no adaptive stop reason ({reason!r})"
