"""The calibration document as the claims, ``plan --design`` and the report read it (``claims.calibration``):
seeded studies simulated through the real summary, model and claim code; calibrations written directly."""

import math

import numpy as np
import pandas as pd
import pytest

from conftest import RUNS
from dlvirt.analysis.claims import evaluate
from dlvirt.analysis.claims.simulate import DAYS, NODE, simulate
from dlvirt.analysis.model import Contrast, day_contrast, with_day
from dlvirt.analysis.report import calibration_words, render
from dlvirt.cli import main
from dlvirt.core.calibration import Calibration, CalibrationError, Components, FalseAlarms, read_calibration
from dlvirt.core.records import JobResult
from dlvirt.plan.design import Day, Inputs, day_floor, launches_needed, project
from dlvirt.system.hostinfo import hardware_label, node_identity

HARDWARE = hardware_label(NODE)
TEMPLATE = JobResult.read(next(p for p in RUNS if p.name == "mlperf-ic-BM-1-VNL-CPU.json"))


def calibration(path, hardware=HARDWARE, platforms=("BM", "CN"), day=0.03 ** 2, day_df=2.0) -> Calibration:
    """A calibration of ``hardware`` as ``dlvirt calibrate`` writes it, read back from ``path``."""
    Calibration(hardware=(hardware,), blocks=("b1", "b2", "b3"), launches=5,
                platforms={p: Components(0.03 ** 2, 40.0, 0.0, 0.0, day, day_df, 4) for p in platforms},
                false_alarms=FalseAlarms(8, 1, 0), resolvable=dict.fromkeys(platforms, 0.2)).write(path)
    return read_calibration(path)


def pinning_study(seed: int = 3) -> pd.DataFrame:
    """The default study's pinning matrix (BM, CN; IC, NLP), PIN 10 % faster, on NODE's hardware."""
    return simulate(TEMPLATE, DAYS, DAYS.pinning_matrix(), lambda _, s: math.log(0.9) if s.pinning == "PIN" else 0.0,
                    np.random.default_rng(seed))


def test_the_day_of_a_contrast_is_its_cells_day_variances_weighted_on_satterthwaites_df():
    bm, cn = Components(0, 1, 0, 0, 0.02 ** 2, 2, 4), Components(0, 1, 0, 0, 0.04 ** 2, 4, 4)
    day = day_contrast([(0.5, bm), (-0.5, bm), (0.5, cn), (-0.5, cn)])
    v_bm, v_cn = 0.5 * 0.02 ** 2, 0.5 * 0.04 ** 2  # Σ w² σ²_day per platform
    assert day.se == pytest.approx(math.sqrt(v_bm + v_cn))
    assert day.df == pytest.approx((v_bm + v_cn) ** 2 / (v_bm ** 2 / 2 + v_cn ** 2 / 4))
    # added to a model contrast: Welch–Satterthwaite, on at most the day's df
    total = with_day(Contrast(-0.1, 0.01, 90.0, 20), day)
    assert total.se == pytest.approx(math.sqrt(0.01 ** 2 + v_bm + v_cn)) and total.df <= day.df
    assert total.log == -0.1 and total.launches == 20
    # a day measured as none still bounds the df; a day on no df tests nothing
    assert with_day(Contrast(-0.1, 0.01, 90.0), day_contrast([(1, Components(0, 1, 0, 0, 0.0, 2, 4))])).df == 2
    assert not with_day(Contrast(-0.1, 0.01, 90.0), day_contrast([(1, Components(0, 1, 0, 0, 0.01, 0, 4))])).testable


def test_a_calibration_widens_every_claim_contrast_and_claims_csv_names_it(tmp_path):
    summary = pinning_study()
    path = tmp_path / "calibration.json"
    plain = evaluate(summary, 2, []).set_index("id").loc["pinning"]
    calibrated = evaluate(summary, 2, [], calibration=calibration(path)).set_index("id").loc["pinning"]
    assert plain["calibration"] == "" and "scope: this study's day only (no calibration given" in plain["evidence"]
    assert calibrated["calibration"] == str(path) and "scope: beyond this study's day" in calibrated["evidence"]

    def widths(row: pd.Series) -> list[float]:
        return [float(h) / float(lo) for lo, h in zip(row["ratio_low"].split(";"), row["ratio_high"].split(";"),
                                                      strict=True)]

    assert all(c > p for c, p in zip(widths(calibrated), widths(plain), strict=True))
    assert all(float(df) <= 2 for df in calibrated["df"].split(";"))
    assert all(float(df) > 2 for df in plain["df"].split(";"))


