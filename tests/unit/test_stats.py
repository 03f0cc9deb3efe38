import dataclasses
import math
import statistics
import subprocess
import sys

import numpy as np
import pytest

from conftest import FIXTURES as FIXTURE_DIR
from dlvirt.analysis.stats import estimate
from dlvirt.core.interval import outliers, t_half_width
from dlvirt.core.records import JobResult
from dlvirt.core.scenario import Scenario

FIXTURES = FIXTURE_DIR / "runs"


def test_outlier_is_flagged_and_counted_not_dropped():
    values = [1.0] * 30 + [1.1] * 30 + [50.0]
    assert outliers(values) == [60]
    est = estimate(values)
    assert est.outliers == 1 and est.n == 61                  # it still counts
    assert est.mean == pytest.approx((30 * 1.0 + 30 * 1.1 + 50.0) / 61) and est.median == pytest.approx(1.1)


def test_outliers_are_found_at_small_n():
    # a 3-sigma rule cannot flag anything below n = 11 ((n-1)/sqrt(n) < 3); the modified z-score can
    assert outliers([10.0, 10.1, 14.0]) == [2]
    assert outliers([10.0, 10.1, 9.9, 10.05, 20.0]) == [4]
    assert outliers([10.0, 10.1, 9.9, 10.05, 10.2]) == []
    assert outliers([10.0, 14.0]) == []           # two values: nothing to tell which is odd
    assert outliers([5.0, 5.0, 5.0, 5.0]) == []   # no spread


def test_median_and_iqr():
    est = estimate([1.0, 2.0, 3.0, 4.0])
    assert est.median == pytest.approx(2.5) and est.iqr == pytest.approx(1.5)


def test_student_t_interval_matches_textbook_value():
    # n=4, mean 2.5, s = 1.29099; t(0.975, 3) = 3.18245 -> half-width 2.05431
    est = estimate([1.0, 2.0, 3.0, 4.0])
    assert est.mean == pytest.approx(2.5)
    assert est.ci95 == pytest.approx(3.18245 * 1.290994 / 2, rel=1e-4)


def test_t_quantile_is_scipy_stats_t_without_importing_scipy_stats():
    """The harness ends every launch with one interval: its quantile comes from scipy.special, whose
    import costs a launch a quarter of scipy.stats' (and a TCG guest far more)."""
    from scipy import stats

    for n in (2, 3, 4, 10, 50):
        for level in (0.9, 0.95, 0.99):
            assert t_half_width(1.0, n, level) == pytest.approx(stats.t.ppf(0.5 + level / 2, n - 1) / math.sqrt(n),
                                                                rel=1e-12)
    script = ("import sys; from dlvirt.core.interval import relative_half_width; from dlvirt.apps.rs import roc_auc; "
              "import numpy as np; relative_half_width([1.0, 2.0]); roc_auc(np.array([0, 1]), np.array([0.1, 0.2])); "
              "print('scipy.stats' in sys.modules)")
    imported = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert imported.stdout.strip() == "False", imported.stderr


def test_single_value_has_no_interval():
    est = estimate([3.0])
    assert est.mean == 3.0 and math.isnan(est.ci95)


def test_empty_is_an_error():
    with pytest.raises(ValueError):
        estimate([])


RECORDED = JobResult.read(FIXTURES / "mlperf-ic-BM-1-VNL-CPU.json")
NODE = {"cpu_model": "Fixture CPU", "logical_cpus_online": 2, "sockets": 1, "arch": "x86_64"}


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

    runs = [dataclasses.replace(run(v), repetition=i) for i, v in enumerate([1.0] * 30 + [1.1] * 30)]
    row = summarise_launches([launch([*runs, dataclasses.replace(run(50.0, 40.0), repetition=60)])])
    # the outlier is flagged and listed, and counts in every column
    assert row["outliers"] == 1 and row["outlier_reps"] == "round 1: rep 60"
    assert row["reps"] == 61 and row["replicates"] == 1
    # one launch: its within-launch spread is kept, but its repetitions are not units of an interval
    assert row["ci_n"] == 1 and math.isnan(row["ci95_s"])
    assert row["std_s"] == pytest.approx(statistics.stdev([1.0] * 30 + [1.1] * 30 + [50.0]))
    assert row["mean_s"] == pytest.approx(113 / 61) and row["infer_s"] == pytest.approx(113 / 61)
    assert row["pre_s"] == pytest.approx((60 * 0.5 + 40.0) / 61)
    assert row["median_s"] == pytest.approx(1.1) and row["round_medians_s"] == "1.1"
    assert row["loadgen_valid"] is True and row["model"] == "ResNet50" and row["reference_model"] is True


