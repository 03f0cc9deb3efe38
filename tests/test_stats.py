import math

import pytest

from dlvirt.analysis.stats import drop_outliers, estimate


def test_outlier_beyond_three_sigma_is_removed_and_counted():
    values = [1.0] * 30 + [1.1] * 30 + [50.0]
    kept, removed = drop_outliers(values)
    assert removed == 1
    assert 50.0 not in kept
    est = estimate(values)
    assert est.outliers == 1 and est.n == 60
    assert est.mean == pytest.approx(1.05)


def test_student_t_interval_matches_textbook_value():
    # n=4, mean 2.5, s = 1.29099; t(0.975, 3) = 3.18245 -> half-width 2.05431
    est = estimate([1.0, 2.0, 3.0, 4.0])
    assert est.mean == pytest.approx(2.5)
    assert est.ci95 == pytest.approx(3.18245 * 1.290994 / 2, rel=1e-4)


def test_single_value_has_no_interval():
    est = estimate([3.0])
    assert est.mean == 3.0 and math.isnan(est.ci95)


def test_empty_is_an_error():
    with pytest.raises(ValueError):
        estimate([])


def test_summary_phases_come_from_the_same_repetitions_as_the_mean():
    from dlvirt.analysis.aggregate import summarise_result

    def run(e2e, pre):
        return {"e2e_s": e2e, "phases": {"pre_s": pre, "infer_s": e2e, "post_s": 0.0}, "samples": 10,
                "samples_per_s": 10 / e2e, "loadgen": {"validity": "VALID"},
                "threads": {"policy": "granted", "intra_op": 2}}

    result = {"tool": "mlperf", "app": "ic", "scenario_name": "BM/2/PIN/CPU",
              "scenario": {"platform": "BM", "cores": 2, "pinning": "PIN", "processor": "CPU"},
              "runs": [run(1.0, 0.5)] * 30 + [run(1.1, 0.5)] * 30 + [run(50.0, 40.0)],
              "platform": {"accel": "none"}, "dataset": {"source": "synthetic"}, "model": {"weights": "random"},
              "host": "h"}
    row = summarise_result(result)
    assert row["outliers"] == 1 and row["reps"] == 60
    assert row["pre_s"] == pytest.approx(0.5) and row["infer_s"] == pytest.approx(1.05)
    assert row["loadgen_valid"] is True
