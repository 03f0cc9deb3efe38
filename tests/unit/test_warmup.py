"""The warm-up count read from a pilot's run records (dlvirt.analysis.warmup, ``dlvirt warmup``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from conftest import FIXTURES
from dlvirt.analysis.warmup import report, suggest
from dlvirt.core.records import JobResult

TEMPLATE = JobResult.read(FIXTURES / "runs" / "mlperf-ic-BM-1-VNL-CPU.json")


def pilot(app: str, first_slower: list[float], launches: int = 8, counted: int = 6, seed: int = 0) -> list[JobResult]:
    """Launches of one warm-up each whose first counted repetitions are ``first_slower`` (relative) slower."""
    rng = np.random.default_rng(seed)
    out = []
    for launch in range(launches):
        excess = [*first_slower, *[0.0] * (counted - len(first_slower))]
        times = 2.0 * np.exp(np.log1p(excess) + rng.normal(0.0, 0.02, counted))
        runs = [dataclasses.replace(TEMPLATE.runs[0], repetition=i + 1, e2e_s=float(t)) for i, t in enumerate(times)]
        warmup = dataclasses.replace(TEMPLATE.runs[0], repetition=0, warmup=True)
        out.append(dataclasses.replace(TEMPLATE, app=app, runs=runs, warmups=[warmup], replicate=launch + 1,
                                       run_id=f"{app}-{seed}-{launch}",
                                       repetitions={"steady": bool(abs(times[0] - times[1]) <= 0.1 * min(times[:2]))}))
    return out


def test_a_first_repetition_still_warming_asks_for_one_more_warm_up():
    (ic,) = suggest(pilot("ic", [0.15]))
    assert (ic.tool, ic.app, ic.launches, ic.pilot_warmups) == ("mlperf", "ic", 8, 1)
    assert len(ic.positions) == 3 and ic.positions[0].low > 1.1  # judged: the first half, against the later
    assert ic.warming == 1 and ic.count == 2
    assert ic.steady_share < 0.5  # 15 % slow against a 10 % tolerance


def test_a_pilot_already_warm_keeps_its_count_and_only_leading_positions_count():
    steady, late = suggest([*pilot("nlp", []), *pilot("sr", [0.0, 0.2], seed=1)])
    assert steady.app == "nlp" and steady.warming == 0 and steady.count == 1
    assert late.app == "sr" and late.warming == 0  # a slow second repetition after a warm first: noise, not warm-up


def test_the_report_prints_the_config_line_that_fixes_the_counts():
    text = report(suggest([*pilot("ic", [0.15]), *pilot("nlp", []), *pilot("rs", [])]), 0.01)
    assert "mlperf ic: 8 launches, 1 warm-up(s)" in text and "→ 2 warm-up(s)" in text
    assert "warmup_repetitions: {default: 1, ic: 2}" in text
    two = pilot("rs", [], counted=2)
    (rs,) = suggest(two)
    assert len(rs.positions) == 1 and rs.positions[0].launches == 8  # two counted: the first against the second
    assert report([], 0.01) == "warmup: no run records"
    # records of the old steady-state rule: launches with different warm-up counts, a lower bound
    old = pilot("sr", [])
    old[0] = dataclasses.replace(old[0], warmups=old[0].warmups * 2)
    assert "read this count as a lower bound" in report(suggest(old), 0.01)
    assert "lower bound" not in report(suggest(pilot("sr", [])), 0.01)


def test_the_warmup_command_reads_a_runs_folder(tmp_path, capsys):
    from dlvirt.cli import main

    for record in pilot("ic", [0.15]):
        record.write(tmp_path / "runs" / f"ic-{record.replicate}.json")
    assert main(["warmup", str(tmp_path / "runs")]) == 0
    assert "warmup_repetitions: {default: 2}" in capsys.readouterr().out
