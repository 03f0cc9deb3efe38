"""The verdict rules: the hypotheses a claim part states about its contrast, how the parts' tests
make a claim's verdict, and how the claims' verdicts are corrected as one family.

Every part of a claim is one contrast of the study's model (``dlvirt.analysis.model``), on the log
scale, usually the average over the cases (apps, levels) the part is about; the per-case contrasts
are kept as evidence, not tested one by one. Each claim has a margin, the smallest effect of
interest m (``claims.equivalence_margin``, 5 %: log(1 + m) on the log scale), or for a threshold
claim the threshold T itself. A part states one-sided t-tests at ``ALPHA``, each against a bound:

- *lower* (a is faster than b by more than the margin, δ = log a/b): yes: δ < −m; no: δ > −m (the
  other one-sided test); *negligible*: −m < δ < m (TOST), where the claim denies exactly that.
- *higher*: the mirror image (yes: δ > m; no: δ < m; negligible: TOST within ±m).
- *alike*: yes: TOST within ±m; no: the minimum-effect test beyond ±m.
- *above / below* a threshold T: yes and no are the two one-sided tests against log T.
- *gains less* (a step stops paying): yes: δ > −m; no: δ < −m.

So a true gain smaller than the margin never makes a claim of a gain ``hold``. Within a claim,
Holm's step-down correction runs over its parts on each side: the claim ``holds`` only if every
part's yes survives it (its p for holds: the largest adjusted p of yes), ``does not hold`` if some
part's no survives it (the smallest adjusted p of no), and is ``negligible`` (a kind of does not
hold) when every part refuted that way is also shown within ±m. Across the claims of one study
(``family``), Holm runs again over the claims' p for holds, for does not hold and for negligible,
so that the chance of any false verdict of a kind stays at α for the study. Else ``inconclusive``,
stating the half-width of each undecided part's 90 % interval: the smallest effect this study could
have told apart. A part whose contrast has no spread (a zero standard error) or no degrees of
freedom decides nothing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from dlvirt.analysis.model import Contrast

ClaimVerdict = Literal["holds", "does not hold", "negligible", "inconclusive", "not testable here"]
HOLDS: ClaimVerdict = "holds"
FAILS: ClaimVerdict = "does not hold"
NEGLIGIBLE: ClaimVerdict = "negligible"
INCONCLUSIVE: ClaimVerdict = "inconclusive"
UNTESTABLE: ClaimVerdict = "not testable here"
ALPHA = 0.05  # per one-sided test, and the family-wise rate across a study's claims
DEFAULT_MARGIN = 0.05  # claims.equivalence_margin


def _never(_: Contrast) -> float:
    return math.nan


@dataclass(frozen=True)
class Hypothesis:
    """What a part claims of its contrast δ, as the one-sided tests that decide it."""

    claim: str  # what yes means, e.g. "PIN faster"
    yes: str  # the test yes rests on
    no: str  # the test no rests on
    p_yes: Callable[[Contrast], float]
    p_no: Callable[[Contrast], float]
    margin: str  # the bound the claim is tested against, as the evidence and claims.csv show it
    p_negligible: Callable[[Contrast], float] = _never  # TOST within ±m, where the claim denies it


def _tost(m: float) -> Callable[[Contrast], float]:
    return lambda c: max(c.p_above(-m), c.p_below(m))


def lower(what: str, margin: float) -> Hypothesis:
    m = math.log1p(margin)
    return Hypothesis(what, f"one-sided t-test against −{margin:.0%}", f"one-sided t-test against −{margin:.0%}",
                      lambda c: c.p_below(-m), lambda c: c.p_above(-m), f"−{margin:.0%}", _tost(m))


def higher(what: str, margin: float) -> Hypothesis:
    m = math.log1p(margin)
    return Hypothesis(what, f"one-sided t-test against +{margin:.0%}", f"one-sided t-test against +{margin:.0%}",
                      lambda c: c.p_above(m), lambda c: c.p_below(m), f"+{margin:.0%}", _tost(m))


def alike(what: str, margin: float) -> Hypothesis:
    m = math.log1p(margin)
    return Hypothesis(what, f"TOST within ±{margin:.0%}", f"minimum-effect test beyond ±{margin:.0%}",
                      _tost(m), lambda c: min(c.p_below(-m), c.p_above(m)), f"±{margin:.0%}")


def above(what: str, threshold: float) -> Hypothesis:
    t = math.log(threshold)
    return Hypothesis(what, f"one-sided t-test against {threshold:g}×", f"one-sided t-test against {threshold:g}×",
                      lambda c: c.p_above(t), lambda c: c.p_below(t), f"{threshold:g}×")


def below(what: str, threshold: float) -> Hypothesis:
    t = math.log(threshold)
    return Hypothesis(what, f"one-sided t-test against {threshold:g}×", f"one-sided t-test against {threshold:g}×",
                      lambda c: c.p_below(t), lambda c: c.p_above(t), f"{threshold:g}×")


def gains_less(what: str, margin: float) -> Hypothesis:
    m = math.log1p(margin)
    return Hypothesis(what, f"one-sided t-test against −{margin:.0%}", f"one-sided t-test against −{margin:.0%}",
                      lambda c: c.p_above(-m), lambda c: c.p_below(-m), f"−{margin:.0%}")


@dataclass(frozen=True)
class Part:
    """One tested part of a claim: its contrast (the average over ``cases``) and hypothesis."""

    name: str
    contrast: Contrast
    hypothesis: Hypothesis
    cases: list[str] = field(default_factory=list)  # the per-case contrasts, as evidence
    show: Callable[[Contrast], str] = Contrast.relative


@dataclass(frozen=True)
class Outcome:
    """One part as claims.csv lists it: margin, estimate (a ratio), 90 % interval, df, launches, outcome."""

    part: str
    margin: str
    ratio: float
    ratio_low: float
    ratio_high: float
    df: float
    launches: int
    outcome: str  # yes, no, negligible, undecided


@dataclass(frozen=True)
class Verdict:
    verdict: ClaimVerdict
    evidence: str
    # the claim's p for each verdict, Holm over its parts (NaN: no such test); across claims, ``family``
    p_holds: float = math.nan
    p_fails: float = math.nan
    p_negligible: float = math.nan
    missing: bool = False  # parts it could not test
    parts: tuple[Outcome, ...] = ()


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


def _part_text(part: Part, outcome: str, p_yes: float, p_no: float, p_negligible: float, holm_note: str) -> str:
    h = part.hypothesis
    head = f"{part.name}: {part.show(part.contrast)}"
    if not part.contrast.testable:
        why = "zero spread (never certainty)" if part.contrast.se == 0 else "no interval (no replicated launches)"
        text = f"undecided: {why}"
    elif outcome == "yes":
        text = f"{h.claim}: yes ({h.yes}, p {_p(p_yes)}{holm_note})"
    elif outcome == "negligible":
        text = f"{h.claim}: no, negligible (within ±{h.margin.lstrip('+−')} by TOST, p {_p(p_negligible)}{holm_note})"
    elif outcome == "no":
        text = f"{h.claim}: no ({h.no}, p {_p(p_no)}{holm_note})"
    else:
        text = (f"{h.claim}: undecided (p {_p(p_yes)} for yes, {_p(p_no)} for no{holm_note}); the smallest "
                f"effect it could detect: ±{part.contrast.half_width():.1%}")
    n = f", n {part.contrast.launches} launches" if part.contrast.launches else ""
    cases = f" [cases: {'; '.join(part.cases[:4])}{'; …' if len(part.cases) > 4 else ''}]" if part.cases else ""
    return f"{head}{n}, margin {h.margin} → {text}{cases}"


def _word(p_holds: float, p_fails: float, p_negligible: float, missing: bool) -> ClaimVerdict:
    if p_holds < ALPHA:
        return UNTESTABLE if missing else HOLDS
    if p_fails < ALPHA:
        return NEGLIGIBLE if p_negligible < ALPHA else FAILS
    return UNTESTABLE if missing else INCONCLUSIVE


def decide(parts: list[Part], missing: Sequence[str] = (), notes: Sequence[str] = ()) -> Verdict:
    """The claim's verdict from its tested parts (Holm on each side) and the parts it could not test."""
    if not parts:
        return untestable(missing or ["nothing to test"])
    p_yes = holm([p.hypothesis.p_yes(p.contrast) for p in parts])
    p_no = holm([p.hypothesis.p_no(p.contrast) for p in parts])
    p_negligible = holm([p.hypothesis.p_negligible(p.contrast) for p in parts])
    outcomes = ["yes" if y < ALPHA else ("negligible" if g < ALPHA else "no") if n < ALPHA else "undecided"
                for y, n, g in zip(p_yes, p_no, p_negligible, strict=True)]
    holm_note = f", Holm over {len(parts)} parts" if len(parts) > 1 else ""
    texts = [_part_text(part, o, py, pn, pg, holm_note)
             for part, o, py, pn, pg in zip(parts, outcomes, p_yes, p_no, p_negligible, strict=True)]
    refuted = [g for o, g in zip(outcomes, p_negligible, strict=True) if o in ("no", "negligible")]
    rows = []
    for part, outcome in zip(parts, outcomes, strict=True):
        c = part.contrast
        low, high = c.bounds()
        rows.append(Outcome(part.name, part.hypothesis.margin, c.ratio, low, high, c.df, c.launches, outcome))
    p_holds, p_fails = max(p_yes), min(p_no)
    negligible = max(refuted) if refuted else math.nan
    evidence = "; ".join([*texts, *(f"untested: {m}" for m in missing), *notes])
    return Verdict(_word(p_holds, p_fails, negligible, bool(missing)), evidence, p_holds, p_fails, negligible,
                   bool(missing), tuple(rows))


