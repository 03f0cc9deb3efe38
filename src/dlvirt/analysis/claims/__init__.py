"""Machine-checked verdicts on the paper's findings, decided by stated tests on the study's model.

The pieces: ``dlvirt.analysis.model`` (one model of the log launch means over all launches, every
comparison a contrast of it), ``study`` (which rows are evidence, the fitted models), ``verdicts``
(the hypotheses a part states, Holm over parts, the verdict words) and one module per claim family.
Verdicts: ``holds`` (the effect beyond the claim's margin on the side it names) / ``does not hold``
/ ``negligible`` (does not hold, and shown within ±margin) / ``inconclusive`` (the data cannot
decide: the evidence states the smallest effect it could have detected, or only rows too weak to be
evidence exist) / ``not testable here`` (with why: what this host or config did not measure). The
claims of one study are one family (Holm across them, ``verdicts.family``).

A verdict is about the host on the study's own day unless a calibration of its hardware
(``claims.calibration``, ``dlvirt calibrate``) is given: then every E2E contrast carries the
calibration's day variance too (``study.Study``), and the claim's ``calibration`` column names the
file where that held for every contrast it tested (the evidence ends with the scope either way).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dlvirt.analysis.catalog import FIGURES
from dlvirt.analysis.claims.gpu import gpu_speeds_nlp_not_ic_rs
from dlvirt.analysis.claims.latency import cfs_quota_raises_the_tail
from dlvirt.analysis.claims.mvm import mvm_like_vm_but_nlp_and_boots_faster
from dlvirt.analysis.claims.overhead import (
    cn_cheapest_at_chr1,
    cn_overhead_grows_as_chr_falls,
    overhead_grows_without_idle_cores,
)
from dlvirt.analysis.claims.pinning import pinning_lowers_e2e
from dlvirt.analysis.claims.sandbox import sandbox_costs_preprocessing_not_inference
from dlvirt.analysis.claims.scaleup import SCALE_UP_FROM, scale_up_stops_paying
from dlvirt.analysis.claims.study import Study
from dlvirt.analysis.claims.tokens import decode_costs_more
from dlvirt.analysis.claims.verdicts import (
    ALPHA,
    DEFAULT_MARGIN,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NEGLIGIBLE,
    UNTESTABLE,
    Verdict,
    family,
    reading,
)
from dlvirt.analysis.columns import read_summary
from dlvirt.core import formats
from dlvirt.core.atomic import write_text_atomic
from dlvirt.core.calibration import Calibration, read_calibration
from dlvirt.core.formats import read_document
from dlvirt.plan.leftout import Gap, from_documents

__all__ = ["CLAIMS", "COLUMNS", "FAILS", "HOLDS", "INCONCLUSIVE", "NEGLIGIBLE", "UNTESTABLE", "evaluate",
           "write_claims"]

# per part, ";"-joined in the order of ``part``: margin (the bound tested), ratio (the estimate) with its
# 90 % interval, df, launches (n) and outcome; p_holds and p_fails are the claim's, Holm across the claims
PART_COLUMNS = ["part", "margin", "ratio", "ratio_low", "ratio_high", "df", "launches", "outcome"]
COLUMNS = ["id", "claim", "source", "verdict", "reading", "evidence", "test", "figures", *PART_COLUMNS, "p_holds",
           "p_fails", "calibration"]
MODEL = ("contrast of the launch-level model log(launch mean) ~ scenario + round (+ node) per site, tool and "
         "hardware, a residual variance per platform where their spreads differ (with claims.calibration, plus its "
         "day-to-day variance, on at most its df); 90 % interval of the ratio")
FAMILY = f"Holm across the study's tested claims, family-wise α = {ALPHA:g} for each verdict"


@dataclass(frozen=True)
class Claim:
    id: str
    text: str
    source: str
    test: str  # {margin} and {model} are filled in
    check: Callable[[Study], Verdict]


CLAIMS: tuple[Claim, ...] = (
    Claim("pinning", "Pinning lowers E2E time on each platform", "§V-B; Figs. 4a, 6, 7a, 8a",
          "per platform, one part: the average PIN/VNL {model} over app, cores (below the host's) and processor; "
          "yes: a gain beyond {margin} (one-sided t-test against −{margin}); no: less (the other one-sided test), "
          "negligible if within ±{margin} (TOST); Holm over the platforms; holds if yes on every platform measured",
          pinning_lowers_e2e),
    Claim("cn_overhead_chr", "Vanilla CN overhead over BM grows as the container-to-host core ratio (CHR) falls",
          "§V-A", "the average over apps and processors of (CN/BM at the lowest CHR) / (CN/BM at the highest), "
          "vanilla, {model}; yes: growth beyond {margin} (one-sided t-test against +{margin}); no: less, negligible "
          "if within ±{margin} (TOST)",
          cn_overhead_grows_as_chr_falls),
    Claim("scale_up_limit", "Scale-up stops paying beyond a level", "§V-D; Figs. 4b, 6, 7a",
          f"the average over app × platform × CPU mode × processor lines of the last step's last/previous time "
          f"ratio, on steps from {SCALE_UP_FROM} cores on only, {{model}}; yes: the gain is below {{margin}} "
          "(one-sided test against −{margin}); no: it is above (the other one-sided test)", scale_up_stops_paying),
    Claim("gpu_speedup", "A GPU speeds NLP up by more than 3×, but IC and RS much less", "§IV-C, §IV-D; Figs. 7b, 8b",
          "per app, the average CPU/GPU time ratio over platforms, cores and CPU modes, {model}: above 3× for NLP, "
          "below 3× for IC and RS (one-sided t-tests against 3×, Holm over the apps)", gpu_speeds_nlp_not_ic_rs),
    Claim("mvm_like_vm", "MVM performs like VM except for I/O-heavy NLP, and MVM boots faster", "§V-G; Fig. 10",
          "per VMM, vanilla CPU, same cores, {model}: MVM/VM per app (averaged over cores) within ±{margin} for IC, SR "
          "and RS (TOST; no: beyond it); slower by more than {margin} for NLP; boot time (per launch, same app and "
          "cores) lower by more than {margin}; Holm over the parts",
          mvm_like_vm_but_nlp_and_boots_faster),
    Claim("no_idle_cores", "Without idle host cores the virtualisation overhead grows", "§V-C; Fig. 9",
          "IC on CPU: the average over CN, VM, VMCN and CPU modes of (P/BM at instance = host cores) / (P/BM at the "
          "largest smaller level), {model}; yes: growth beyond {margin} (one-sided t-test against +{margin}); no: "
          "less, negligible if within ±{margin} (TOST)",
          overhead_grows_without_idle_cores),
    Claim("cn_cheapest_chr1", "CN is the cheapest virtualised platform at CHR = 1", "§V-H; Fig. 11",
          "vanilla, at instance = host cores (main host) or an edge host's largest level: per other virtualised "
          "platform, CN/other averaged over apps and hosts, {model}; yes: cheaper by more than {margin}; no: less, "
          "negligible if within ±{margin} (TOST); Holm over the platforms", cn_cheapest_at_chr1),
    # extensions beyond the paper (its source says so): tail latency under LoadGen SingleStream / Server
    Claim("latency_tail_quota", "Extension: a CFS quota raises p99 latency more than p50",
          "extension (not the paper's claim; its CFS-throttling mechanism); latency figures",
          "per latency row pair at the same run tool, app, platform, cores and processor: each launch's p99/p50, "
          "vanilla (CFS quota) over pinned (cpuset), averaged over the pairs; the launch-level model log(launch "
          "p99/p50) ~ scenario + round per site, run tool and hardware, 90 % interval of the ratio; yes: growth beyond "
          "{margin} (one-sided t-test against +{margin}); no: less, negligible if within ±{margin} (TOST)",
          cfs_quota_raises_the_tail),
    Claim("sandbox_pre_not_infer", "Extension: the sandbox's cost falls on pre-processing, not on inference",
          "extension (not the paper's claim; gVisor's user-space kernel serves every system call); sandbox figure",
          "per phase, the average over SCN/CN pairs (same app, cores and CPU mode, CPU) of the phase's busy time, the "
          "launch-level model log(launch phase mean) ~ scenario + round per site, run tool and hardware, 90 % interval "
          "of the ratio; pre-processing: yes: slower beyond {margin} (one-sided t-test against +{margin}); inference: "
          "within ±{margin} (TOST); Holm over the two parts; holds if both",
          sandbox_costs_preprocessing_not_inference),
    Claim("llm_decode_cost", "Extension: virtualisation slows LLM decode (memory-bound) more than prefill",
          "extension (not the paper's claim): decode is memory-bandwidth bound, prefill compute bound (Pope et al., "
          "MLSys 2023; Kwon et al., SOSP 2023), and guests pay two-dimensional page walks on memory-bound work "
          "(Bhargava et al., ASPLOS 2008); tokens figure",
          "per token-app row pair at the same app, cores, CPU mode and processor: each launch's TPOT/TTFT (the app's "
          "own prefill and decode clocks), virtualised platform over BM, averaged over the pairs; the launch-level "
          "model log(launch TPOT/TTFT) ~ scenario + round per site, tool and hardware, 90 % interval of the ratio; "
          "yes: growth beyond {margin} (one-sided t-test against +{margin}); no: less, negligible if within "
          "±{margin} (TOST)", decode_costs_more),
)


def decide(claim: Claim, study: Study, lenient: Callable[[], Study]) -> Verdict:
    """The claim on the evidence rows; if those cannot test it but the rows set aside could
    (``lenient``: the study with them as evidence), the data exist and are too weak: inconclusive,
    saying why."""
    verdict = claim.check(study)
    if verdict.verdict != UNTESTABLE or not study.weak_reasons:
        return verdict
    weak = claim.check(lenient())
    if weak.verdict == UNTESTABLE:
        return verdict
    return Verdict(INCONCLUSIVE, f"only rows that are not evidence ({', '.join(study.weak_reasons)}) "
                                 f"could test it, so it is not decided; what they show: {weak.evidence}")


def scope(study: Study) -> tuple[str, str]:
    """The claim just checked on ``study``: the calibration whose day its every contrast carried (or
    ""), and the scope in words."""
    c = study.calibration
    if c is None:
        return "", "scope: this study's day only (no calibration given: claims.calibration)"
    if study.day_missing or not study.beyond_day:
        lacking = "; ".join(sorted(study.day_missing)) or "contrasts the calibration does not model"
        return "", f"scope: this study's day only for {lacking} (calibration {c.path})"
    return c.path, f"scope: beyond this study's day (every contrast carries the day variance of calibration {c.path})"


def evaluate(summary: pd.DataFrame, host_cores: int | None, gaps: list[Gap],
             margin: float = DEFAULT_MARGIN, calibration: Calibration | None = None) -> pd.DataFrame:
    study = Study(summary, host_cores, gaps, margin, calibration=calibration)
    lenient = functools.cache(lambda: Study(summary, host_cores, gaps, margin, weak_as_evidence=True,
                                            calibration=calibration))
    decided, scopes = [], []
    for claim in CLAIMS:
        study.beyond_day, study.day_missing = 0, set()
        decided.append(decide(claim, study, lenient))
        scopes.append(scope(study))
    verdicts = family(decided)
    rows = []
    for claim, verdict, (calibrated, words) in zip(CLAIMS, verdicts, scopes, strict=True):
        figures = " ".join(f.id for f in FIGURES if claim.id in f.claims)
        parts = {column: ";".join(_cell(getattr(o, column)) for o in verdict.parts) for column in PART_COLUMNS}
        rows.append({"id": claim.id, "claim": claim.text, "source": claim.source, "verdict": verdict.verdict,
                     "reading": reading(claim.text, verdict),
                     "evidence": f"{verdict.evidence}; {words}" if verdict.parts else verdict.evidence,
                     "test": claim.test.format(margin=f"{margin:.0%}", model=MODEL) + f"; {FAMILY}",
                     "figures": figures, **parts, "p_holds": verdict.p_holds, "p_fails": verdict.p_fails,
                     "calibration": calibrated})
    return pd.DataFrame(rows, columns=COLUMNS)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "" if not math.isfinite(value) else f"{value:.4g}"
    return str(value)


def write_claims(summary: Path, host: Path, plan: Path, output: Path, margin: float | None = None,
                 calibration: Path | None = None) -> pd.DataFrame:
    frame = read_summary(summary)
    cores = int(read_document(host, "host facts")["capabilities"]["cores"])
    left_out = from_documents(read_document(plan, "plan")["left_out"], f"{plan}: left_out")
    table = evaluate(frame, cores, left_out, DEFAULT_MARGIN if margin is None else margin,
                     read_calibration(calibration) if calibration else None)
    write_text_atomic(output, table.assign(**{formats.KEY: formats.version("claims")}).to_csv(index=False))
    return table
