"""Extensions beyond the paper: claims about tail latency under LoadGen's SingleStream and Server
scenarios (run tools mlperf-SingleStream, mlperf-Server; ``study.scenarios``). The paper measures
Offline E2E only; its mechanism (CFS throttling under a quota) predicts what these test.

Evidence: latency rows of the main host with at least ``MIN_LAUNCHES`` launches, not emulated, of
the reference model size. LoadGen's verdict on such a row is often INVALID for early stopping alone
(a study's few hundred queries rarely reach MLPerf's confidence at p99); those rows count, the
evidence says how many, since the statistic here is the launch-level model, not LoadGen's.

The unit is the launch, as for every claim: each launch's tail spread log(p99 / p50) (its mean p99
over its mean p50) is one value of the study's model ``log(value) ~ scenario + round`` fitted per
pooling group (site, run tool, hardware), and the claim is a contrast of it.
"""

from __future__ import annotations

import math

import pandas as pd

from dlvirt.analysis.claims.study import MIN_LAUNCHES, Study, averaged_pairs, pairs
from dlvirt.analysis.claims.verdicts import Part, Verdict, decide, higher, untestable
from dlvirt.analysis.model import split
from dlvirt.core.scenario import LOCAL_SITE

TAIL = "round_tail"  # per launch: its mean p99 over its mean p50


def with_tail(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with ``round_tail``: each launch's p99 / p50, from round_p99_s and round_p50_s."""
    tails = []
    for _, row in rows.iterrows():
        p50, p99 = split(row.get("round_p50_s")), split(row.get("round_p99_s"))
        ok = len(p50) == len(p99) and all(float(a) > 0 for a in p50)
        tails.append(";".join(f"{float(b) / float(a):.6g}" for a, b in zip(p50, p99, strict=True)) if ok else "")
    return rows.assign(**{TAIL: tails})


def evidence_rows(study: Study) -> tuple[pd.DataFrame, list[str]]:
    """The latency rows that are evidence, and why the others are not."""
    rows = study.latency
    if rows.empty:
        return rows, []
    launches = rows["round_p50_s"].map(lambda cell: len(split(cell))) if "round_p50_s" in rows \
        else pd.Series(0, index=rows.index)
    small = rows["reference_model"].astype(str).str.lower().isin(["false", "0"]) if "reference_model" in rows \
        else pd.Series(False, index=rows.index)
    why = []
    if bool((launches < MIN_LAUNCHES).any()):
        why.append(f"{int((launches < MIN_LAUNCHES).sum())} row(s) of fewer than {MIN_LAUNCHES} launches")
    if bool(small.any()):
        why.append(f"{int(small.sum())} row(s) of a smaller stand-in model")
    keep = (launches >= MIN_LAUNCHES) & ~small & (rows["site"] == LOCAL_SITE)
    return with_tail(rows[keep]), why


def cfs_quota_raises_the_tail(study: Study) -> Verdict:
    rows, weak = evidence_rows(study)
    if rows.empty:
        why = ["no SingleStream or Server rows (study.scenarios has Offline only)"] if study.latency.empty else \
            [f"no latency row is evidence ({'; '.join(weak)})"]
        return untestable(why)
    found = pairs(rows, "pinning", "VNL", "PIN", ["tool", "app", "platform", "cores", "processor"])
    if not found:
        return untestable(["no latency rows with both a vanilla (CFS quota) and a pinned (cpuset) launch set at the "
                           "same platform, cores and processor", *weak])
    contrast, each = averaged_pairs(rows, found, TAIL)
    cases = []
    for (a, _, j), case in zip(found, each, strict=True):
        throttled = rows.loc[a, "throttled_pct"] if "throttled_pct" in rows else math.nan
        where = f"{j['platform']}/{j['cores']}/{j['processor']}"
        cases.append(f"{j['tool'].split('-')[-1]} {str(j['app']).upper()} {where} (p99/p50) VNL over PIN "
                     f"{case.relative()}, VNL throttled {throttled:.0f} %")
    early = int((~rows["early_stopping_met"].astype(str).str.lower().isin(["true", "1"])).sum()) \
        if "early_stopping_met" in rows else 0
    notes = [f"note: {early} of the {len(rows)} evidence rows did not meet LoadGen's early stopping (too few queries "
             "for its own p99 confidence); the launches are the unit here"] if early else []
    part = Part(f"(p99/p50) vanilla over pinned, averaged over {len(found)} case(s)", contrast,
                higher("a CFS quota raises p99 more than p50", study.margin), cases)
    return decide([part], notes=[*notes, *(f"not evidence: {w}" for w in weak)])
