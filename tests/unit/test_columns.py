"""The summary's columns come from one declaration (``dlvirt.analysis.columns``): the CSV that
``aggregate`` writes has exactly its header, readers use it, and the docs print it."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES, REPO
from dlvirt.analysis import columns
from dlvirt.analysis.aggregate import concat_summaries, write_summary
from dlvirt.analysis.columns import SummaryError, read_summary

RUNS = sorted((FIXTURES / "runs").glob("*.json"))
DOCS = REPO / "docs" / "summary-columns.md"


def _header(path: Path) -> list[str]:
    return path.read_text().splitlines()[0].split(",")


def test_the_summary_csv_header_is_the_declaration(tmp_path):
    per_app = tmp_path / "ic.csv"
    write_summary(RUNS, per_app)
    assert _header(per_app) == columns.COLUMNS
    study = tmp_path / "summary.csv"
    concat_summaries([per_app], study)
    assert _header(study) == columns.COLUMNS + columns.MODEL_COLUMNS
    frame = read_summary(study)
    assert len(frame) == len(RUNS)
    # list and text columns stay text, whatever their cells look like
    assert all(isinstance(v, str) for v in frame["launch_rounds"])


def test_every_column_is_declared_once_with_a_type_and_a_meaning():
    names = [c.name for c in (*columns.SUMMARY, *columns.MODEL)]
    assert len(names) == len(set(names))
    assert all(c.meaning and c.type in ("str", "int", "float", "bool", "list") for c in columns.BY_NAME.values())
    assert columns.COLUMNS[:len(columns.KEY_COLUMNS)] == columns.KEY_COLUMNS


def test_the_docs_print_the_declaration():
    assert DOCS.read_text() == columns.markdown(), "regenerate: python -m dlvirt.analysis.columns > " + str(DOCS)


def test_an_undeclared_column_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "summary.csv"
    path.write_text("tool,app,bogus\nmlperf,ic,1\n")
    with pytest.raises(SummaryError, match=f"{path}: unknown summary column.*bogus"):
        read_summary(path)


def test_an_older_summary_with_fewer_columns_still_reads():
    frame = read_summary(FIXTURES / "summaries" / "partial.csv")
    assert not frame.empty and "site" not in frame


def test_bool_cells_read_as_truth_values_however_pandas_wrote_them(tmp_path):
    # A study's summary mixes Offline rows (loadgen_valid True/False) with model-only rows that leave
    # it empty; pandas may then write the column as 1.0/0.0. Read as text, "0.0" escaped every
    # `in ("false", "0")` check, so an invalid row counted as evidence.
    path = tmp_path / "summary.csv"
    path.write_text("tool,app,loadgen_valid,reference_model\nmlperf,ic,0.0,1.0\nmlperf,nlp,True,False\n"
                    "dlbs,ic,,\n")
    frame = read_summary(path)
    assert frame["loadgen_valid"].tolist()[:2] == [False, True]
    assert frame["reference_model"].tolist()[:2] == [True, False]
    assert frame["loadgen_valid"].isna().tolist() == [False, False, True]
    assert frame["loadgen_valid"].astype(str).str.lower().tolist()[:2] == ["false", "true"]


def test_a_bool_cell_that_is_no_truth_value_is_refused_naming_file_and_column(tmp_path):
    path = tmp_path / "summary.csv"
    path.write_text("tool,app,loadgen_valid\nmlperf,ic,maybe\n")
    with pytest.raises(SummaryError, match=f"{path}: column loadgen_valid: not a true/false value"):
        read_summary(path)
