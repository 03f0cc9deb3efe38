"""The verdict rules: the hypotheses a claim part states about its contrast, and how the parts'
tests make one verdict.

Every part of a claim is one contrast of the study's model (``dlvirt.analysis.model``), on the log
scale, usually the average over the cases (apps, levels) the part is about; the per-case contrasts
are kept as evidence, not tested one by one. A part states two hypotheses, each decided by a
one-sided t-test at ``ALPHA``:

- *lower* (a is faster than b, δ = log a/b): yes rests on the test against zero (δ < 0); no rests
  on the equivalence bound (δ > −m, the lower test of TOST: any gain is smaller than the margin).
- *alike*: yes rests on TOST (−m < δ < m); no on the minimum-effect test (|δ| > m, one side).
- *above / below* a threshold T: yes and no are the two one-sided tests against log T.
- *gains less* (a step stops paying): yes is δ > −m, no is δ < −m, both against the margin.

The margin m is ``log(1 + margin)`` on the log scale (5 %: ratios 1/1.05 to 1.05). Where a claim has
several parts, Holm's step-down correction controls the family-wise error over its
tested parts on both sides: the claim ``holds`` only if every part's yes survives it, ``does not
hold`` if some part's no survives it; else it is ``inconclusive``, stating the half-width of each
undecided part's 90 % interval: the smallest effect this study could have told apart. A part whose
contrast has no spread (a zero standard error) or no degrees of freedom decides nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from dlvirt.analysis.model import Contrast

ClaimVerdict = Literal["holds", "does not hold", "inconclusive", "not testable here"]
HOLDS: ClaimVerdict = "holds"
FAILS: ClaimVerdict = "does not hold"
INCONCLUSIVE: ClaimVerdict = "inconclusive"
UNTESTABLE: ClaimVerdict = "not testable here"
ALPHA = 0.05  # per one-sided test
DEFAULT_MARGIN = 0.05  # claims.equivalence_margin


@dataclass(frozen=True)
class Hypothesis:
    """What a part claims of its contrast δ, as the two one-sided tests that decide it."""

    claim: str  # what yes means, e.g. "PIN faster"
    yes: str  # the test yes rests on
    no: str  # the test no rests on
    p_yes: Callable[[Contrast], float]
    p_no: Callable[[Contrast], float]


def lower(what: str, margin: float) -> Hypothesis:
    m = math.log1p(margin)
    return Hypothesis(what, "one-sided t-test against 0", f"equivalence bound −{margin:.0%} (TOST's lower test)",
                      lambda c: c.p_below(0.0), lambda c: c.p_above(-m))


def higher(what: str, margin: float) -> Hypothesis:
    m = math.log1p(margin)
    return Hypothesis(what, "one-sided t-test against 0", f"equivalence bound +{margin:.0%} (TOST's upper test)",
                      lambda c: c.p_above(0.0), lambda c: c.p_below(m))


def alike(what: str, margin: float) -> Hypothesis:
    m = math.log1p(margin)
    return Hypothesis(what, f"TOST within ±{margin:.0%}", f"minimum-effect test beyond ±{margin:.0%}",
                      lambda c: max(c.p_above(-m), c.p_below(m)), lambda c: min(c.p_below(-m), c.p_above(m)))


def above(what: str, threshold: float) -> Hypothesis:
    t = math.log(threshold)
    return Hypothesis(what, f"one-sided t-test against {threshold:g}×", f"one-sided t-test against {threshold:g}×",
                      lambda c: c.p_above(t), lambda c: c.p_below(t))


def below(what: str, threshold: float) -> Hypothesis:
    t = math.log(threshold)
    return Hypothesis(what, f"one-sided t-test against {threshold:g}×", f"one-sided t-test against {threshold:g}×",
                      lambda c: c.p_below(t), lambda c: c.p_above(t))


def gains_less(what: str, margin: float) -> Hypothesis:
    m = math.log1p(margin)
    return Hypothesis(what, f"one-sided t-test against −{margin:.0%}", f"one-sided t-test against −{margin:.0%}",
                      lambda c: c.p_above(-m), lambda c: c.p_below(-m))


@dataclass(frozen=True)
class Part:
    """One tested part of a claim: its contrast (the average over ``cases``) and hypothesis."""

    name: str
    contrast: Contrast
    hypothesis: Hypothesis
    cases: list[str] = field(default_factory=list)  # the per-case contrasts, as evidence
    show: Callable[[Contrast], str] = Contrast.relative


@dataclass(frozen=True)
class Verdict:
    verdict: ClaimVerdict
    evidence: str


def untestable(why: Iterable[str]) -> Verdict:
    return Verdict(UNTESTABLE, "; ".join(dict.fromkeys(why)))


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN, no test, counts as 1): the k-th smallest of m times
    (m − k + 1), made monotone, at most 1. The same as statsmodels' ``multipletests(method="holm")``
    (tests/test_verdicts.py checks), which costs a garbage collection per call: too slow for the
    simulation that checks the verdicts' error rates."""
    cleaned = [1.0 if not math.isfinite(p) else p for p in pvalues]
    order = sorted(range(len(cleaned)), key=cleaned.__getitem__)
    adjusted = [1.0] * len(cleaned)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(cleaned) - rank) * cleaned[index]))
        adjusted[index] = running
    return adjusted


