"""Extension beyond the paper: what virtualisation costs an LLM's decode against its prefill.

Hypothesis and its source: decoding one token reads every weight once for a few arithmetic
operations per byte (memory-bandwidth bound), while prefill multiplies a whole prompt by the same
weights (compute bound) (Pope et al., "Efficiently Scaling Transformer Inference", MLSys 2023; Kwon
et al., "Efficient Memory Management for Large Language Model Serving with PagedAttention", SOSP
2023). Memory-bound work is where platforms differ: a guest's TLB misses walk two page tables
(Bhargava et al., "Accelerating two-dimensional page walks for virtualized systems", ASPLOS 2008).
So a virtualised platform's time per output token over bare metal's should exceed its time to
first token over bare metal's.

The unit is the launch, as for every claim: each launch's TPOT / TTFT (its mean time per output
token over its mean time to first token, the app's own clocks: ``round_tpot_s``, ``round_ttft_s``)
is one value of the study's model ``log(value) ~ scenario + round`` per pooling group, and the
claim is the contrast platform over BM at the same app, cores, CPU mode and processor.
"""

from __future__ import annotations

import pandas as pd

from dlvirt.analysis.claims.study import Study, averaged_pairs, pairs
from dlvirt.analysis.claims.verdicts import Part, Verdict, decide, higher, untestable
from dlvirt.analysis.model import split
from dlvirt.core.scenario import LOCAL_SITE

RATIO = "round_decode_prefill"  # per launch: its mean TPOT over its mean TTFT
BASELINE = "BM"


def with_ratio(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with ``round_decode_prefill`` from round_tpot_s and round_ttft_s ("" where missing)."""
    ratios = []
    for _, row in rows.iterrows():
        ttft, tpot = split(row.get("round_ttft_s")), split(row.get("round_tpot_s"))
        ok = bool(ttft) and len(ttft) == len(tpot) and all(float(a) > 0 for a in ttft)
        ratios.append(";".join(f"{float(b) / float(a):.6g}" for a, b in zip(ttft, tpot, strict=True)) if ok else "")
    return rows.assign(**{RATIO: ratios})


def decode_costs_more(study: Study) -> Verdict:
    rows = study.e2e
    rows = with_ratio(rows[rows["site"] == LOCAL_SITE]) if "round_ttft_s" in rows else rows.iloc[0:0]
    rows = rows[rows[RATIO] != ""] if RATIO in rows else rows
    if rows.empty:
        return untestable(["no rows of a token app (study.apps without llm, or its rows are not evidence)"])
    found = [match for platform in sorted(set(rows["platform"]) - {BASELINE})
             for match in pairs(rows, "platform", platform, BASELINE, ["tool", "app", "cores", "pinning", "processor"])]
    if not found:
        return untestable([f"no token-app rows of a virtualised platform beside a {BASELINE} twin (same app, cores, "
                           "CPU mode and processor)"])
    contrast, each = averaged_pairs(rows, found, RATIO)
    cases = [f"{str(j['app']).upper()} {rows.loc[a, 'platform']}/{j['cores']}/{j['pinning']}/{j['processor']} "
             f"(TPOT/TTFT) over {BASELINE} {case.relative()}" for (a, _, j), case in zip(found, each, strict=True)]
    part = Part(f"(TPOT/TTFT) platform over {BASELINE}, averaged over {len(found)} case(s)", contrast,
                higher("virtualisation costs decode more than prefill", study.margin), cases)
    return decide([part])
