"""``dlvirt calibrate`` and ``compare`` with and without a calibration: results folders and studies
built through the real summary code (``compare_study``; ``dlvirt.analysis.compare_simulate``)."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd

from conftest import compare_study
from dlvirt.analysis.aggregate import write_summary
from dlvirt.analysis.calibrate import calibration_of
from dlvirt.analysis.compare import FASTER, INCONCLUSIVE, REFUSED, SLOWER, compare, load
from dlvirt.analysis.compare_simulate import NODES, QUIET_DRIFT, SHIFT, calibration, simulated
from dlvirt.cli import main
from dlvirt.core.calibration import read_calibration
from dlvirt.core.records import JobResult


def on_node(folder: Path, node: str = "X") -> Path:
    """``folder``'s run records as if run on simulated node kind ``node``, its summary rewritten."""
    paths = sorted((folder / "runs").rglob("*.json"))
    for path in paths:
        dataclasses.replace(JobResult.read(path), node=NODES[node]).write(path)
    write_summary(paths, folder / "summary.csv")
    return folder


def test_calibrate_writes_its_document_and_says_what_the_host_tells_apart(tmp_path, capsys):
    blocks = [str(on_node(compare_study(tmp_path / f"block{i}", seed=i, launches=5))) for i in range(3)]
    out = tmp_path / "calibration.json"
    assert main(["calibrate", *blocks, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "from 3 A/A blocks" in printed and "tell apart" in printed and "power 0.8" in printed
    document = json.loads(out.read_text())
    assert document["format_version"] == 1 and document["hardware"] == ["Simulated CPU X, 8 CPUs, 1 socket(s), x86_64"]
    found = read_calibration(out)
    assert set(found.platforms) == {"BM", "CN"} and found.launches == 5 and found.platforms["BM"].day_df == 2
    assert found.false_alarms.compared == 6 and 0 < found.resolvable["CN"] < 0.2
    # compare reads it: the rows of this kind of hardware carry its day component
    assert main(["compare", blocks[0], blocks[1], "--calibration", str(out), "--out", str(tmp_path / "out")]) == 0
    table = pd.read_csv(tmp_path / "out" / "compare.csv")
    assert table["calibration"].eq(str(out)).all() and table["day_sd"].notna().all()
    assert "Calibrated: 2 of 2 rows" in capsys.readouterr().out


def test_calibrate_refuses_one_block_and_unrecorded_hardware(tmp_path, capsys):
    a, b = compare_study(tmp_path / "a"), compare_study(tmp_path / "b", seed=1)
    assert main(["calibrate", str(a), "--out", str(tmp_path / "c.json")]) == 2
    assert "2 or more different results folders" in capsys.readouterr().err
    assert main(["calibrate", str(a), str(b), "--out", str(tmp_path / "c.json")]) == 2
    assert "do not record their hardware" in capsys.readouterr().err


def test_a_broken_calibration_is_named_with_its_key(tmp_path, capsys):
    a, b = compare_study(tmp_path / "a"), compare_study(tmp_path / "b", seed=1)
    broken = tmp_path / "c.json"
    broken.write_text(json.dumps({"format_version": 1, "hardware": ["x"]}))
    assert main(["compare", str(a), str(b), "--calibration", str(broken), "--out", str(tmp_path / "o")]) == 2
    assert f"{broken}: a calibration without key 'platforms'" in capsys.readouterr().err


def test_an_uncalibrated_host_wide_shift_is_not_called_slower(tmp_path, capsys):
    """Every scenario 8 % slower in B (a quiet host's own shift, as far as two studies can tell):
    without a calibration not beyond the 10 % a host may shift, so inconclusive, saying why."""
    a = compare_study(tmp_path / "a")
    b = compare_study(tmp_path / "b", seed=1, scale={"BM/1/VNL/CPU": 1.08, "CN/1/VNL/CPU": 1.08})
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "out")]) == 0
    table = pd.read_csv(tmp_path / "out" / "compare.csv")
    assert table["verdict"].eq(INCONCLUSIVE).all() and table["ratio"].between(1.05, 1.11).all()
    assert table["why"].str.contains("not beyond the ±10% a host can shift").all()
    assert "Not calibrated (no calibration given)" in capsys.readouterr().out


def test_a_2x_slowdown_is_slower_with_and_without_a_calibration():
    rng = np.random.default_rng(5)
    cal = calibration(rng, QUIET_DRIFT, SHIFT)
    a, b = simulated("A", rng, QUIET_DRIFT), simulated("B", rng, QUIET_DRIFT, SHIFT, slowed={"CN": 2.0})
    for used in (None, cal):
        table = compare(a, b, calibration=used)
        assert set(table.loc[table["scenario"] == "CN/1/VNL/CPU", "verdict"]) == {SLOWER}, table
        assert not table.loc[table["scenario"] == "BM/1/VNL/CPU", "verdict"].isin([SLOWER, FASTER]).any()


def test_other_hardware_is_not_comparable_unless_a_calibration_links_both_kinds():
    rng = np.random.default_rng(6)
    a, b = simulated("A", rng, QUIET_DRIFT), simulated("B", rng, QUIET_DRIFT, node="Y", hardware=np.log(0.9))
    table = compare(a, b)
    assert table["verdict"].eq(REFUSED).all()
    kinds = "hardware: A Simulated CPU X, 8 CPUs, 1 socket(s), x86_64, B Simulated CPU Y"
    assert table["why"].str.startswith(kinds).all()
    # blocks on both kinds: the calibration's day component holds the kinds' difference
    linked = calibration_of([simulated("x1", rng, QUIET_DRIFT), simulated("y1", rng, QUIET_DRIFT, node="Y"),
                             simulated("x2", rng, QUIET_DRIFT)])
    assert len(linked.hardware) == 2
    assert not compare(a, b, calibration=linked)["verdict"].eq(REFUSED).any()


def test_what_the_host_tells_apart_pays_for_compares_holm_and_few_blocks_are_named(tmp_path):
    from dlvirt.analysis.calibrate import plain_words, resolvable
    from dlvirt.core.calibration import Components

    c = Components(residual=0.02 ** 2, residual_df=20.0, round=0.0, round_df=0.0, day=0.01 ** 2, day_df=1.0,
                   scenarios=6)
    alone, holm = resolvable(c, 3), resolvable(c, 3, family=12)
    assert 0 < alone < holm  # one scenario among 12 must pass α/12
    more_days = dataclasses.replace(c, day_df=2.0)
    assert resolvable(more_days, 3, family=12) < holm / 2  # the second day's df buys most of it back
    blocks = [on_node(compare_study(tmp_path / f"block{i}", seed=i, launches=3)) for i in range(2)]
    words = "\n".join(plain_words(calibration_of([load(b) for b in blocks])))
    assert "by Holm" in words and "calibrate on 3 or more blocks" in words
