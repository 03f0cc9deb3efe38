"""RS data (DLRM), without a model: Criteo TSV parsing with missing fields, sample grouping,
pre- and post-processing on known inputs, the real dataset's checks (the model:
tests/integration/test_app_rs_model.py)."""

import json
import math

import numpy as np
import pytest

from conftest import RS_DATASET, RS_SETTINGS, one_thread
from dlvirt.apps.base import AppError
from dlvirt.apps.rs import (
    DATA_FILE,
    KAGGLE_TABLE_ROWS,
    Recommendation,
    average_ranks,
    line_offsets,
    lines_per_sample,
    parse_hex,
    parse_lines,
    roc_auc,
    sample_spans,
    table_modulus,
)

THREADS = one_thread()
UNHASHED = table_modulus((2**32 - 1,) * 26)  # every 8-digit hex value but ffffffff is its own remainder
KAGGLE = table_modulus(KAGGLE_TABLE_ROWS)


def test_a_criteo_line_with_missing_fields_parses_to_the_right_tensors():
    dense = ["", "5", "-3", "0", "", "1", "", "", "", "", "", "", "99"]
    sparse = ["68fd1e64", "", "0000000a", "ABCDEF12"] + [""] * 21 + ["1"]
    line = "\t".join(["1", *dense, *sparse]) + "\n"
    line += "\t".join(["0"] + [""] * 13 + [""] * 26) + "\n"
    labels, dense_out, sparse_out = parse_lines(line.encode(), UNHASHED)
    assert labels.tolist() == [1, 0] and dense_out.dtype == np.float32 and sparse_out.dtype == np.int64
    assert dense_out.shape == (2, 13) and sparse_out.shape == (2, 26)
    # missing → 0, negative → 0, then log(1 + x)
    expected = [0, 5, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 99]
    assert np.allclose(dense_out[0], np.log1p(expected)) and (dense_out[1] == 0).all()
    assert sparse_out[0, :4].tolist() == [0x68FD1E64, 0, 10, 0xABCDEF12] and sparse_out[0, 25] == 1
    assert (sparse_out[0, 4:25] == 0).all() and (sparse_out[1] == 0).all()
    # hashed into each table by modulo its rows
    assert parse_lines(line.encode(), KAGGLE)[2][0, :4].tolist() == [0x68FD1E64 % 1460, 0, 10, 0xABCDEF12 % 2202608]


def test_malformed_lines_are_refused_naming_where():
    with pytest.raises(AppError, match="train.txt.*40 tab-separated fields"):
        parse_lines(b"1\t2\t3\n", KAGGLE, "train.txt")
    with pytest.raises(AppError, match="not hexadecimal"):
        parse_hex(np.array([["12zz"]]))
    with pytest.raises(AppError, match="more than 8 hex digits"):
        parse_hex(np.array([["123456789"]]))
    bad_int = "\t".join(["1", "x"] + [""] * 12 + [""] * 26)
    with pytest.raises(AppError, match="not an integer"):
        parse_lines(bad_int.encode(), KAGGLE)


def test_the_compiled_parser_gives_what_the_checked_parser_gives_and_leaves_it_the_rest():
    """parse_lines parses well-formed lines in one compiled pass over their bytes and anything
    else by Python's string parsing; both give the same arrays."""
    from dlvirt.apps.rs import parse_bytes, parse_lines_checked, synthetic_lines

    # divisors from 1 to 2^32 - 1, and the tables' own
    moduli = (KAGGLE, UNHASHED, table_modulus(tuple(range(1, 27))),
              table_modulus(tuple(np.random.default_rng(5).integers(1, 2**32, 26))))

    def same(text: bytes, modulus: np.ndarray = KAGGLE) -> None:
        got, (labels, dense, sparse) = parse_lines(text, modulus), parse_lines_checked(text)
        want = labels, dense, sparse % modulus
        assert all(g.dtype == w.dtype and np.array_equal(g, w) for g, w in zip(got, want, strict=True))

    generated = synthetic_lines(np.random.default_rng(3), 3000)
    for modulus in moduli:
        assert parse_bytes(generated, modulus) is not None
        same(generated, modulus)
    same(generated.rstrip(b"\n"))  # a last line without its newline
    # the caller may say how many lines there are; a wrong count leaves the text to the checked path
    assert parse_bytes(generated, KAGGLE, 3000) is not None
    assert parse_bytes(generated, KAGGLE, 2999) is None and parse_bytes(generated, KAGGLE, 3001) is None
    odd = ["007", "-0", "-12", "9" * 18, "0", "12345678", "-123456789", "1" + "0" * 16, "9" * 17]
    line = "\t".join(["1", *odd, *[""] * 4, "0", "00000000", "fFfF", *[""] * 23]) + "\n"
    assert parse_bytes(line.encode(), KAGGLE) is not None
    for modulus in moduli:
        same(line.encode(), modulus)
        same(line.replace("\t00000000\tfFfF\t", "\tFFFFFFFE\tffffffff\t").encode(), modulus)
    for label in ("0", "-1", "127", "128", "255", "300", "-129"):  # as astype(int8): the low byte
        same(line.replace("1", label, 1).encode())
    # what Python's int() takes but the compiled parser leaves to it: a sign, spaces, 19 digits, CRLF
    for value in ("+5", " 5", "1" + "0" * 18):
        other = line.replace("007", value, 1).encode()
        assert parse_bytes(other, KAGGLE) is None
        same(other)
    with pytest.raises(AppError, match="not an integer"):  # beyond int64
        parse_lines(line.replace("007", "9" * 19, 1).encode(), KAGGLE)
    assert parse_bytes(line.replace("\n", "\r\n").encode(), KAGGLE) is None
    same(line.replace("\n", "\r\n").encode())
    for bad in (b"", b"\n", b"1\t2\n", line.replace("fFfF", "fFfG").encode(), line.replace("007", "-", 1).encode(),
                line.replace("007", "\x005", 1).encode(), line.replace("007", "5a", 1).encode(),
                line.replace("fFfF", "123456789").encode(), line.replace("fFfF", "-1").encode(),
                (line + line).replace("\n", "\t", 1).encode(), line.replace("\n", "\t\n").encode(),
                (line + "\n").encode(), line.encode() + line.encode()[:-40]):
        assert parse_bytes(bad, KAGGLE) is None
    assert parse_bytes(line.replace("fFfF", "fFfFfFfF").encode(), KAGGLE) is not None
    several = (line * 3).encode()
    assert parse_bytes(several, KAGGLE) is not None and parse_bytes(several.rstrip(b"\n"), KAGGLE) is not None
    same(several.rstrip(b"\n"))