def _p(value: float) -> str:
    return "< 1e-12" if value < 1e-12 else f"= {value:.3g}"


def _part_text(part: Part, yes: bool, no: bool, p_yes: float, p_no: float, holm_note: str) -> str:
    h = part.hypothesis
    head = f"{part.name}: {part.show(part.contrast)}"
    if not part.contrast.testable:
        why = "zero spread (never certainty)" if part.contrast.se == 0 else "no interval (no replicated launches)"
        outcome = f"undecided: {why}"
    elif yes:
        outcome = f"{h.claim}: yes ({h.yes}, p {_p(p_yes)}{holm_note})"
        if no:
            outcome += f", though smaller than the margin ({h.no}, p {_p(p_no)})"
    elif no:
        outcome = f"{h.claim}: no ({h.no}, p {_p(p_no)}{holm_note})"
    else:
        outcome = (f"{h.claim}: undecided (p {_p(p_yes)} for yes, {_p(p_no)} for no{holm_note}); the smallest "
                   f"effect it could detect: ±{part.contrast.half_width():.1%}")
    cases = f" [cases: {'; '.join(part.cases[:4])}{'; …' if len(part.cases) > 4 else ''}]" if part.cases else ""
    return f"{head} → {outcome}{cases}"


def decide(parts: list[Part], missing: Sequence[str] = (), notes: Sequence[str] = ()) -> Verdict:
    """The claim's verdict from its tested parts (Holm on both sides) and the parts it could not test."""
    if not parts:
        return untestable(missing or ["nothing to test"])
    p_yes = holm([p.hypothesis.p_yes(p.contrast) for p in parts])
    p_no = holm([p.hypothesis.p_no(p.contrast) for p in parts])
    yes = [p < ALPHA for p in p_yes]
    no = [p < ALPHA for p in p_no]
    holm_note = f", Holm over {len(parts)} parts" if len(parts) > 1 else ""
    texts = [_part_text(part, y, n, py, pn, holm_note) for part, y, n, py, pn in zip(parts, yes, no, p_yes, p_no,
                                                                                      strict=True)]
    if all(yes):
        verdict = HOLDS if not missing else UNTESTABLE
    elif any(n and not y for y, n in zip(yes, no, strict=True)):
        verdict = FAILS
    else:
        verdict = UNTESTABLE if missing else INCONCLUSIVE
    evidence = "; ".join([*texts, *(f"untested: {m}" for m in missing), *notes])
    return Verdict(verdict, evidence)
