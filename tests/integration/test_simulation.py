"""Proof by simulation: studies generated from known variance components (within a launch 7 %,
between launches 8.6 %, round drift 3 %) go through the real summary, model and claim code; the
pinning claim's false "holds" and false "does not hold" rates stay within α plus Monte Carlo error,
and ``plan --design``'s projected chance that a claim part with no true difference comes out alike
within the margin matches the share of simulated studies in which it does."""

import math

import pytest

from conftest import FIXTURES
from dlvirt.analysis.claims.simulate import Design, projected_alike, rates
from dlvirt.analysis.claims.verdicts import ALPHA, DEFAULT_MARGIN, FAILS, HOLDS
from dlvirt.core.records import JobResult

TEMPLATE = JobResult.read(FIXTURES / "runs" / "mlperf-ic-BM-1-VNL-CPU.json")
DESIGN = Design(launches=3, repetitions=2)
STUDIES = 120
BOUND = ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / STUDIES)  # α plus three Monte Carlo SEs


@pytest.mark.parametrize(("effect", "wrong"), [
    (0.0, HOLDS),                                # no gain: "PIN is faster" is false
    (-math.log1p(DEFAULT_MARGIN), FAILS),        # a gain as large as the margin: refuting it is wrong
])
def test_false_verdicts_stay_within_alpha(effect, wrong):
    found = rates(TEMPLATE, DESIGN, effect, STUDIES, seed=21)
    assert found.share(wrong) <= BOUND, found.verdicts


def test_a_large_true_gain_is_found_and_never_refuted():
    found = rates(TEMPLATE, Design(launches=4, repetitions=2), math.log(0.8), 40, seed=22)
    assert found.share(FAILS) == 0 and found.share(HOLDS) >= 0.5, found.verdicts


def test_the_designs_equivalence_power_matches_simulation():
    # 20 launches: the projection is mid-range (~41 %), where a wrong approximation would show
    design = Design(launches=20, repetitions=2)
    projected = projected_alike(design)
    found = rates(TEMPLATE, design, 0.0, STUDIES, seed=23)
    assert abs(found.alike_share() - projected) <= 3 * math.sqrt(projected * (1 - projected) / STUDIES), \
        (found.alike_share(), projected)
