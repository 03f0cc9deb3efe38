"""LoadGen scenarios as a study axis (``study.scenarios``): Offline (the paper's, the default),
SingleStream and Server.

A scenario other than Offline measures something else than the paper's E2E of a whole workload:
per-query latency percentiles under one query at a time (SingleStream) or under Poisson arrivals at a
target rate (Server). So it is a measurement of its own: its jobs, run records and summary rows carry
the *run tool* ``mlperf-<Scenario>`` (``mlperf-SingleStream``, ``mlperf-Server``) where Offline's
keep ``mlperf``. Offline paths and names stay as they were, and every reader that asks for the
Offline tool (figures, claims, tables) keeps reading Offline only. Which scenarios a tool runs in is
its own declaration (``ToolKind.scenarios``): DLBS has no LoadGen and stays model-only (Offline-style).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dlvirt.core.kinds import ToolKind

OFFLINE, SINGLE_STREAM, SERVER = "Offline", "SingleStream", "Server"
SCENARIOS = (OFFLINE, SINGLE_STREAM, SERVER)
LATENCY_SCENARIOS = (SINGLE_STREAM, SERVER)
# LoadGen's latency percentiles a latency run record keeps: name -> the detail log's key
PERCENTILES = {"p50": "50.00", "p90": "90.00", "p95": "95.00", "p99": "99.00", "p99.9": "99.90"}


def run_tool(tool: str, scenario: str = OFFLINE) -> str:
    """The run tool of ``tool`` in LoadGen ``scenario``: the tool's name in Offline (``mlperf``, ``dlbs``),
    ``<tool>-<Scenario>`` in another (``mlperf-Server``)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown LoadGen scenario {scenario!r} (one of {', '.join(SCENARIOS)})")
    return tool if scenario == OFFLINE else f"{tool}-{scenario}"


def split_tool(name: str) -> tuple[str, str]:
    """``mlperf-Server`` -> (``mlperf``, ``Server``); ``mlperf`` -> (``mlperf``, ``Offline``)."""
    base, _, scenario = name.partition("-")
    if not scenario:
        return base, OFFLINE
    if scenario not in LATENCY_SCENARIOS:
        raise ValueError(f"run tool {name!r}: unknown LoadGen scenario {scenario!r}")
    return base, scenario


def run_tools(tools: Iterable[ToolKind], scenarios: Iterable[str] = (OFFLINE,)) -> list[str]:
    """The run tools of ``tools`` × ``scenarios``: each tool in the scenarios it declares (``kind.scenarios``)
    among those asked; a tool without LoadGen (model-only) once, Offline-style, whatever they are."""
    asked = list(scenarios)
    out: list[str] = []
    for kind in tools:
        for scenario in [s for s in asked if s in kind.scenarios] or [OFFLINE]:
            name = run_tool(kind.name, scenario)
            if name not in out:
                out.append(name)
    return out


def is_latency(name: str) -> bool:
    """Does run tool ``name`` measure per-query latency (SingleStream or Server)?"""
    return split_tool(name)[1] in LATENCY_SCENARIOS


def counts(loadgen: dict[str, Any] | None) -> bool:
    """Does a repetition count in the statistics? Offline (and records without a scenario): only when
    LoadGen found it VALID. SingleStream and Server: when LoadGen issued what was asked (minimum query
    count and duration met); their VALID also needs early stopping, which a study's few hundred
    queries rarely reach at p99, so that verdict is kept beside the numbers, not used to drop them."""
    if loadgen is None:
        return True
    if loadgen.get("scenario", OFFLINE) in LATENCY_SCENARIOS:
        return bool(loadgen.get("min_queries_met")) and bool(loadgen.get("min_duration_met"))
    return loadgen.get("validity", "VALID") == "VALID"
