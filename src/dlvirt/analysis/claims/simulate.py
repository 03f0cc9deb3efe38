"""Studies simulated from known variance components, fed through the real summary → model → claims
code, to measure the verdicts' error rates and power.

A simulated study is a matrix of scenarios (platform / cores / pinning, CPU) × apps, each scenario
``launches`` launches of ``repetitions`` repetitions, in interleaved rounds. A repetition's time is

    base · exp(truth(app, scenario)) · exp(round drift) · exp(between-launch) · exp(within-launch)

with normal log-scale terms of SDs ``drift``, ``between`` and ``within`` (a guest's, VM, VMCN and
MVM, ``guest_factor`` times larger); a guest's launch also records a boot time (8 s, or
``exp(boot(app, scenario))`` times that, 5 % between launches). The launches become run records
(a recorded one's structure, its timings replaced), the summary is built by
``dlvirt.analysis.aggregate.summarise_launches`` and the claims decided by
``dlvirt.analysis.claims``.

The error-rate rows (``claim_rows``): each simulates ``studies`` studies whose truth makes one
verdict false, at the least favourable point (the true effect on the claim's bound, where a
correct test says yes falsely in α of studies), and counts the false verdicts. ``ErrorRow`` is
what every row gives (rows of other modules, e.g. ``compare``'s, have the same shape).

The ``day-shift (claims)`` row adds days: each simulated day (a study, or an A/A block of a
calibration) shifts the whole host and, less, each scenario on its own; the truth is on the bound
averaged over days, so a claim about the host (not this day) errs if the day's own offsets decide it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dlvirt.analysis.aggregate import summarise_launches
from dlvirt.analysis.calibrate import calibration_of
from dlvirt.analysis.catalog import E2E_TOOL
from dlvirt.analysis.claims import HOLDS, evaluate
from dlvirt.analysis.claims.mvm import mvm_like_vm_but_nlp_and_boots_faster
from dlvirt.analysis.claims.pinning import pinning_lowers_e2e
from dlvirt.analysis.claims.study import Study
from dlvirt.analysis.claims.verdicts import ALPHA, DEFAULT_MARGIN
from dlvirt.analysis.compare import results
from dlvirt.core.calibration import Calibration
from dlvirt.core.records import JobResult
from dlvirt.core.scenario import Scenario
from dlvirt.plan.design import Inputs, project

WITHIN, BETWEEN, DRIFT = 0.07, 0.086, 0.03  # log-scale SDs: within a launch, between launches, per round
# the default study's own components on its 2-core Intel guests (docs/statistics.md: σ_w 1.7 %, σ_b 3.2 %)
QUIET_WITHIN, QUIET_BETWEEN = 0.017, 0.032
GUESTS = ("VM", "VMCN", "MVM")
BOOT_S, BOOT_SD = 8.0, 0.05
# the machine every simulated launch records (a calibration is of a kind of hardware)
NODE = {"hostname": "sim", "cpu_model": "Simulated CPU", "logical_cpus_online": 2, "sockets": 1, "arch": "x86_64"}
MARGIN = math.log1p(DEFAULT_MARGIN)  # the default margin on the log scale
POWER_TARGET = 0.8

Truth = Callable[[str, Scenario], float]  # (app, scenario) → the true log offset of its times


@dataclass(frozen=True)
class Design:
    launches: int  # per scenario, one per round
    repetitions: int  # counted per launch
    platforms: tuple[str, ...] = ("BM", "CN")
    apps: tuple[str, ...] = ("ic", "nlp")
    cores: tuple[int, ...] = (1,)
    within: float = WITHIN
    between: float = BETWEEN
    drift: float = DRIFT
    guest_factor: float = 1.0  # a guest's SDs within and between launches, times this

    @property
    def scenarios(self) -> int:
        return len(self.platforms) * len(self.apps) * len(self.cores) * 2

    @property
    def cases(self) -> int:
        """The PIN/VNL pairs of one platform's claim part."""
        return len(self.apps) * len(self.cores)

    def pinning_matrix(self) -> list[Scenario]:
        return [Scenario(p, c, pin, "CPU") for p in self.platforms for c in self.cores for pin in ("VNL", "PIN")]