def test_a_platform_the_calibration_lacks_keeps_this_studys_day(tmp_path):
    found = evaluate(pinning_study(), 2, [], calibration=calibration(tmp_path / "c.json", platforms=("BM",)))
    pinning = found.set_index("id").loc["pinning"]
    assert pinning["calibration"] == "" and "CN (not in the calibration)" in pinning["evidence"]


def test_a_calibration_of_other_hardware_is_refused_naming_the_file(tmp_path):
    other = calibration(tmp_path / "other.json", hardware="Another CPU, 64 CPUs, 2 socket(s), x86_64")
    with pytest.raises(CalibrationError, match=rf"{tmp_path / 'other.json'}: a calibration of Another CPU.*not of this "
                                               r"study's main-host rows \(Simulated CPU"):
        evaluate(pinning_study(), 2, [], calibration=other)


def test_plan_design_sizes_with_the_day_and_says_what_the_host_tells_apart(tmp_path, capsys, monkeypatch):
    inputs = Inputs(0.017 ** 2, 0.032 ** 2, 4.0, 3.0, "given")
    day = Day(2 * 0.03 ** 2, 2.0)
    plain, calibrated = project(inputs, 5, 2, 24, 4), project(inputs, 5, 2, 24, 4, day=day)
    assert calibrated.se > plain.se and calibrated.df <= 2 < plain.df
    # the day does not shrink with launches: a target below its floor is never reached
    floor = day_floor(day, 4)
    assert floor > 0.05 and launches_needed(inputs, 2, 24, floor / 2, 4, day=day) is None
    assert launches_needed(inputs, 2, 24, 0.07, 4) is not None
    # the command: this host's calibration is read, another host's refused naming its file
    monkeypatch.chdir(RUNS[0].parents[3])
    here = calibration(tmp_path / "here.json", hardware=hardware_label(node_identity()))
    given = ["plan", "--design", "--runs", str(tmp_path / "none"), "--within-cv", "0.017", "--between-cv", "0.032",
             "--launch-s", "4", "--repetition-s", "3"]
    assert main([*given, "--calibration", here.path]) == 0
    out = capsys.readouterr().out
    assert "calibration of" in out and "what this host tells apart from no difference with this config" in out
    assert "every claim contrast carries it" in out and "the day alone" in out
    calibration(tmp_path / "there.json", hardware="Another CPU, 64 CPUs, 2 socket(s), x86_64")
    assert main([*given, "--calibration", str(tmp_path / "there.json")]) == 2
    assert f"{tmp_path / 'there.json'}: a calibration of Another CPU" in capsys.readouterr().err


def test_the_reports_host_section_shows_the_calibration_or_says_none_was_given(built_tables, tmp_path):
    frame = pd.read_csv(built_tables["summary"])
    fixture = str(frame["hardware"].iloc[0])
    assert calibration_words(None, frame)[0].startswith("none given (claims.calibration)")
    calibration(tmp_path / "c.json", hardware=fixture)
    words, scope = calibration_words(tmp_path / "c.json", frame)
    assert "from 3 A/A blocks" in words and "tell apart" in words and "beyond this study's day" in scope
    paths = {k: v for k, v in built_tables.items() if k != "dir"}
    html = render(figures={}, runs=RUNS, calibration=tmp_path / "c.json", **paths)
    assert "what this host can tell apart" in html and "from 3 A/A blocks" in html
    assert "speaks of this host on this study&#39;s day only" in render(figures={}, runs=RUNS, **paths)
    calibration(tmp_path / "other.json", hardware="Another CPU, 64 CPUs, 2 socket(s), x86_64")
    with pytest.raises(CalibrationError, match="other.json: a calibration of Another CPU"):
        render(figures={}, runs=RUNS, calibration=tmp_path / "other.json", **paths)