def family(verdicts: list[Verdict]) -> list[Verdict]:
    """The claims of one study as one family: Holm across the claims' p for holds, for does not hold
    and for negligible (the tested claims only), each verdict decided again on the adjusted p."""
    # a claim is in the family when some part of it could be tested (has an interval)
    tested = [i for i, v in enumerate(verdicts) if any(math.isfinite(o.ratio_low) for o in v.parts)]
    if len(tested) < 2:
        return verdicts
    adjusted = [holm([getattr(verdicts[i], name) for i in tested]) for name in ("p_holds", "p_fails", "p_negligible")]
    out = list(verdicts)
    for k, i in enumerate(tested):
        v = verdicts[i]
        p_holds, p_fails, p_negligible = (a[k] for a in adjusted)
        word = _word(p_holds, p_fails, p_negligible, v.missing)
        note = (f"across the study's {len(tested)} tested claims (Holm): p {_p(p_holds)} for holds, "
                f"{_p(p_fails)} for does not hold")
        if word != v.verdict:
            note += f"; {v.verdict} before that correction"
        out[i] = dataclasses.replace(v, verdict=word, evidence=f"{v.evidence}; {note}", p_holds=p_holds,
                                     p_fails=p_fails, p_negligible=p_negligible)
    return out


def _estimate(o: Outcome) -> str:
    """A part's estimate and 90 % interval in its own terms: times for a threshold (3×), else ratio − 1."""
    def show(r: float) -> str:
        return f"{r:.3g}×" if o.margin.endswith("×") else f"{r - 1:+.1%}"

    interval = f" (90 % interval {show(o.ratio_low)} to {show(o.ratio_high)})" if math.isfinite(o.ratio_low) else ""
    return f"{o.part} {show(o.ratio)}{interval}"