def _launch(template: JobResult, scenario: Scenario, app: str, replicate: int, times: np.ndarray,
            boot: float | None) -> JobResult:
    first = template.runs[0]
    runs = [dataclasses.replace(first, e2e_s=float(t), repetition=i, loadgen={"validity": "VALID"},
                                phases={"pre_s": 0.0, "infer_s": float(t), "post_s": 0.0})
            for i, t in enumerate(times)]
    platform = {"accel": "none"} if boot is None else {"accel": "kvm", "boot_s": boot}
    return dataclasses.replace(template, tool=E2E_TOOL, app=app, scenario=scenario, scenario_name=scenario.name,
                               runs=runs, replicate=replicate, platform=platform,
                               model={**template.model, "mlperf_reference_size": True}, code=None, runner_code=None,
                               node=NODE)


def simulate(template: JobResult, design: Design, scenarios: Sequence[Scenario], truth: Truth,
             rng: np.random.Generator, boot: Truth | None = None) -> pd.DataFrame:
    """One simulated study's summary (rows as ``summarise_launches`` writes them) of ``scenarios``
    × ``design.apps``."""
    drift = rng.normal(0.0, design.drift, design.launches)
    rows = []
    for scenario in scenarios:
        factor = design.guest_factor if scenario.platform in GUESTS else 1.0
        for app in design.apps:
            base = math.log(10.0) + truth(app, scenario)
            launches = []
            for r in range(design.launches):
                level = base + drift[r] + rng.normal(0.0, design.between * factor)
                times = np.exp(level + rng.normal(0.0, design.within * factor, design.repetitions))
                booted = None
                if scenario.platform in GUESTS:
                    offset = boot(app, scenario) if boot is not None else 0.0
                    booted = BOOT_S * math.exp(offset + rng.normal(0.0, BOOT_SD))
                launches.append(_launch(template, scenario, app, r + 1, times, booted))
            rows.append(summarise_launches(launches))
    return pd.DataFrame(rows)


def study(template: JobResult, design: Design, effect: float, rng: np.random.Generator) -> pd.DataFrame:
    """The pinning claim's matrix with the true PIN/VNL log ratio ``effect`` on every platform."""
    return simulate(template, design, design.pinning_matrix(),
                    lambda _, s: effect if s.pinning == "PIN" else 0.0, rng)


@dataclass(frozen=True)
class Rates:
    effect: float
    studies: int
    verdicts: Counter[str]
    half_widths: list[float]  # the claim part's 90 % half-width per study (BM's part)
    alike: int  # studies whose BM part is alike within ±margin (TOST at ALPHA each side, no Holm)

    def share(self, verdict: str) -> float:
        return self.verdicts[verdict] / self.studies

    def alike_share(self) -> float:
        return self.alike / self.studies

    def median_half_width(self) -> float:
        return float(np.median(self.half_widths)) if self.half_widths else math.nan


def rates(template: JobResult, design: Design, effect: float, studies: int, seed: int,
          margin: float = DEFAULT_MARGIN) -> Rates:
    """The pinning claim's verdicts over ``studies`` simulated studies with the true PIN/VNL log
    ratio ``effect`` (host cores above the design's, so every level counts)."""
    rng = np.random.default_rng(seed)
    verdicts: Counter[str] = Counter()
    widths = []
    alike = 0
    bound = math.log1p(margin)
    for _ in range(studies):
        s = Study(study(template, design, effect, rng), max(design.cores) + 1, [], margin)
        verdicts[pinning_lowers_e2e(s).verdict] += 1
        bm = s.e2e[s.e2e["platform"] == design.platforms[0]]
        pairs = [(bm.index[(bm["pinning"] == "PIN") & (bm["app"] == a) & (bm["cores"] == c)][0],
                  bm.index[(bm["pinning"] == "VNL") & (bm["app"] == a) & (bm["cores"] == c)][0])
                 for a in design.apps for c in design.cores]
        part = s.average(pairs)
        widths.append(part.half_width())
        alike += part.p_above(-bound) < ALPHA and part.p_below(bound) < ALPHA
    return Rates(effect, studies, verdicts, widths, alike)


