"""The launch-level model and the verdict rules' tests, checked against statsmodels' and scipy's own."""

import math
from collections.abc import Hashable

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import ttost_ind

from dlvirt.analysis.claims.verdicts import alike, holm, lower
from dlvirt.analysis.model import Contrast, Model, combine, launches, model_columns

RNG = np.random.default_rng(7)


def study(cells=4, rounds=3, drift=0.05):
    """Launch means of ``cells`` rows over ``rounds`` rounds, each round shifting all launches."""
    rows = []
    for cell in range(cells):
        means = [10.0 * (1 + 0.1 * cell) * math.exp(drift * r + RNG.normal(0, 0.03)) for r in range(rounds)]
        rows.append({"round_means_s": ";".join(f"{m:.9g}" for m in means),
                     "launch_rounds": ";".join(str(r + 1) for r in range(rounds))})
    return pd.DataFrame(rows)


def test_contrasts_are_what_statsmodels_t_test_gives():
    data = launches(study())
    model = Model(data)
    assert model.df == 12 - 4 - 2
    weights: dict[Hashable, float] = {0: 0.5, 1: 0.5, 2: -1.0}
    vector = np.zeros(model.x.shape[1])
    vector[[0, 1, 2]] = [0.5, 0.5, -1.0]
    test = model.fit.t_test(vector[None, :])
    c = model.contrast(weights)
    assert c.log == pytest.approx(float(np.squeeze(test.effect)))
    assert c.se == pytest.approx(float(np.squeeze(test.sd)))
    assert c.df == model.fit.df_resid
    assert c.p_below(0.0) == pytest.approx(float(sps.t.cdf(float(np.squeeze(test.tvalue)), c.df)))


def test_a_cell_is_its_log_mean_averaged_over_rounds_and_round_drift_cancels():
    frame = study(cells=2, rounds=4, drift=0.2)   # a strong drift, the same for every row
    model = Model(launches(frame))
    logs = [np.log([float(v) for v in frame.loc[i, "round_means_s"].split(";")]) for i in (0, 1)]
    assert model.cell(0).log == pytest.approx(logs[0].mean())
    # the drift is a block: the contrast's error comes from what the rounds do not explain
    plain = sm.OLS(np.concatenate(logs), np.repeat(np.eye(2), 4, axis=0)).fit()
    assert model.contrast({0: 1, 1: -1}).se < math.sqrt(plain.cov_params()[0, 0] + plain.cov_params()[1, 1])


def hetero(noisy=0.09, quiet=0.02, cells=3, rounds=8, seed=3):
    """Launch means of a quiet and a noisy platform, ``cells`` rows each, ``rounds`` rounds."""
    rng = np.random.default_rng(seed)
    rows = []
    for platform, sd in (("BM", quiet), ("VM", noisy)):
        for cell in range(cells):
            means = np.exp(math.log(10.0 + cell) + 0.03 * np.arange(rounds) + rng.normal(0, sd, rounds))
            rows.append({"platform": platform, "round_means_s": ";".join(f"{m:.9g}" for m in means),
                         "launch_rounds": ";".join(str(r + 1) for r in range(rounds))})
    return pd.DataFrame(rows)


def test_a_noisier_platform_gets_its_own_variance_and_satterthwaite_df():
    data = launches(hetero())
    model = Model(data)
    assert model.split and model.homogeneity_p < 0.2
    assert set(model.variances) == {"BM", "VM"}
    assert sum(v.df for v in model.variances.values()) == pytest.approx(model.df)
    assert model.variances["VM"].sd > 2 * model.variances["BM"].sd
    # the fit is statsmodels' WLS with the groups' estimated variances as weights
    weights = 1.0 / data["variance"].map({k: v.variance for k, v in model.variances.items()}).to_numpy()
    wls = sm.WLS(data["y"].to_numpy(), model.x, weights=weights).fit()
    bm, vm = model.contrast({0: 1, 1: -1}), model.contrast({3: 1, 4: -1})
    vector = np.zeros(model.x.shape[1])
    vector[[0, 1]] = [1, -1]
    assert bm.se ** 2 == pytest.approx(float(vector @ wls.cov_params(scale=1.0) @ vector))
    assert bm.log == pytest.approx(float(vector @ wls.params))
    # a contrast within one group has (about) that group's df; the noisy one is wider
    assert bm.df == pytest.approx(model.variances["BM"].df, rel=0.05) and vm.se > 3 * bm.se
    assert bm.launches == 16
    # a contrast across groups: Satterthwaite's df, between the groups' df and their sum
    across = model.contrast({0: 1, 3: -1})
    assert min(v.df for v in model.variances.values()) < across.df < model.df
    assert "a residual variance per platform" in model.describe()