def test_a_launch_far_from_its_siblings_is_flagged_and_kept():
    from dlvirt.analysis.aggregate import summarise_launches

    # SR CN/2/VNL, as a default study saw it: one launch of 10.96 s among siblings of about 1.5 s
    means = (1.5, 1.48, 10.96, 1.52, 1.51)
    launches = [dataclasses.replace(launch([run(v), run(v)]), replicate=i + 1) for i, v in enumerate(means)]
    row = summarise_launches(launches)
    assert row["outlier_launches"] == "round 3" and row["replicates"] == 5 and row["mean_s"] == pytest.approx(
        sum(means) / 5)


def test_replicates_are_the_unit_of_the_interval():
    from dlvirt.analysis.aggregate import summarise_launches

    launches = [dataclasses.replace(launch([run(v), run(v + 0.01), run(v - 0.01)], boot_s=b), replicate=i + 1,
                                    node={"hostname": f"n{i % 2}", **NODE})
                for i, (v, b) in enumerate(((1.0, 5.0), (1.2, 6.0), (1.1, 5.5)))]
    row = summarise_launches(launches)
    assert row["replicates"] == 3 and row["reps"] == 9 and row["min_reps"] == 3
    assert row["ci_n"] == 3
    # what the study's model needs of each launch: its mean, round, node and boot time
    assert row["round_means_s"] == "1;1.2;1.1" and row["launch_rounds"] == "1;2;3"
    assert row["launch_nodes"] == "n0;n1;n0" and row["launch_boot_s"] == "5;6;5.5"
    assert row["mean_s"] == pytest.approx(1.1)
    assert row["std_s"] == pytest.approx(0.1) and row["outlier_reps"] == "" and row["outlier_launches"] == ""
    # the variance components (log scale, times the mean), not the SD of the launch means
    from dlvirt.core.variance import of_launches

    parts = of_launches([[v, v + 0.01, v - 0.01] for v in (1.0, 1.2, 1.1)])
    log_means = [np.mean(np.log([v, v + 0.01, v - 0.01])) for v in (1.0, 1.2, 1.1)]
    assert parts.between == pytest.approx(np.var(log_means, ddof=1) - parts.within / 3)
    assert row["between_sd_s"] == pytest.approx(1.1 * parts.between_sd)
    assert row["within_sd_s"] == pytest.approx(1.1 * parts.within_sd)
    assert row["ci95_s"] == pytest.approx(4.302653 * 0.1 / math.sqrt(3), rel=1e-5)


def test_summary_splits_mvm_rows_by_vmm(tmp_path):
    import json

    from dlvirt.analysis.aggregate import summarise

    paths = []
    for i, vmm in enumerate(["qemu-microvm", "firecracker", "qemu-microvm"]):
        path = tmp_path / f"{i}.json"
        one = dataclasses.replace(launch([run(1.0), run(1.1), run(1.05)], platform="MVM", vmm=vmm),
                                  run_id=f"launch-{i}")
        path.write_text(json.dumps(one.to_dict()))
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
    # every repetition is judged: a cold one (measured: IC BM/1/PIN, no warm-up) is not set aside;
    # keeping it out of the counted ones is the steady-state warm-up's job (is_warmup)
    cold_first = [0.518, 0.396, 0.394, 0.391]
    assert stop_reason(adaptive, cold_first[:4]) is None and stop_reason(adaptive, cold_first[1:]) == PRECISE
    assert count_problem(adaptive, 4, PRECISE) is None
    assert "3 to 5 asked" in count_problem(adaptive, 6, AT_MAX)
    assert count_problem(2, 1, FIXED) == "1 repetitions ran, 2 asked"