def projected_alike(design: Design, margin: float = DEFAULT_MARGIN) -> float:
    """What ``plan --design`` projects for ``rates(...).alike_share()`` at no gain: the chance that a
    claim part of ``design.cases`` pairs comes out alike within ±``margin``, from the same components."""
    components = Inputs(design.within ** 2, design.between ** 2, 1.0, 1.0, "the simulation's components")
    return project(components, design.launches, design.repetitions, design.scenarios, design.cases,
                   margin).equivalence


# -- the error-rate rows ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ErrorRow:
    """One row of the error-rate table: ``false_verdicts`` of ``studies`` simulated studies were wrong
    (for a power row: missed), against the rate ``alpha`` the verdict promises."""

    name: str
    what: str  # what is simulated and which verdict counts as false
    false_verdicts: int
    studies: int
    alpha: float

    @property
    def rate(self) -> float:
        return self.false_verdicts / self.studies

    @property
    def se(self) -> float:
        """The Monte Carlo SE of a rate equal to ``alpha``: what the check allows beyond it."""
        return math.sqrt(self.alpha * (1 - self.alpha) / self.studies)

    @property
    def passed(self) -> bool:
        return self.rate <= self.alpha + 2 * self.se


Row = Callable[[int, int], ErrorRow]  # (studies, seed) → its row

# the default study's design (config/config.yaml: 5 launches × 2 repetitions, 5 apps) on a 2-core host
DEFAULT = Design(launches=5, repetitions=2, apps=("ic", "sr", "nlp", "rs", "llm"), within=QUIET_WITHIN,
                 between=QUIET_BETWEEN)
# guests 4.5× noisier than BM and CN (2 % within and between launches: 9 %)
HETERO = dataclasses.replace(DEFAULT, platforms=("BM", "CN", "VM"), apps=("ic", "nlp"), within=0.02, between=0.02,
                             guest_factor=4.5)
HETERO_WHAT = "guests 4.5× noisier than BM/CN (9 % vs 2 % within and between launches)"


def _pinning_hetero(app: str, s: Scenario) -> float:
    """BM and CN: pinning gains 20 % (decided, so Holm leaves the VM part at α); VM: exactly the margin."""
    if s.pinning != "PIN":
        return 0.0
    return -MARGIN if s.platform == "VM" else math.log(0.8)


def hetero_pinning(template: JobResult, studies: int, seed: int) -> ErrorRow:
    rng = np.random.default_rng(seed)
    wrong = 0
    for _ in range(studies):
        s = Study(simulate(template, HETERO, HETERO.pinning_matrix(), _pinning_hetero, rng), 2, [])
        wrong += any(o.outcome == "yes" for o in pinning_lowers_e2e(s).parts if o.part.startswith("VM "))
    return ErrorRow("hetero (pinning, VM)", f"{HETERO_WHAT}; VM's PIN gains exactly the 5 % margin: its part says "
                    "yes", wrong, studies, ALPHA)


# MVM like VM, per app averaged over its core levels: 8 levels (as the paper's matrix has), so that
# a part is precise enough for TOST to say alike at all (a test that never can, errs never)
HETERO_MVM = dataclasses.replace(HETERO, apps=("ic",), cores=(1, 2, 4, 8, 12, 16, 24, 32))


def _mvm_hetero(app: str, s: Scenario) -> float:
    return MARGIN if s.platform == "MVM" else 0.0  # MVM exactly the margin slower than VM: alike is false


def _mvm_boot(app: str, s: Scenario) -> float:
    return math.log(0.7) if s.platform == "MVM" else 0.0  # MVM boots 30 % faster (decided: Holm leaves IC at α)


