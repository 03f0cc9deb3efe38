"""Design sizing (Kalibera & Jones, "Rigorous Benchmarking in Reasonable Time", ISMM 2013): how many
launches and how many repetitions per launch a study needs, from the variance components and costs
the run records show (``plan --design``).

A scenario measured in ``L`` launches of ``n`` repetitions has a mean (log scale) of variance
``(σ²_b + σ²_w / n) / L``. For a fixed budget the variance is smallest at
``n* = sqrt(c_launch / c_rep · σ²_w / σ²_b)`` repetitions per launch (c_launch: start-up, boot,
model load and warm-ups; c_rep: one repetition); then launches buy precision. Comparisons are
contrasts of the launch-level model over all launches (``log(launch mean) ~ scenario + round``):
a per-case comparison (one scenario against another) has variance ``2 v / L``; a claim tested on the
average of ``k`` such cases ``2 v / (L k)`` (a ratio of ratios: twice that), with the
model's residual degrees of freedom ``S L − S − (L − 1)`` (S scenarios, rounds as blocks).
Half-widths are of the 90 % interval (two one-sided tests at 5 %), shown as relative ratios
``exp(h) − 1``. Power: at a true effect, the one-sided test against the margin that a claim of
it must pass (``dlvirt.analysis.claims.verdicts``), and the equivalence test (TOST) at a true
zero; both normal-theory approximations with the model's df (noncentral t). A claim that
an effect is absent needs the second: a half-width at the margin gives TOST no chance at a true
zero, so the design also says how many launches give it an 80 % chance.

With a calibration of this hardware (``--calibration`` or ``claims.calibration``) the claims'
contrasts carry the day too (``dlvirt.analysis.claims.study``), and so does the design: a case
adds the day variances of its two scenarios' platforms, ``d``, and the average of ``k`` cases has
variance ``2 v / (L k) + d / k`` on Satterthwaite's df, at most the day's (blocks − 1). The day
does not shrink with launches: ``(t₀.₉₅ + t₀.₈) · sqrt(d / k)`` is what no number of launches
resolves below, and the design says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dlvirt.core import variance
from dlvirt.core.calibration import POWER, Calibration, smallest_resolved
from dlvirt.core.machinetime import launch_cost_s, repetition_s
from dlvirt.core.records import JobResult
from dlvirt.core.scenario import Scenario
from dlvirt.plan.planner import kinds

ALPHA = 0.05          # per one-sided test: 90 % intervals
EFFECTS = (0.10, 0.20)  # true effects the power is shown for
MIN_REPETITIONS = 2   # below two, a launch shows no spread of its own
EQUIVALENCE_POWER = 0.8  # the chance to show "alike within the margin" that a design is sized for


@dataclass(frozen=True)
class Inputs:
    """What a design is sized from: variance components (log scale) and costs in seconds."""

    within: float     # σ²_w
    between: float    # σ²_b
    launch_s: float   # c_launch
    repetition_s: float  # c_rep
    basis: str        # where they come from


def from_records(records: list[JobResult], tool: str | None = None) -> Inputs | None:
    """The components pooled over every scenario of ``records`` (of ``tool``: claims read MLPerf),
    and the mean cost of a launch and of a counted repetition; None without two launches of one
    scenario with two repetitions."""
    records = [r for r in records if tool in (None, r.tool)]
    groups: dict[tuple[Any, ...], list[JobResult]] = {}
    for r in records:
        groups.setdefault((r.tool, r.app, r.scenario_name, r.site, r.platform.get("vmm")), []).append(r)
    parts = variance.pooled(variance.of_launches([[x.e2e_s for x in r.runs] for r in group])
                            for group in groups.values())
    reps = [repetition_s(x) for r in records for x in r.runs]
    if math.isnan(parts.between) or not reps:
        return None
    return Inputs(parts.within, parts.between, sum(launch_cost_s(r) for r in records) / len(records),
                  sum(reps) / len(reps),
                  f"{len(records)} launches of {len(groups)} scenarios (within df {parts.df_within}, "
                  f"between df {parts.df_between})")


def optimal_repetitions(inputs: Inputs) -> float:
    """Kalibera & Jones's n* (inf: launches do not differ beyond their repetitions' noise)."""
    if inputs.between <= 0:
        return math.inf
    return math.sqrt(inputs.launch_s / inputs.repetition_s * inputs.within / inputs.between)


def recommended_repetitions(inputs: Inputs, most: int) -> int:
    """n* rounded, at least two, at most ``most``."""
    best = optimal_repetitions(inputs)
    return most if math.isinf(best) else min(most, max(MIN_REPETITIONS, round(best)))


def residual_df(scenarios: int, launches: int) -> int:
    """The launch-level model's residual df: S·L launches less S scenario and L − 1 round terms."""
    return scenarios * launches - scenarios - (launches - 1)


