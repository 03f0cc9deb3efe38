"""Launches that shared their CPUs with other processes, and the rule that runs them again
(``study.interference``).

The runner reads from the host whose time the launch's host CPUs gave while the platform ran it
(``system.whose``: the launch's, its platform's, others') and puts each repetition's share into its
telemetry (``accounted``). A counted repetition is *disturbed* when other processes took more than
``disturbed_above`` of the time its cores could use on its CPUs (``others_on_cpus_share``; others may
use freely what a vanilla launch's quota leaves idle of the CPUs it floats on), and more than the
accounting's own
resolution (``whose.ACCOUNTING_TICKS`` ticks); the platform's own processes (dockerd, a container's
shim, QEMU's non-vCPU threads) never count. A launch with a disturbed counted repetition is run
again in the same job, so in the same round, at most ``reruns`` times; the last attempt is the one
recorded, marked when it is still disturbed. The rule reads only that outside signal, never a
measured time, and is the same for every platform: bare metal, a container and a guest alike
(a guest's repetitions are placed on the host's clock through its start-up: ``accounted``). A
discarded attempt leaves nothing a reader could take for a launch: only the job's one result file,
written last, is read (``runner.publish_result``); its account (``account``) stays in that record.
"""

from __future__ import annotations

import dataclasses
import os
from datetime import datetime
from typing import Any

from dlvirt.core.records import HarnessOutput, Repetition
from dlvirt.system.whose import ACCOUNTING_TICKS, Sampler


def accounted(harness: HarnessOutput, sampler: Sampler, ready_host_s: float | None,
              cores: float | None = None) -> HarnessOutput:
    """``harness`` with each repetition's telemetry holding the host's account of its window
    (``whose.window``: the launch's, the platform's and others' time on its CPUs, of which it may use
    ``cores``' time). The harness timed
    its repetitions on its platform's clock; ``ready_host_s``, the host's time of its ready point
    (the run's start plus ``Platform.startup_s``), places them on the host's: the same clock for
    bare metal and a container, a guest's own shifted by the difference (good to the start marker's
    polling interval). Unchanged where that is unknown or the readings do not cover a repetition."""
    ready = (harness.timeline or {}).get("ready_unix")
    if ready_host_s is None or ready is None:
        return harness
    shift = ready_host_s - float(ready)

    def one(run: Repetition) -> Repetition:
        found = sampler.window(datetime.fromisoformat(run.started_utc).timestamp() + shift,
                               datetime.fromisoformat(run.finished_utc).timestamp() + shift, cores)
        return run if found is None else dataclasses.replace(run, telemetry={**(run.telemetry or {}), **found})

    return dataclasses.replace(harness, runs=[one(r) for r in harness.runs], warmups=[one(r) for r in harness.warmups])


def judged(runs: list[Repetition]) -> bool:
    """Can the rule judge these repetitions: did the host account every one of them (``accounted``)?"""
    return bool(runs) and all((r.telemetry or {}).get("accounted_from") == "host" for r in runs)


def disturbed(telemetry: dict[str, Any] | None, above: float) -> bool | None:
    """Did other processes take more than ``above`` of the time the repetition's cores could use on its
    CPUs (``whose.window``: for a vanilla launch, beyond what its quota leaves idle)? None: not measured."""
    if not telemetry or telemetry.get("others_on_cpus_share") is None:
        return None
    return bool(telemetry["others_on_cpus_share"] > above
                and telemetry["others_taken_s"] > ACCOUNTING_TICKS / os.sysconf("SC_CLK_TCK"))


def marked(runs: list[Repetition], above: float) -> list[Repetition]:
    """``runs`` with ``telemetry.disturbed`` set by the threshold (left out where not measured)."""
    out = []
    for run in runs:
        verdict = disturbed(run.telemetry, above)
        out.append(run if verdict is None or run.telemetry is None
                   else dataclasses.replace(run, telemetry={**run.telemetry, "disturbed": verdict}))
    return out


def attempt(number: int, runs: list[Repetition], total_s: float) -> dict[str, Any]:
    """One attempt's entry in the account: how many of its counted repetitions were disturbed, the
    most of their cores' time others took, and the names of the others seen."""
    shares = [r.telemetry["others_on_cpus_share"] for r in runs
              if r.telemetry and r.telemetry.get("others_on_cpus_share") is not None]
    seen: dict[str, float] = {}
    for run in runs:
        for name, seconds in ((run.telemetry or {}).get("others_seen") or {}).items():
            seen[name] = round(seen.get(name, 0.0) + seconds, 2)
    platform = [r.telemetry["platform_on_cpus_share"] for r in runs
                if r.telemetry and r.telemetry.get("platform_on_cpus_share") is not None]
    return {"attempt": number, "counted": len(runs),
            "disturbed": sum(bool((r.telemetry or {}).get("disturbed")) for r in runs),
            "others_share_max": round(max(shares), 4) if shares else None,
            "platform_share_max": round(max(platform), 4) if platform else None,
            "others_seen": dict(sorted(seen.items(), key=lambda kv: -kv[1])[:3]), "total_s": round(total_s, 4)}


def run_again(entry: dict[str, Any], rule: dict[str, Any] | None) -> bool:
    """The rule: run the launch again when an attempt had a disturbed counted repetition and fewer
    than ``reruns`` reruns have been made."""
    return rule is not None and entry["disturbed"] > 0 and entry["attempt"] <= int(rule["reruns"])


def why(entry: dict[str, Any], rule: dict[str, Any]) -> str:
    """Why an attempt was run again (or, the last, is marked), in words."""
    seen = ", ".join(f"{name} {seconds:g} s" for name, seconds in entry["others_seen"].items()) or "none visible"
    return (f"{entry['disturbed']} of {entry['counted']} counted repetitions shared their CPUs with other processes "
            f"beyond {rule['disturbed_above']:.0%} of their time (at most {entry['others_share_max']:.0%}; "
            f"other processes seen: {seen})")


def account(rule: dict[str, Any], attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """The run record's ``interference``: the rule, every attempt (the last is the record's) with
    why each earlier one was run again, and whether the recorded one is still disturbed."""
    entries = [{**entry, "why": why(entry, rule)} if entry["disturbed"] else entry for entry in attempts]
    return {"disturbed_above": rule["disturbed_above"], "reruns": rule["reruns"], "attempts": entries,
            "kept": attempts[-1]["attempt"], "disturbed": attempts[-1]["disturbed"] > 0}