def hetero_alike(template: JobResult, studies: int, seed: int) -> ErrorRow:
    rng = np.random.default_rng(seed)
    scenarios = [Scenario(p, c, "VNL", "CPU") for p in ("BM", "CN", "VM", "MVM") for c in HETERO_MVM.cores]
    wrong = 0
    for _ in range(studies):
        s = Study(simulate(template, HETERO_MVM, scenarios, _mvm_hetero, rng, _mvm_boot), 2, [])
        wrong += any(o.outcome == "yes" and o.part.startswith("IC ")
                     for o in mvm_like_vm_but_nlp_and_boots_faster(s).parts)
    return ErrorRow("hetero (MVM like VM)", f"{HETERO_WHAT}; IC on 8 core levels (BM, CN, VM, MVM vanilla), MVM "
                    "exactly the 5 % margin slower than VM: its alike part says yes", wrong, studies, ALPHA)


# the default study as measured (config/config.yaml on a 2-core host without KVM): BM and CN at 1/VNL, 1/PIN, 2/VNL
BM_CN_MATRIX = [Scenario(p, 1, pin, "CPU") for p in ("BM", "CN") for pin in ("VNL", "PIN")] + \
    [Scenario(p, 2, "VNL", "CPU") for p in ("BM", "CN")]


def _pinning_verdict(template: JobResult, effect: float, rng: np.random.Generator) -> str:
    """The pinning claim's verdict in a default study (every claim it tests one family) whose only
    true effect is PIN's ``effect`` (log ratio) on BM and CN."""
    summary = simulate(template, DEFAULT, BM_CN_MATRIX, lambda _, s: effect if s.pinning == "PIN" else 0.0, rng)
    return str(evaluate(summary, 2, []).set_index("id").loc["pinning", "verdict"])


def trivial_effect(template: JobResult, studies: int, seed: int) -> ErrorRow:
    rng = np.random.default_rng(seed)
    wrong = sum(_pinning_verdict(template, math.log(0.98), rng) == HOLDS for _ in range(studies))
    return ErrorRow("trivial-effect", "the default study (BM, CN; 5 apps) at 1.7 % / 3.2 %; PIN a true 2 % faster, "
                    "margin 5 %: pinning holds", wrong, studies, ALPHA)


def _bound_truth(app: str, s: Scenario) -> float:
    """Every claim the default study tests exactly on its bound (none true, each as near as it gets):
    pinning gains 5 % on every platform; CN's overhead over BM 5 % larger at 1 core than at 2; the
    guests' overhead 10 % larger at 2 cores than at 1 (with CN's −5 %: +5 % on average); at 2 cores
    CN 5 % cheaper than VM, VMCN and MVM; MVM 5 % slower than VM averaged over the cores."""
    overhead = {("CN", 1): MARGIN, ("CN", 2): 0.0, ("VM", 1): -MARGIN, ("VM", 2): MARGIN,
                ("VMCN", 1): -MARGIN, ("VMCN", 2): MARGIN, ("MVM", 1): MARGIN, ("MVM", 2): MARGIN}
    return overhead.get((s.platform, s.cores), 0.0) + (-MARGIN if s.pinning == "PIN" else 0.0)


def _bound_boot(app: str, s: Scenario) -> float:
    return -MARGIN if s.platform == "MVM" else 0.0  # MVM boots exactly 5 % faster


GLOBAL = dataclasses.replace(DEFAULT, apps=("ic", "nlp"))
# config/config.yaml's matrix on a 2-core host with KVM: 1/VNL, 1/PIN and 2/VNL; MVM vanilla only
DEFAULT_MATRIX = [Scenario(p, 1, pin, "CPU") for p in ("BM", "CN", "VM", "VMCN") for pin in ("VNL", "PIN")] + \
    [Scenario(p, 2, "VNL", "CPU") for p in ("BM", "CN", "VM", "VMCN", "MVM")] + [Scenario("MVM", 1, "VNL", "CPU")]


def global_null(template: JobResult, studies: int, seed: int) -> ErrorRow:
    rng = np.random.default_rng(seed)
    wrong = 0
    for _ in range(studies):
        table = evaluate(simulate(template, GLOBAL, DEFAULT_MATRIX, _bound_truth, rng, _bound_boot), 2, [])
        wrong += bool((table["verdict"] == HOLDS).any())
    return ErrorRow("global-null", "the default matrix on a 2-core host with KVM (BM, CN, VM, VMCN, MVM; IC, NLP) "
                    "at 1.7 % / 3.2 %; every claim exactly on its bound: any claim holds", wrong, studies, ALPHA)