def test_the_compiled_parser_checks_its_buffers_and_says_how_to_build_it(monkeypatch):
    from dlvirt.apps import _criteo, rs

    line = ("\t".join(["1"] + [""] * 39) + "\n").encode()
    labels, dense, sparse = np.empty(1, np.int8), np.empty((1, 13), np.float32), np.empty((1, 26), np.int64)
    assert _criteo.parse(line, labels, dense, sparse, KAGGLE)
    with pytest.raises(ValueError, match="rows int8, dense rows x 13 float32"):
        _criteo.parse(line, np.empty(2, np.int8), dense, sparse, KAGGLE)
    with pytest.raises(TypeError, match="read-write"):  # buffers to fill, not to read
        _criteo.parse(line, b"\0", dense, sparse, KAGGLE)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bytes"):  # its sentinel: the NUL after a bytes object's data
        _criteo.parse(bytearray(line), labels, dense, sparse, KAGGLE)  # type: ignore[arg-type]
    for modulus in (KAGGLE[:25], table_modulus((0,) * 26), table_modulus((2**32,) * 26)):
        with pytest.raises(ValueError, match="modulus must hold 26 int64 in 1..2"):
            _criteo.parse(line, labels, dense, sparse, modulus)
    with pytest.raises(ValueError, match="float32"):
        _criteo.format_ctrs(b"\0" * 6)  # type: ignore[arg-type]
    assert rs._CRITEO_PROBLEM == ""  # this checkout's build is newer than its source
    for problem in ("not built", "_criteo.so is older than _criteo.c"):
        monkeypatch.setattr(rs, "_CRITEO_PROBLEM", problem)
        with pytest.raises(AppError, match=rf"cannot be used \({problem}\): \./setup\.sh install"):
            parse_lines(line, KAGGLE)
        with pytest.raises(AppError, match=rf"cannot be used \({problem}\)"):
            rs.format_ctrs(np.zeros(2, np.float32))


def test_ctrs_are_written_as_python_formats_them():
    from dlvirt.apps.rs import format_ctrs

    rng = np.random.default_rng(4)
    edges = [0, 1, 0.5, 1 / 128, 5e-7, 1.5e-6, 0.9999995, 2.5e-6, np.nextafter(np.float32(1), np.float32(0))]
    every = rng.random(100_000).astype(np.float32)
    for ctr in (every, every[::3], np.array(edges, dtype=np.float32), np.array([0.5], dtype=np.float32),
                (np.arange(0, 2**24, 97) / 2**24).astype(np.float32),
                np.array([0.25, np.nan, 0.5], dtype=np.float32), np.array([0.25, 1.5], dtype=np.float32),
                np.array([-0.0, -1e-9], dtype=np.float32), np.zeros(0, dtype=np.float32),
                np.array([0.0000125, 0.3], dtype=np.float64)):
        assert format_ctrs(ctr) == ",".join(f"{p:.6f}" for p in ctr.tolist())


def test_samples_group_consecutive_lines(tmp_path):
    sizes = lines_per_sample(RS_DATASET)
    assert len(sizes) == 6 and sizes.min() >= 3 and sizes.max() <= 9
    assert (sizes == lines_per_sample(RS_DATASET)).all()
    with pytest.raises(AppError, match="lines_per_sample: min 9 > max 3"):
        lines_per_sample({**RS_DATASET, "lines_per_sample": {"min": 9, "max": 3}})
    path = tmp_path / "lines.txt"
    path.write_bytes(b"a\nbb\nccc\n")
    assert line_offsets(path, 2).tolist() == [0, 2, 5]
    assert line_offsets(path, 10).tolist() == [0, 2, 5, 9]