@dataclass(frozen=True)
class Projection:
    """A contrast's expected 90 % half-width (relative) and power."""

    se: float         # log scale
    df: float
    half_width: float  # exp(t · se) − 1
    power: dict[float, float]  # per true effect, the one-sided test against the margin
    equivalence: float         # TOST at a true zero, within ±margin


@dataclass(frozen=True)
class Day:
    """A case's day variance from a calibration: its two scenarios' platforms' σ²_day summed, and
    the fewest degrees of freedom among them (none: no calibration, df inf)."""

    variance: float = 0.0
    df: float = math.inf


def project(inputs: Inputs, launches: int, repetitions: float, scenarios: int, cases: int = 1,
            margin: float = 0.05, day: Day = Day()) -> Projection:
    """A contrast of two scenario means (one against another), averaged over ``cases`` cases, each
    scenario measured in ``launches`` × ``repetitions``, with ``day`` (a calibration's) per case."""
    from scipy import stats as sps

    df = float(max(1, residual_df(scenarios, launches)))
    variance_one = (inputs.between + inputs.within / repetitions) / launches
    launch_part, day_part = 2 * variance_one / cases, day.variance / cases
    se = math.sqrt(launch_part + day_part)
    if math.isfinite(day.df):  # Satterthwaite over the two parts, at most the day's df (model.with_day)
        spread = launch_part ** 2 / df + (day_part ** 2 / day.df if day_part > 0 else 0.0)
        df = min((launch_part + day_part) ** 2 / spread if spread > 0 else df, day.df)
    t = float(sps.t.ppf(1 - ALPHA, df))
    bound = math.log1p(margin)
    power = {e: float(sps.nct.sf(t, df, (math.log1p(e) - bound) / se)) if se > 0 else 1.0 for e in EFFECTS}
    equivalence = max(0.0, 2 * float(sps.t.cdf(bound / se - t, df)) - 1) if se > 0 else 1.0
    return Projection(se, df, math.expm1(t * se), power, equivalence)


def day_floor(day: Day, cases: int = 1) -> float:
    """What no number of launches resolves below (α, power ``POWER``): the day's part alone."""
    return smallest_resolved(math.sqrt(day.variance / cases), day.df) if math.isfinite(day.df) else 0.0


def launches_needed(inputs: Inputs, repetitions: float, scenarios: int, target: float, cases: int = 1,
                    most: int = 1000, day: Day = Day()) -> int | None:
    """The fewest launches per scenario whose contrast half-width is within ``target`` (None: not within ``most``)."""
    if project(inputs, most, repetitions, scenarios, cases, day=day).half_width > target:
        return None  # the half-width only shrinks with launches
    for launches in range(2, most + 1):
        if project(inputs, launches, repetitions, scenarios, cases, day=day).half_width <= target:
            return launches
    return None


def launches_for_equivalence(inputs: Inputs, repetitions: float, scenarios: int, margin: float, cases: int = 1,
                             power: float = EQUIVALENCE_POWER, most: int = 1000, day: Day = Day()) -> int | None:
    """The fewest launches per scenario at which a contrast with no true difference is shown alike
    within ±``margin`` (TOST) with probability ``power``: what a claim of a difference needs to
    come out ``does not hold``, and a claim of none ``holds``, when there is none (None: not within
    ``most``). A claim of a gain decides ``no`` on TOST's lower test alone, so for it this is an
    upper bound."""
    if project(inputs, most, repetitions, scenarios, cases, margin, day).equivalence < power:
        return None  # the chance only grows with launches
    for launches in range(2, most + 1):
        if project(inputs, launches, repetitions, scenarios, cases, margin, day).equivalence >= power:
            return launches
    return None


