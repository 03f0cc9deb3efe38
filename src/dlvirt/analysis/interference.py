"""What other processes on the benchmark's CPUs did to a study, in the report's words: the share of
disturbed repetitions, the launches the rerun rule ran again (``run.interference``), how much
slower the disturbed repetitions were than the rest of their scenario, and which inconclusive
claims read rows that interference, not the design, left too noisy."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from dlvirt.core.records import JobResult

# A claim that came out inconclusive reads rows in which at least this share of the counted
# repetitions were disturbed: the host, not the design, is the first suspect (a quiet host gives none)
INTERFERED_ROWS = 0.1


def disturbed_reps(frame: pd.DataFrame) -> tuple[float, int]:
    """How many counted repetitions of ``frame``'s rows were disturbed, and of how many judged."""
    if frame.empty or "disturbed_share" not in frame:
        return 0.0, 0
    judged = frame[frame["disturbed_share"].notna()]
    return float((judged["disturbed_share"] * judged["reps"]).sum()), int(judged["reps"].sum())


def slowdown(records: Iterable[JobResult]) -> tuple[float, int] | None:
    """The median over scenarios with both of the disturbed repetitions' mean E2E over the undisturbed
    ones' (a ratio), and over how many scenarios; None: no scenario has both."""
    groups: dict[tuple[str, str, str], dict[bool, list[float]]] = {}
    for record in records:
        for run in record.runs:
            mark = (run.telemetry or {}).get("disturbed")
            if mark is not None and run.e2e_s > 0:
                group = groups.setdefault((record.tool, record.app, record.scenario_name), {True: [], False: []})
                group[bool(mark)].append(math.log(run.e2e_s))
    ratios = [math.exp(np.mean(g[True]) - np.mean(g[False])) for g in groups.values() if g[True] and g[False]]
    return (float(np.median(ratios)), len(ratios)) if ratios else None


def host_words(frame: pd.DataFrame, records: list[JobResult]) -> str:
    """The report's host section line: what share of the repetitions shared their cores with other
    processes, what the rule did about it and what it cost them."""
    disturbed, judged = disturbed_reps(frame)
    rules = [r.interference for r in records if r.interference]
    if not judged or not rules:
        return "not judged (run records without the rerun rule's marks)"
    above = sorted({rule["disturbed_above"] for rule in rules})
    text = (f"{disturbed / judged:.0%} of counted repetitions ({disturbed:.0f} of {judged}) shared their CPUs with "
            f"other processes beyond {', '.join(f'{a:.0%}' for a in above)} of their time "
            "(study.interference.disturbed_above)")
    reruns = sum(len(rule["attempts"]) - 1 for rule in rules)
    kept = sum(bool(rule["disturbed"]) for rule in rules)
    text += f"; {reruns} launch attempt(s) were run again by the rule, {kept} launch(es) kept disturbed (marked)"
    slower = slowdown(records)
    if slower is not None:
        text += (f"; disturbed repetitions took {slower[0] - 1:+.1%} against the undisturbed ones of the same "
                 f"scenario (median over {slower[1]} scenario(s))")
    unjudged = frame[frame["disturbed_share"].isna() & (frame["reps"] > 0)]
    if not unjudged.empty:
        text += (f"; {len(unjudged)} row(s) not judged (results recorded before the host read whose time the "
                 "launch's CPUs gave, or a guest whose start-up could not be timed: never run again, so they keep "
                 "what interference there was)")
    return text


def claim_note(verdict: str, rows: pd.DataFrame) -> str | None:
    """Why an inconclusive claim may owe its verdict to the host: the disturbed share of the
    repetitions in ``rows`` (those its figures draw), where it reaches ``INTERFERED_ROWS``."""
    if verdict != "inconclusive":
        return None
    disturbed, judged = disturbed_reps(rows)
    if not judged or disturbed / judged < INTERFERED_ROWS:
        return None
    return (f"interference, not the design, may have left this inconclusive: {disturbed / judged:.0%} of the counted "
            f"repetitions in the rows it reads ({disturbed:.0f} of {judged}) shared their CPUs with other processes; "
            "run it again on a quiet host")