def test_roc_auc_on_known_scores():
    assert roc_auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8])) == 0.75
    assert roc_auc(np.array([0, 1]), np.array([0.5, 0.5])) == 0.5
    assert roc_auc(np.array([1, 1]), np.array([0.2, 0.3])) is None


def test_average_ranks_are_scipys_tied_ranks():
    from scipy.stats import rankdata

    rng = np.random.default_rng(4)
    for size in (1, 2, 7, 500):
        scores = rng.integers(0, 5, size).astype(np.float32) / 4  # many ties
        assert np.array_equal(average_ranks(scores), rankdata(scores))
    scores = np.repeat(np.array([0.3, 0.1, 0.7], dtype=np.float32), [3, 2, 4])
    assert average_ranks(scores).tolist() == [4.0] * 3 + [1.5] * 2 + [7.5] * 4
    # a NaN score (a broken model) makes every rank NaN, as rankdata does, and so the AUC
    broken = np.array([0.2, np.nan, 0.9], dtype=np.float32)
    assert np.isnan(rankdata(broken)).all() and np.isnan(average_ranks(broken)).all()
    assert math.isnan(roc_auc(np.array([0, 1, 1]), broken))


def test_synthetic_dataset_preprocesses_and_postprocesses_known_ctrs(rs_dataset, tmp_path):
    info = json.loads((rs_dataset / "dataset.json").read_text())
    assert info["source"] == "synthetic" and info["lines"] == int(lines_per_sample(RS_DATASET).sum())
    first = (rs_dataset / DATA_FILE).read_text().splitlines()[0].split("\t")
    assert len(first) == 40 and first[0] in ("0", "1")
    app = Recommendation(RS_SETTINGS, rs_dataset, "CPU", THREADS)
    assert app.sample_count() == 6
    sample = app.preprocess(1)
    assert sample.dense.shape == (lines_per_sample(RS_DATASET)[1], 13) and sample.lines == (len(sample.dense),)
    assert (sample.sparse < np.array(app.table_sizes)).all()  # hashed into each table

    app.begin_repetition(tmp_path)
    outputs = [(np.array([0.9, 0.2, 0.6]), np.array([1, 0, 0], dtype=np.int8)),
               (np.array([0.1]), np.array([1], dtype=np.int8))]
    answers = app.postprocess([0, 1], outputs)
    quality = app.end_repetition()
    assert np.frombuffer(answers[0], dtype=np.float32).tolist() == pytest.approx([0.9, 0.2, 0.6])
    assert quality["accuracy"] == 0.5 and quality["rows_scored"] == 4 and quality["samples_scored"] == 2
    assert quality["roc_auc"] == 0.5  # positives 0.9, 0.1 vs negatives 0.2, 0.6: 2 of 4 pairs ordered
    assert quality["samples_parsed_checked"] == 0  # generated lines are well-formed
    assert (tmp_path / "predictions.tsv").read_text().splitlines()[0] == "0\t2\t0.900000,0.200000,0.600000"


def test_real_dataset_path_is_checked(rs_dataset, tmp_path):
    facts = Recommendation.check_real_dataset(rs_dataset / DATA_FILE, {"dataset": RS_DATASET})
    assert facts["lines"] == int(lines_per_sample(RS_DATASET).sum()) and facts["count"] == 6
    # a file holding fewer lines than asked for gives fewer (whole) samples
    sizes = lines_per_sample(RS_DATASET)
    short = tmp_path / "short.txt"
    short.write_text("".join((rs_dataset / DATA_FILE).read_text().splitlines(keepends=True)[: sizes[0] + sizes[1] + 1]))
    assert Recommendation.check_real_dataset(short, {"dataset": RS_DATASET})["count"] == 2
    assert Recommendation.check_real_dataset(rs_dataset, {"dataset": RS_DATASET})["file"] == str(rs_dataset / DATA_FILE)
    with pytest.raises(AppError, match="apps.rs.dataset.path .*no Criteo TSV"):
        Recommendation.check_real_dataset(tmp_path, {"dataset": RS_DATASET})


def test_a_repetition_counts_the_samples_the_checked_parser_took(rs_dataset, tmp_path):
    """A sample that is not well-formed (here a '+' sign Python's int() takes) is parsed by the
    slower checked path: the repetition's quality says how many, so its pre-processing time is read
    for what it holds."""
    data = tmp_path / DATA_FILE
    lines = (rs_dataset / DATA_FILE).read_bytes().splitlines(keepends=True)
    fields = lines[0].split(b"\t")
    fields[1] = b"+" + fields[1] if fields[1] else b"+5"
    data.write_bytes(b"\t".join(fields) + b"".join(lines[1:]))
    app = Recommendation(RS_SETTINGS, rs_dataset, "CPU", THREADS)
    app.path, app.spans = data, sample_spans(data, RS_DATASET)
    app.begin_repetition(tmp_path)
    first, second = app.preprocess(0), app.preprocess(1)
    assert len(first.labels) == first.lines[0] and len(second.labels) == second.lines[0]
    assert app.end_repetition()["samples_parsed_checked"] == 1
