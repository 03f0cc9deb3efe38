"""Proof by simulation: studies generated from known variance components go through the real
summary, model and claim code. The error-rate rows (``claim_rows``: noisier guests, a gain smaller
than the margin, every claim on its bound, power) stay within their bound, on fewer studies than the
benchmark's and a looser bound (three Monte Carlo SEs); the pinning claim keeps its error rates at
the noisy components; and ``plan --design``'s projected chance that a claim part with no true
difference comes out alike within the margin matches the share of simulated studies in which it does."""

import math

import pytest
import yaml

from conftest import FIXTURES, REPO
from dlvirt.analysis.claims.simulate import DEFAULT, Design, claim_rows, projected_alike, rates
from dlvirt.analysis.claims.verdicts import ALPHA, DEFAULT_MARGIN, FAILS, HOLDS, NEGLIGIBLE
from dlvirt.core.records import JobResult

TEMPLATE = JobResult.read(FIXTURES / "runs" / "mlperf-ic-BM-1-VNL-CPU.json")
DESIGN = Design(launches=3, repetitions=2)
STUDIES = 120
BOUND = ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / STUDIES)  # α plus three Monte Carlo SEs


@pytest.mark.parametrize("index", range(len(claim_rows(TEMPLATE))))
def test_every_error_rate_row_stays_within_its_bound(index):
    row = claim_rows(TEMPLATE)[index](60, 31 + index)
    assert row.rate <= row.alpha + 3 * row.se, (row.name, row.false_verdicts)


def test_the_default_design_is_config_yaml():
    study = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["study"]
    assert (DEFAULT.launches, DEFAULT.repetitions) == (study["replicates"], study["repetitions"])
    assert set(DEFAULT.apps) == set(study["apps"])


@pytest.mark.parametrize("wrong", [(HOLDS,), (FAILS, NEGLIGIBLE)])
def test_false_verdicts_stay_within_alpha(wrong):
    # a gain exactly the margin: holds needs more than it, and refuting it is wrong too
    found = rates(TEMPLATE, DESIGN, -math.log1p(DEFAULT_MARGIN), STUDIES, seed=21)
    assert sum(found.share(w) for w in wrong) <= BOUND, found.verdicts


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