def power(template: JobResult, studies: int, seed: int) -> ErrorRow:
    rng = np.random.default_rng(seed)
    missed = sum(_pinning_verdict(template, math.log(0.9), rng) != HOLDS for _ in range(studies))
    return ErrorRow("power", "the default study (BM, CN; 5 apps) at 1.7 % / 3.2 %; PIN a true 10 % faster: pinning "
                    "does not hold (a miss; the bound is 1 − 0.8 power)", missed, studies, 1 - POWER_TARGET)


# a host whose day shifts every time by 5.5 % (SD, as compare's rows) and each scenario by 3 % more on its own
DAY_HOST, DAY_SCENARIO = math.log(1.055), 0.03
DAY_BLOCKS = 3  # A/A blocks of the calibration
DAYS = dataclasses.replace(DEFAULT, apps=("ic", "nlp"))


def _pinning_cn(app: str, s: Scenario) -> float:
    """BM: pinning gains 20 % (decided, so Holm leaves the CN part at α); CN: exactly the margin."""
    if s.pinning != "PIN":
        return 0.0
    return -MARGIN if s.platform == "CN" else math.log(0.8)


def _day(rng: np.random.Generator, truth: Truth) -> Truth:
    """``truth`` on one day: the host's shift and each (app, scenario)'s own, drawn once."""
    host = rng.normal(0.0, DAY_HOST)
    own: dict[tuple[str, Scenario], float] = {}
    return lambda app, s: truth(app, s) + host + own.setdefault((app, s), rng.normal(0.0, DAY_SCENARIO))


def day_calibration(template: JobResult, rng: np.random.Generator) -> Calibration:
    """A calibration from ``DAY_BLOCKS`` simulated A/A blocks of ``DAYS``' pinning matrix, a day each."""
    matrix = DAYS.pinning_matrix()
    return calibration_of([results(Path(f"block-{i}"), simulate(template, DAYS, matrix, _day(rng, _pinning_cn), rng),
                                   {}, []) for i in range(DAY_BLOCKS)])


def day_shift(template: JobResult, studies: int, seed: int) -> ErrorRow:
    rng = np.random.default_rng(seed)
    wrong = uncalibrated = 0
    for _ in range(studies):
        calibration = day_calibration(template, rng)
        summary = simulate(template, DAYS, DAYS.pinning_matrix(), _day(rng, _pinning_cn), rng)
        for given in (calibration, None):
            said = any(o.outcome == "yes" and o.part.startswith("CN ")
                       for o in pinning_lowers_e2e(Study(summary, 2, [], calibration=given)).parts)
            wrong += said and given is not None
            uncalibrated += said and given is None
    return ErrorRow("day-shift (claims, calibrated)", "the default study's pinning matrix (BM, CN; IC, NLP) at "
                    f"1.7 % / 3.2 %, each day the host shifts {math.expm1(DAY_HOST):.1%} (SD) and each scenario "
                    f"{DAY_SCENARIO:.0%} more; CN's PIN gains exactly the 5 % margin over days; calibrated from "
                    f"{DAY_BLOCKS} A/A blocks: CN's part says yes (without the calibration: "
                    f"{uncalibrated / studies:.1%})", wrong, studies, ALPHA)


def claim_rows(template: JobResult) -> list[Row]:
    """The claims' rows, each ``(studies, seed) → ErrorRow`` (``template``: a run record's structure)."""
    return [functools.partial(row, template) for row in (hetero_pinning, hetero_alike, trivial_effect, global_null,
                                                          power, day_shift)]


def markdown(rows: Sequence[ErrorRow]) -> str:
    """The rows as one Markdown table."""
    lines = ["| row | simulated (false verdict) | false-verdict rate | Monte Carlo SE | α | ≤ α + 2 SE |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r.name} | {r.what} | {r.rate:.1%} ({r.false_verdicts}/{r.studies}) | {r.se:.1%} | {r.alpha:.0%} "
              f"| {'pass' if r.passed else 'FAIL'} |" for r in rows]
    return "\n".join(lines)