# The contrasts the claims test (``dlvirt.analysis.claims``), as families of planned MLPerf scenario
# pairs: the claims each serves, and a scenario's partner with the part it counts in (None: none).
# A ratio of two such ratios (cn_overhead_chr, no_idle_cores) contrasts 4 cells: √2 × the half-width.
def _pinning(s: Scenario) -> tuple[str, Scenario] | None:
    return (s.platform, Scenario(s.platform, s.cores, "VNL", s.processor)) if s.pinning == "PIN" else None


def _against_baseline(s: Scenario) -> tuple[str, Scenario] | None:
    baseline = kinds().baseline
    return None if s.platform == baseline else (s.platform, Scenario(baseline, s.cores, s.pinning, s.processor))


def _gpu(s: Scenario) -> tuple[str, Scenario] | None:
    return (s.platform, Scenario(s.platform, s.cores, s.pinning, "CPU")) if s.processor == "GPU" else None


FAMILIES = (
    ("pinning", "PIN vs VNL", _pinning),
    ("cn_overhead_chr, no_idle_cores, cn_cheapest_chr1, mvm_like_vm", "platform vs bare metal", _against_baseline),
    ("gpu_speedup", "GPU vs CPU", _gpu),
)


def claim_parts(scenarios: Iterable[tuple[str, Scenario]]) -> list[tuple[str, str, dict[str, int]]]:
    """Per family: its claims, what it contrasts, and the cases of each part (one per platform;
    scale-up: the last step of each app × platform × pinning × processor line) among ``scenarios``,
    the planned (app, scenario) pairs of the tool the claims read."""
    planned = set(scenarios)
    out = []
    for claims, what, partner in FAMILIES:
        parts: dict[str, int] = {}
        for app, s in planned:
            found = partner(s)
            if found and (app, found[1]) in planned:
                parts[found[0]] = parts.get(found[0], 0) + 1
        out.append((claims, what, parts))
    levels: dict[tuple[str, str, str, str], int] = {}
    for app, s in planned:
        key = (app, s.platform, s.pinning, s.processor)
        levels[key] = levels.get(key, 0) + 1
    steps: dict[str, int] = {}
    for (_, platform, _, _), n in levels.items():
        if n >= 2:
            steps[platform] = steps.get(platform, 0) + 1
    out.append(("scale_up_limit", "last scale-up step", steps))
    return out


def _pct(x: float) -> str:
    return f"±{x:.1%}" if math.isfinite(x) else "±inf"


def case_day(calibration: Calibration | None, platform: str, partner: str) -> Day | None:
    """A case's ``Day`` (a ``platform`` scenario against a ``partner`` one) from ``calibration``;
    ``Day()`` without one, None where it lacks either platform (the claims keep this study's day)."""
    if calibration is None:
        return Day()
    found = [calibration.platforms.get(p.split("(")[0]) for p in (platform, partner)]
    if any(c is None for c in found):
        return None
    return Day(sum(c.day for c in found if c), min(c.day_df for c in found if c))


def _calibrated(calibration: Calibration, platforms: Iterable[str]) -> list[str]:
    words = ", ".join(f"{p} σ_day {math.expm1(math.sqrt(c.day)):.1%} (df {c.day_df:.0f})"
                      for p, c in sorted(calibration.platforms.items()))
    lacking = sorted({p.split("(")[0] for p in platforms} - set(calibration.platforms))
    return [f"calibration {calibration.path} ({'; '.join(calibration.hardware)}): day to day {words}; every claim "
            "contrast carries it (a case: both its scenarios' σ²_day), at most the day's df"
            + (f"; it lacks {', '.join(lacking)}, whose parts are sized for this study's day only" if lacking else "")]