def test_steadiness_is_judged_on_the_first_two_counted_repetitions_and_warm_ups_are_a_fixed_count():
    from dlvirt.run.repetitions import steady, warmup_problem

    cold = [0.518, 0.396, 0.394]  # measured: IC BM/1/PIN, no warm-up
    assert steady(cold[1:], 0.1) is True and steady(cold[:2], 0.1) is False  # 0.5 % apart; 31 % apart
    assert steady(cold[:1], 0.1) is None and steady(cold, None) is None  # not judged
    assert warmup_problem(2, 2) is None and warmup_problem(1, 2) == "2 warm-ups ran, 1 asked"
    assert warmup_problem(0, 1) is None  # a tool's own warm-up (Server calibrating its rate) where none was asked
    assert warmup_problem(2, 1) == "1 warm-ups ran, 2 asked"


def test_a_warm_up_count_per_app_and_tool():
    from dlvirt.plan.planner import warmups_for

    study = {"warmup_repetitions": {"default": 1, "sr": 3, "nlp": {"dlbs": 2}}}
    assert warmups_for({"warmup_repetitions": 2}, "ic", "mlperf") == 2
    assert warmups_for(study, "ic", "mlperf") == 1 and warmups_for(study, "sr", "mlperf-Server") == 3
    assert warmups_for(study, "nlp", "dlbs") == 2 and warmups_for(study, "nlp", "mlperf-SingleStream") == 1


def test_variance_components_correct_the_launch_means_for_their_own_noise():
    from dlvirt.core.variance import of_launches, pooled

    # three launches of three repetitions, on the log scale: within-launch deviations -d, 0, +d
    d, means = 0.05, [0.0, 0.1, 0.2]
    launches = [[math.exp(m - d), math.exp(m), math.exp(m + d)] for m in means]
    c = of_launches(launches)
    assert c.within == pytest.approx(d * d)                           # (2 d^2) / (3 - 1) per launch
    assert c.between == pytest.approx(0.01 - d * d / 3)               # var(means) - within / n
    assert c.launches == 3 and c.repetitions == 9 and c.df_within == 6 and c.df_between == 2
    # launches that agree better than their noise allows: floored at 0, not negative
    assert of_launches([[math.exp(-d), 1.0, math.exp(d)]] * 3).between == 0.0
    # one launch: no between component; one repetition per launch: no within one
    assert math.isnan(of_launches(launches[:1]).between) and math.isnan(of_launches([[1.0], [2.0]]).within)
    # unequal launch sizes: the one-way ANOVA estimator with n0 = (N - sum n_i^2 / N) / (L - 1)
    c = of_launches([[1.0, 1.1], [1.2, 1.3, 1.25], [0.9, 1.0, 1.05, 1.0]])
    x = [np.log([1.0, 1.1]), np.log([1.2, 1.3, 1.25]), np.log([0.9, 1.0, 1.05, 1.0])]
    ms_w = sum(((v - v.mean()) ** 2).sum() for v in x) / 6
    grand = np.concatenate(x).mean()
    ms_b = sum(v.size * (v.mean() - grand) ** 2 for v in x) / 2
    assert c.within == pytest.approx(ms_w) and c.between == pytest.approx((ms_b - ms_w) / ((9 - 29 / 9) / 2))
    # scenarios pooled by their sums of squares: two equal scenarios at different speeds pool to themselves
    both = pooled([of_launches(launches), of_launches([[10 * v for v in r] for r in launches])])
    assert both.within == pytest.approx(d * d) and both.between == pytest.approx(0.01 - d * d / 3)
    assert both.df_between == 4 and both.launches == 6