def test_noisy_guests_do_not_widen_bare_metals_intervals():
    frame = hetero()
    alone = Model(launches(frame[frame["platform"] == "BM"])).contrast({0: 1, 1: -1})
    beside = Model(launches(frame)).contrast({0: 1, 1: -1})
    assert beside.se == pytest.approx(alone.se, rel=0.25)
    # one pooled variance would have made it several times wider
    pooled = sm.OLS(launches(frame)["y"].to_numpy(), Model(launches(frame)).x).fit()
    vector = np.zeros(pooled.params.shape[0])
    vector[[0, 1]] = [1, -1]
    assert math.sqrt(float(vector @ pooled.cov_params() @ vector)) > 2 * beside.se


def test_alike_spreads_keep_one_pooled_variance():
    model = Model(launches(hetero(noisy=0.02)))
    assert not model.split and model.homogeneity_p >= 0.2
    assert model.contrast({0: 1, 1: -1}).df == model.df == model.fit.df_resid


def test_no_replication_no_interval():
    one = pd.DataFrame({"round_means_s": ["10", "11"], "launch_rounds": ["1", "1"]})
    model = Model(launches(one))
    assert model.fit is None and not model.contrast({0: 1, 1: -1}).testable


def test_nodes_are_a_block_and_a_contrast_outside_the_design_is_not_estimable():
    frame = study(cells=3, rounds=4)
    frame["launch_nodes"] = ["a;b;a;b", "b;a;b;a", "a;a;b;b"]  # node and round not confounded
    model = Model(launches(frame))
    assert model.nodes == ["a", "b"] and model.df == 12 - 3 - 3 - 1
    assert not model.contrast({0: 1, 7: -1}).testable  # no such row


def test_ratio_interval_is_asymmetric_on_the_ratio_scale():
    c = Contrast(math.log(1.2), 0.1, 10)
    low, high = c.bounds()
    t = sps.t.ppf(0.95, 10)
    assert (low, high) == pytest.approx((1.2 * math.exp(-t * 0.1), 1.2 * math.exp(t * 0.1)))
    assert high - 1.2 > 1.2 - low
    assert c.half_width() == pytest.approx(math.expm1(t * 0.1))
    assert not Contrast(0.1, 0.0, 10).testable  # a zero spread is never certainty


def test_combining_two_models_is_welchs_test():
    a, b = RNG.normal(1.0, 0.1, 5), RNG.normal(1.2, 0.3, 7)
    ca = Contrast(a.mean(), a.std(ddof=1) / math.sqrt(5), 4)
    cb = Contrast(b.mean(), b.std(ddof=1) / math.sqrt(7), 6)
    c = combine([(1.0, ca), (-1.0, cb)])
    welch = sps.ttest_ind(a, b, equal_var=False)
    assert c.log / c.se == pytest.approx(welch.statistic)
    assert c.df == pytest.approx(welch.df)


def test_holm_is_statsmodels_holm():
    for _ in range(20):
        p = list(RNG.uniform(0, 0.2, RNG.integers(1, 7)))
        assert holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]))
    assert holm([math.nan, 0.01]) == [1.0, 0.02]


def test_tost_and_one_sided_tests_are_statsmodels_on_two_groups():
    x1, x2 = np.log(RNG.normal(10, 0.3, 6)), np.log(RNG.normal(10.2, 0.3, 6))
    frame = pd.DataFrame({"round_means_s": [";".join(map(str, np.exp(x1))), ";".join(map(str, np.exp(x2)))]})
    frame["launch_rounds"] = "1;1;1;1;1;1"   # one round: a plain two-sample model
    c = Model(launches(frame)).contrast({0: 1, 1: -1})
    m = math.log1p(0.05)
    p_tost = ttost_ind(x1, x2, -m, m, usevar="pooled")[0]
    assert alike("alike", 0.05).p_yes(c) == pytest.approx(p_tost)
    # "faster" needs the gain beyond the margin: the one-sided test of δ < −m
    t = sps.ttest_ind(x1 + m, x2, alternative="less")
    assert lower("lower", 0.05).p_yes(c) == pytest.approx(t.pvalue)
    assert lower("lower", 0.05).p_negligible(c) == pytest.approx(p_tost)


def test_summary_rows_get_the_models_interval_beside_their_own():
    frame = study(cells=3).assign(site="local", tool="mlperf", hardware="X", accel="none")
    out = model_columns(frame)
    assert (out["model_df"] == 4).all()
    assert (out["model_low_s"] < out["model_mean_s"]).all() and (out["model_mean_s"] < out["model_high_s"]).all()