def _resolves(o: Outcome) -> str:
    """An undecided part: its estimate and the half-width its interval leaves (the smallest effect it resolves)."""
    if not (math.isfinite(o.ratio_low) and o.ratio_low > 0):
        return f"{o.part}: no interval (too few launches)"
    return f"{_estimate(o)}: this study resolves only about ±{math.expm1(math.log(o.ratio_high / o.ratio_low) / 2):.1%}"


def reading(claim: str, verdict: Verdict) -> str:
    """The verdict in one plain sentence, for a reader who is not a statistician; the numbers beside it."""
    parts = verdict.parts
    if verdict.verdict == HOLDS:
        return f"“{claim}” holds here: " + "; ".join(f"{_estimate(o)}, beyond the {o.margin} margin"
                                                      for o in parts) + "."
    if verdict.verdict == FAILS:
        against = [o for o in parts if o.outcome in ("no", "negligible")] or list(parts)
        return (f"“{claim}” does not hold here: " + "; ".join(f"{_estimate(o)}, on the wrong side of {o.margin}"
                                                              for o in against) + ".")
    if verdict.verdict == NEGLIGIBLE:
        return (f"“{claim}” does not hold here, and the effect is too small to matter: "
                + "; ".join(f"{_estimate(o)}, within {o.margin.lstrip('+−±')} either way" for o in parts) + ".")
    if verdict.verdict == INCONCLUSIVE:
        undecided = [o for o in parts if o.outcome == "undecided"]
        if undecided:
            return "Not decided: " + "; ".join(_resolves(o) for o in undecided) + (
                ", not enough to tell it from the margin. More launches narrow it.")
        if parts:
            return ("Not decided: every part points one way (" + "; ".join(_estimate(o) for o in parts)
                    + "), but not strongly enough once the chance of a false verdict across this study's claims is "
                      "counted (Holm).")
        return "Not decided: only rows that are not evidence could test it (the evidence says which and why)."
    why = verdict.evidence.split("; ")[0]
    return f"Not testable on this host: {why}."
