"""Studies simulated from known variance components, fed through the real summary → model → claims
code, to measure what the verdicts' error rates and power are for a design.

A simulated study is the pinning claim's own matrix on one host: ``platforms`` × ``apps`` ×
``cores`` × {VNL, PIN}, each scenario ``launches`` launches of ``repetitions`` repetitions, in
interleaved rounds. A repetition's time is

    base · exp(effect if PIN) · exp(round drift) · exp(between-launch) · exp(within-launch)

with normal log-scale terms of SDs ``drift``, ``between`` and ``within`` (the measured components in
docs/statistics.md "Error rates, proven by simulation": within a launch ~7 %, between launches
~8.6 %). The launches become run records (a
recorded one's structure, its timings replaced), the summary is built by
``dlvirt.analysis.aggregate.summarise_launches`` and the claim decided by
``dlvirt.analysis.claims``. With effect 0 the claim "PIN is faster" is false, so ``holds`` is a
false positive; at effect −margin (a true gain as large as the margin) ``does not hold`` is a false
negative; at larger gains ``holds`` is the power. At effect 0 the share of studies whose first
platform's claim part comes out alike within ±margin (TOST, as ``plan --design`` projects it) checks
that projection.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dlvirt.analysis.aggregate import summarise_launches
from dlvirt.analysis.catalog import E2E_TOOL
from dlvirt.analysis.claims.pinning import pinning_lowers_e2e
from dlvirt.analysis.claims.study import Study
from dlvirt.analysis.claims.verdicts import ALPHA, DEFAULT_MARGIN
from dlvirt.core.records import JobResult
from dlvirt.core.scenario import Scenario
from dlvirt.plan.design import Inputs, project

WITHIN, BETWEEN, DRIFT = 0.07, 0.086, 0.03  # log-scale SDs: within a launch, between launches, per round


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

    @property
    def scenarios(self) -> int:
        return len(self.platforms) * len(self.apps) * len(self.cores) * 2

    @property
    def cases(self) -> int:
        """The PIN/VNL pairs of one platform's claim part."""
        return len(self.apps) * len(self.cores)


def _launch(template: JobResult, scenario: Scenario, app: str, replicate: int, times: np.ndarray) -> JobResult:
    first = template.runs[0]
    runs = [dataclasses.replace(first, e2e_s=float(t), repetition=i, loadgen={"validity": "VALID"},
                                phases={"pre_s": 0.0, "infer_s": float(t), "post_s": 0.0})
            for i, t in enumerate(times)]
    return dataclasses.replace(template, tool=E2E_TOOL, app=app, scenario=scenario, scenario_name=scenario.name,
                               runs=runs, replicate=replicate, platform={"accel": "none"},
                               model={**template.model, "mlperf_reference_size": True}, code=None, runner_code=None)


def study(template: JobResult, design: Design, effect: float, rng: np.random.Generator) -> pd.DataFrame:
    """One simulated study's summary (rows as ``summarise_launches`` writes them)."""
    drift = rng.normal(0.0, design.drift, design.launches)
    rows = []
    for platform in design.platforms:
        for app in design.apps:
            for cores in design.cores:
                for pinning in ("VNL", "PIN"):
                    scenario = Scenario(platform, cores, pinning, "CPU")
                    base = math.log(10.0) + (effect if pinning == "PIN" else 0.0)
                    launches = []
                    for r in range(design.launches):
                        level = base + drift[r] + rng.normal(0.0, design.between)
                        times = np.exp(level + rng.normal(0.0, design.within, design.repetitions))
                        launches.append(_launch(template, scenario, app, r + 1, times))
                    rows.append(summarise_launches(launches))
    return pd.DataFrame(rows)


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


def per_case_half_width(template: JobResult, design: Design, studies: int, seed: int) -> float:
    """The median 90 % half-width of one PIN/VNL comparison (one app and core count)."""
    rng = np.random.default_rng(seed)
    widths = []
    for _ in range(studies):
        s = Study(study(template, design, 0.0, rng), max(design.cores) + 1, [])
        pin = s.e2e.index[s.e2e["pinning"] == "PIN"][0]
        twin = s.e2e[(s.e2e["pinning"] == "VNL") & (s.e2e["platform"] == s.e2e.loc[pin, "platform"])
                     & (s.e2e["app"] == s.e2e.loc[pin, "app"]) & (s.e2e["cores"] == s.e2e.loc[pin, "cores"])]
        widths.append(s.difference(pin, twin.index[0]).half_width())
    return float(np.median(widths))