def report(inputs: Inputs, config: dict[str, Any], scenarios: list[tuple[str, Scenario]], repetitions: float,
           target_case: float, target_claim: float, margin: float, calibration: Calibration | None = None) -> str:
    """``plan --design``: the optimum, this config's projection and the launches the targets need; with
    ``calibration``, each contrast also carries its day, and what this host can tell apart."""
    study = config["study"]
    launches = int(study.get("replicates", 1))
    setting = study["repetitions"]
    most = setting if isinstance(setting, int) else int(setting["max"])
    count = len(set(scenarios))
    best = optimal_repetitions(inputs)
    n_rec = recommended_repetitions(inputs, max(most, MIN_REPETITIONS))
    lines = [
        f"variance components (log scale; {inputs.basis}): within a launch σ_w = {math.sqrt(inputs.within):.1%}, "
        f"between launches σ_b = {math.sqrt(inputs.between):.1%}",
        f"cost: a launch {inputs.launch_s:.1f} s (start-up, boot, model load, warm-ups), a repetition "
        f"{inputs.repetition_s:.2f} s",
        f"optimal repetitions per launch n* = sqrt(c_launch / c_rep · σ²_w / σ²_b) = "
        f"{'inf' if math.isinf(best) else f'{best:.2f}'} → {n_rec} (at least {MIN_REPETITIONS})",
        f"this config: {launches} launch(es) × {repetitions:.3g} repetitions (expected) of {count} scenario(s); "
        f"model residual df {residual_df(count, launches)}",
    ]
    platforms = sorted({s.platform for _, s in scenarios})
    # the per-case lines: the noisiest day among the planned platforms the calibration has
    days = [d for d in (case_day(calibration, p, p) for p in platforms) if d is not None]
    worst = max(days, key=lambda d: d.variance, default=Day())
    if calibration is not None:
        lines += _calibrated(calibration, platforms)
    if launches < 2:
        lines.append("one launch per scenario: no interval between launches, no claim can be decided")
    else:
        case = project(inputs, launches, repetitions, count, margin=margin, day=worst)
        lines.append(f"per-case comparison: 90 % half-width {_pct(case.half_width)}; power "
                     + ", ".join(f"{p:.0%} at a true {e:.0%}" for e, p in case.power.items())
                     + f"; alike within ±{margin:.0%} at a true 0: {case.equivalence:.0%}")
        for claims, what, parts in claim_parts(scenarios):
            if not parts:
                lines.append(f"  {claims}: {what}: no planned cases")
            for part, cases in sorted(parts.items()):
                partner = kinds().baseline if what == "platform vs bare metal" else part
                day = case_day(calibration, part, partner)
                p = project(inputs, launches, repetitions, count, cases, margin, day or Day())
                resolved = "" if calibration is None else (
                    f", tells {smallest_resolved(p.se, p.df):.1%} from none (the day alone: "
                    f"{day_floor(day, cases):.1%})" if day is not None else ", this study's day only")
                lines.append(f"  {claims}: {what}, {part}: {cases} case(s): half-width {_pct(p.half_width)}, "
                             + ", ".join(f"power {v:.0%} at {e:.0%}" for e, v in p.power.items())
                             + f", alike within ±{margin:.0%} at 0: {p.equivalence:.0%}{resolved}")
        if calibration is not None:
            lines.append(f"what this host tells apart from no difference with this config (α = {ALPHA}, power "
                         f"{POWER:.0%}, one-sided): {smallest_resolved(case.se, case.df):.1%} per case; no number of "
                         f"launches below {day_floor(worst):.1%} per case (the day's variance does not shrink with "
                         "launches)")
    fewest = min((c for _, _, parts in claim_parts(scenarios) for c in parts.values()), default=1)
    need_case = launches_needed(inputs, n_rec, count, target_case, day=worst)
    need_claim = launches_needed(inputs, n_rec, count, target_claim, cases=fewest, day=worst)
    need_alike = launches_for_equivalence(inputs, n_rec, count, margin, cases=fewest, day=worst)
    lines.append(f"launches per scenario at n = {n_rec}: {need_case or '> 1000'} for a per-case half-width "
                 f"≤ {target_case:.0%}, {need_claim or '> 1000'} for the smallest claim part ({fewest} case(s)) "
                 f"≤ {target_claim:.0%}, {need_alike or '> 1000'} for it to show alike within ±{margin:.0%} in "
                 f"{EQUIVALENCE_POWER:.0%} of studies when there is no difference")
    if launches >= 2 and (need_alike is None or launches < need_alike):
        chance = project(inputs, launches, repetitions, count, fewest, margin, worst).equivalence
        lines.append(f"with this config's {launches} launch(es) a claim part of {fewest} case(s) whose true effect "
                     f"is 0 comes out alike within ±{margin:.0%} (a claim of a difference: `does not hold`; "
                     f"of none: `holds`) in {chance:.0%} of studies, else inconclusive")
    return "\n".join(lines)
