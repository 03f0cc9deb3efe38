import dataclasses
import math
from pathlib import Path

import pytest

from dlvirt.analysis.stats import drop_outliers, estimate
from dlvirt.core.records import JobResult
from dlvirt.core.scenario import Scenario

FIXTURES = Path(__file__).parent / "fixtures" / "runs"


def test_outlier_is_removed_and_counted():
    values = [1.0] * 30 + [1.1] * 30 + [50.0]
    kept, removed = drop_outliers(values)
    assert removed == 1
    assert 50.0 not in kept
    est = estimate(values)
    assert est.outliers == 1 and est.n == 60
    assert est.mean == pytest.approx(1.05)


def test_outliers_are_found_at_small_n():
    # a 3-sigma rule cannot flag anything below n = 11 ((n-1)/sqrt(n) < 3); the modified z-score can
    assert drop_outliers([10.0, 10.1, 14.0])[1] == 1
    assert drop_outliers([10.0, 10.1, 9.9, 10.05, 20.0])[1] == 1
    assert drop_outliers([10.0, 10.1, 9.9, 10.05, 10.2])[1] == 0
    assert drop_outliers([10.0, 14.0])[1] == 0           # two values: nothing to tell which is odd
    assert drop_outliers([5.0, 5.0, 5.0, 5.0])[1] == 0   # no spread


def test_median_and_iqr():
    est = estimate([1.0, 2.0, 3.0, 4.0])
    assert est.median == pytest.approx(2.5) and est.iqr == pytest.approx(1.5)


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


RECORDED = JobResult.read(FIXTURES / "mlperf-ic-BM-1-VNL-CPU.json")


def run(e2e, pre=0.5):
    return dataclasses.replace(RECORDED.runs[0], e2e_s=e2e, phases={"pre_s": pre, "infer_s": e2e, "post_s": 0.0},
                               samples=10, samples_per_s=10 / e2e, loadgen={"validity": "VALID"},
                               threads={"policy": "granted", "intra_op": 2})


def launch(runs, platform="BM", **facts):
    scenario = Scenario(platform, 2, "VNL", "CPU")
    return dataclasses.replace(RECORDED, tool="mlperf", app="ic", scenario=scenario, scenario_name=scenario.name,
                               runs=runs, platform={"accel": "none", **facts}, dataset={"source": "synthetic"},
                               model={"model": "ResNet50", "weights": "random"}, host="h")


def test_summary_phases_come_from_the_same_repetitions_as_the_mean():
    from dlvirt.analysis.aggregate import summarise_launches

    row = summarise_launches([launch([run(1.0)] * 30 + [run(1.1)] * 30 + [run(50.0, 40.0)])])
    assert row["outliers"] == 1 and row["reps"] == 60 and row["replicates"] == 1
    assert row["ci_unit"] == "repetition" and row["ci_n"] == 60
    assert row["pre_s"] == pytest.approx(0.5) and row["infer_s"] == pytest.approx(1.05)
    assert row["median_s"] == pytest.approx(1.05) and row["iqr_s"] == pytest.approx(0.1)
    assert row["loadgen_valid"] is True and row["model"] == "ResNet50" and row["reference_model"] is True


def test_replicates_are_the_unit_of_the_interval():
    from dlvirt.analysis.aggregate import summarise_launches

    launches = [launch([run(v), run(v + 0.01), run(v - 0.01)]) for v in (1.0, 1.2, 1.1)]
    row = summarise_launches(launches)
    assert row["replicates"] == 3 and row["reps"] == 9 and row["min_reps"] == 3
    assert row["ci_unit"] == "replicate" and row["ci_n"] == 3
    assert row["mean_s"] == pytest.approx(1.1)
    assert row["between_sd_s"] == pytest.approx(0.1) and row["std_s"] == pytest.approx(0.1)
    assert row["ci95_s"] == pytest.approx(4.302653 * 0.1 / math.sqrt(3), rel=1e-5)


def test_summary_splits_mvm_rows_by_vmm(tmp_path):
    import json

    from dlvirt.analysis.aggregate import summarise

    paths = []
    for i, vmm in enumerate(["qemu-microvm", "firecracker", "qemu-microvm"]):
        path = tmp_path / f"{i}.json"
        path.write_text(json.dumps(launch([run(1.0), run(1.1), run(1.05)], platform="MVM", vmm=vmm).to_dict()))
        paths.append(path)
    frame = summarise(paths).set_index("vmm")
    assert frame.loc["qemu-microvm", "replicates"] == 2 and frame.loc["firecracker", "replicates"] == 1


def test_adaptive_stopping_rule():
    from dlvirt.run.repetitions import AT_MAX, FIXED, PRECISE, count_problem, stop_reason

    adaptive = {"min": 3, "max": 5, "rel_ci95": 0.05}
    assert stop_reason(2, [1.0]) is None and stop_reason(2, [1.0, 1.2]) == FIXED
    assert stop_reason(adaptive, [1.0, 1.0]) is None                   # below min even if tight
    assert stop_reason(adaptive, [1.0, 1.01, 0.99]) == PRECISE
    assert stop_reason(adaptive, [1.0, 2.0, 1.5]) is None              # too wide, below max
    assert stop_reason(adaptive, [1.0, 2.0, 1.5, 1.0, 2.0]) == AT_MAX
    # one cold repetition is an outlier by the summary's rule: the interval of the kept ones decides
    cold_first = [0.518, 0.396, 0.394, 0.391]  # measured: IC BM/1/PIN, no warm-up
    assert stop_reason(adaptive, cold_first[:3]) is None and stop_reason(adaptive, cold_first) == PRECISE
    assert count_problem(adaptive, 4, PRECISE) is None
    assert "3 to 5 asked" in count_problem(adaptive, 6, AT_MAX)
    assert count_problem(2, 1, FIXED) == "1 repetitions ran, 2 asked"
