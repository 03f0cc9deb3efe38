"""Proof by simulation for ``dlvirt compare``: pairs of studies with no true change (round drift,
one study's day shifted, other hardware) go through the real summary, calibrate and compare code;
the share of pairs with a false "slower" or "faster" stays within α plus Monte Carlo error
(``dlvirt.analysis.compare_simulate``; benchmarks/claim_error_rates.py --check runs more)."""

import math

import pytest

from dlvirt.analysis.compare_simulate import ROWS

STUDIES = 40


@pytest.mark.parametrize("row", ROWS, ids=[row.__name__ for row in ROWS])
def test_false_slower_or_faster_stays_within_alpha(row):
    name, what, false_verdicts, studies, alpha = row(STUDIES, 31)
    bound = alpha + 3 * math.sqrt(alpha * (1 - alpha) / studies)  # α plus three Monte Carlo SEs
    assert studies == STUDIES and false_verdicts / studies <= bound, (name, what, false_verdicts)
