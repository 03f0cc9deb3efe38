"""LoadGen scenarios as a study axis (``study.scenarios``): Offline (the paper's, the default),
SingleStream and Server.

A scenario other than Offline measures something else than the paper's E2E of a whole workload:
per-query latency percentiles under one query at a time (SingleStream) or under Poisson arrivals at a
target rate (Server). So it is a measurement of its own: its jobs, run records and summary rows carry
the *run tool* ``mlperf-<Scenario>`` (``mlperf-SingleStream``, ``mlperf-Server``) where Offline's
keep ``mlperf``. Offline paths and names stay as they were, and every reader that asks for
``tool == "mlperf"`` (figures, claims, tables) keeps reading Offline only. DLBS has no LoadGen: it
stays model-only (Offline-style).
"""

from __future__ import annotations

from typing import Any

OFFLINE, SINGLE_STREAM, SERVER = "Offline", "SingleStream", "Server"
SCENARIOS = (OFFLINE, SINGLE_STREAM, SERVER)
LATENCY_SCENARIOS = (SINGLE_STREAM, SERVER)
LOADGEN_TOOL = "mlperf"
# LoadGen's latency percentiles a latency run record keeps: name -> the detail log's key
PERCENTILES = {"p50": "50.00", "p90": "90.00", "p95": "95.00", "p99": "99.00", "p99.9": "99.90"}


def run_tool(tool: str, scenario: str = OFFLINE) -> str:
    """The run tool of ``tool`` in LoadGen ``scenario``: ``mlperf`` (Offline), ``mlperf-Server``, ``dlbs``."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown LoadGen scenario {scenario!r} (one of {', '.join(SCENARIOS)})")
    return tool if tool != LOADGEN_TOOL or scenario == OFFLINE else f"{tool}-{scenario}"


def split_tool(name: str) -> tuple[str, str | None]:
    """``mlperf-Server`` -> (``mlperf``, ``Server``); ``mlperf`` -> (``mlperf``, ``Offline``);
    ``dlbs`` -> (``dlbs``, None)."""
    base, _, scenario = name.partition("-")
    if base != LOADGEN_TOOL:
        return name, None
    if not scenario:
        return base, OFFLINE
    if scenario not in LATENCY_SCENARIOS:
        raise ValueError(f"run tool {name!r}: unknown LoadGen scenario {scenario!r}")
    return base, scenario


def run_tools(tools: list[str] | tuple[str, ...], scenarios: list[str] | tuple[str, ...] = (OFFLINE,)) -> list[str]:
    """The run tools of a study's ``tools`` × ``scenarios`` (DLBS once, whatever the scenarios)."""
    out: list[str] = []
    for tool in tools:
        for scenario in (scenarios if tool == LOADGEN_TOOL else (OFFLINE,)):
            name = run_tool(tool, scenario)
            if name not in out:
                out.append(name)
    return out


def is_latency(name: str) -> bool:
    """Does run tool ``name`` measure per-query latency (SingleStream or Server)?"""
    return split_tool(name)[1] in LATENCY_SCENARIOS


# the run tools whose rows carry latency percentiles, and every run tool there can be (the workflow's wildcard)
LATENCY_RUN_TOOLS = tuple(run_tool(LOADGEN_TOOL, s) for s in LATENCY_SCENARIOS)
ALL_RUN_TOOLS = ("mlperf", *LATENCY_RUN_TOOLS, "dlbs")


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
