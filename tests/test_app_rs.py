"""RS app (DLRM): Criteo TSV parsing with missing fields, sample grouping, model shapes,
post-processing on known inputs, checked weights, and one real benchmark job on BM."""

import json
import math

import numpy as np
import pytest
import torch
from conftest import run_one_job

from dlvirt.apps.base import AppError, ThreadPlan, sha256_file, verified_weights
from dlvirt.apps.rs import (
    DATA_FILE,
    KAGGLE_TABLE_ROWS,
    CriteoBatch,
    Recommendation,
    build_model,
    line_offsets,
    lines_per_sample,
    parse_hex,
    parse_lines,
    roc_auc,
    table_rows,
)
from dlvirt.apps.torch_runtime import module_tensors

THREADS = ThreadPlan(policy="granted", cores=1, intra_op=1, inter_op=1, pre_workers=1)
DATASET = {"path": None, "count": 6, "seed": 5, "lines_per_sample": {"min": 3, "max": 9}}
SETTINGS = {"dataset": DATASET, "seed": 0, "max_rows_per_table": 1000, "threshold": 0.5}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("rs-dataset")
    Recommendation.prepare_dataset(out, {"dataset": DATASET})
    return out


def test_a_criteo_line_with_missing_fields_parses_to_the_right_tensors():
    dense = ["", "5", "-3", "0", "", "1", "", "", "", "", "", "", "99"]
    sparse = ["68fd1e64", "", "0000000a", "ABCDEF12"] + [""] * 21 + ["1"]
    line = "\t".join(["1", *dense, *sparse]) + "\n"
    line += "\t".join(["0"] + [""] * 13 + [""] * 26) + "\n"
    labels, dense_out, sparse_out = parse_lines(line.encode())
    assert labels.tolist() == [1, 0] and dense_out.dtype == np.float32 and sparse_out.dtype == np.int64
    assert dense_out.shape == (2, 13) and sparse_out.shape == (2, 26)
    # missing → 0, negative → 0, then log(1 + x)
    expected = [0, 5, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 99]
    assert np.allclose(dense_out[0], np.log1p(expected)) and (dense_out[1] == 0).all()
    assert sparse_out[0, :4].tolist() == [0x68FD1E64, 0, 10, 0xABCDEF12] and sparse_out[0, 25] == 1
    assert (sparse_out[0, 4:25] == 0).all() and (sparse_out[1] == 0).all()


def test_malformed_lines_are_refused_naming_where():
    with pytest.raises(AppError, match="train.txt.*40 tab-separated fields"):
        parse_lines(b"1\t2\t3\n", "train.txt")
    with pytest.raises(AppError, match="not hexadecimal"):
        parse_hex(np.array([["12zz"]]))
    with pytest.raises(AppError, match="more than 8 hex digits"):
        parse_hex(np.array([["123456789"]]))
    bad_int = "\t".join(["1", "x"] + [""] * 12 + [""] * 26)
    with pytest.raises(AppError, match="not an integer"):
        parse_lines(bad_int.encode())


def test_the_byte_parser_gives_what_the_checked_parser_gives_and_leaves_it_the_rest():
    """parse_lines parses well-formed lines over their bytes (array operations, the GIL released)
    and anything else by Python's string parsing; both give the same arrays."""
    from dlvirt.apps.rs import parse_bytes, parse_lines_checked, synthetic_lines

    def same(text: bytes) -> None:
        got, want = parse_lines(text), parse_lines_checked(text)
        assert all(g.dtype == w.dtype and np.array_equal(g, w) for g, w in zip(got, want, strict=True))

    generated = synthetic_lines(np.random.default_rng(3), 3000)
    assert parse_bytes(generated) is not None
    same(generated)
    same(generated.rstrip(b"\n"))  # a last line without its newline
    odd = ["007", "-0", "-12", "9" * 18, "0"]
    line = "\t".join(["1", *odd, *[""] * 8, "0", "00000000", "fFfF", *[""] * 23]) + "\n"
    assert parse_bytes(line.encode()) is not None
    same(line.encode())
    # what Python's int() takes but the byte parser leaves to it: a sign, spaces, 19 digits, CRLF
    for value in ("+5", " 5", "1" + "0" * 18):
        other = line.replace("007", value, 1).encode()
        assert parse_bytes(other) is None
        same(other)
    with pytest.raises(AppError, match="not an integer"):  # beyond int64
        parse_lines(line.replace("007", "9" * 19, 1).encode())
    assert parse_bytes(line.replace("\n", "\r\n").encode()) is None
    same(line.replace("\n", "\r\n").encode())
    for bad in (b"", b"1\t2\n", line.replace("fFfF", "fFfG").encode(), line.replace("007", "-", 1).encode()):
        assert parse_bytes(bad) is None


def test_samples_group_consecutive_lines(tmp_path):
    sizes = lines_per_sample(DATASET)
    assert len(sizes) == 6 and sizes.min() >= 3 and sizes.max() <= 9
    assert (sizes == lines_per_sample(DATASET)).all()
    with pytest.raises(AppError, match="lines_per_sample: min 9 > max 3"):
        lines_per_sample({**DATASET, "lines_per_sample": {"min": 9, "max": 3}})
    path = tmp_path / "lines.txt"
    path.write_bytes(b"a\nbb\nccc\n")
    assert line_offsets(path, 2).tolist() == [0, 2, 5]
    assert line_offsets(path, 10).tolist() == [0, 2, 5, 9]


def test_model_output_shapes_and_reference_layout():
    rows = table_rows(1000)
    assert rows[:3] == (1000, 583, 1000) and table_rows(None) == KAGGLE_TABLE_ROWS
    torch.manual_seed(0)
    model = build_model(rows)
    assert model.top_l[0].in_features == 16 + 27 * 26 // 2  # dot interaction without self-pairs
    assert [m.out_features for m in model.bot_l if isinstance(m, torch.nn.Linear)] == [512, 256, 64, 16]
    assert len(model.emb_l) == 26 and model.emb_l[5].weight.shape == (24, 16)
    indices = torch.stack([torch.randint(0, n, (5,)) for n in rows], dim=1)
    with torch.inference_mode():
        ctr = model(torch.rand(5, 13), indices)
    assert ctr.shape == (5,) and ((ctr > 0) & (ctr < 1)).all()


def test_roc_auc_on_known_scores():
    assert roc_auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8])) == 0.75
    assert roc_auc(np.array([0, 1]), np.array([0.5, 0.5])) == 0.5
    assert roc_auc(np.array([1, 1]), np.array([0.2, 0.3])) is None


def test_synthetic_dataset_preprocesses_and_postprocesses_known_ctrs(dataset, tmp_path):
    info = json.loads((dataset / "dataset.json").read_text())
    assert info["source"] == "synthetic" and info["lines"] == int(lines_per_sample(DATASET).sum())
    first = (dataset / DATA_FILE).read_text().splitlines()[0].split("\t")
    assert len(first) == 40 and first[0] in ("0", "1")
    app = Recommendation(SETTINGS, dataset, "CPU", THREADS)
    assert app.sample_count() == 6
    sample = app.preprocess(1)
    assert sample.dense.shape == (lines_per_sample(DATASET)[1], 13) and sample.lines == (len(sample.dense),)
    assert (sample.sparse < np.array(app.table_sizes)).all()  # hashed into each table

    app.begin_repetition(tmp_path)
    outputs = [(np.array([0.9, 0.2, 0.6]), np.array([1, 0, 0], dtype=np.int8)),
               (np.array([0.1]), np.array([1], dtype=np.int8))]
    answers = app.postprocess([0, 1], outputs)
    quality = app.end_repetition()
    assert np.frombuffer(answers[0], dtype=np.float32).tolist() == pytest.approx([0.9, 0.2, 0.6])
    assert quality["accuracy"] == 0.5 and quality["rows_scored"] == 4 and quality["samples_scored"] == 2
    assert quality["roc_auc"] == 0.5  # positives 0.9, 0.1 vs negatives 0.2, 0.6: 2 of 4 pairs ordered
    assert (tmp_path / "predictions.tsv").read_text().splitlines()[0] == "0\t2\t0.900000,0.200000,0.600000"


def test_infer_splits_ctrs_per_sample_and_model_only_batch(dataset):
    app = Recommendation(SETTINGS, dataset, "CPU", THREADS)
    app.load_model()
    samples = [app.preprocess(i) for i in range(3)]
    outputs = app.infer(samples)
    assert [len(ctr) for ctr, _ in outputs] == [len(s.dense) for s in samples]
    assert [labels.tolist() for _, labels in outputs] == [s.labels.tolist() for s in samples]
    batch = app.synthetic_batch(2)
    assert isinstance(batch, CriteoBatch) and batch.lines == (6, 6)
    assert [len(ctr) for ctr, _ in app.infer(batch)] == [6, 6]
    provenance = app.model_provenance()
    assert provenance["weights"] == "random" and provenance["config"]["kaggle_table_sizes"] is False
    assert provenance["config"]["max_rows_per_table"] == 1000


def test_real_dataset_path_is_checked(dataset, tmp_path):
    facts = Recommendation.check_real_dataset(dataset / DATA_FILE, {"dataset": DATASET})
    assert facts["lines"] == int(lines_per_sample(DATASET).sum()) and facts["count"] == 6
    # a file holding fewer lines than asked for gives fewer (whole) samples
    sizes = lines_per_sample(DATASET)
    short = tmp_path / "short.txt"
    short.write_text("".join((dataset / DATA_FILE).read_text().splitlines(keepends=True)[: sizes[0] + sizes[1] + 1]))
    assert Recommendation.check_real_dataset(short, {"dataset": DATASET})["count"] == 2
    assert Recommendation.check_real_dataset(dataset, {"dataset": DATASET})["file"] == str(dataset / DATA_FILE)
    with pytest.raises(AppError, match="apps.rs.dataset.path .*no Criteo TSV"):
        Recommendation.check_real_dataset(tmp_path, {"dataset": DATASET})


def test_checked_weights_load_and_mismatched_tables_are_refused(dataset, tmp_path):
    torch.manual_seed(1)
    path = tmp_path / "dlrm.pt"
    torch.save({"state_dict": build_model(table_rows(1000)).state_dict()}, path)
    settings = {**SETTINGS, "weights": {"path": str(path), "sha256": sha256_file(path)}}
    app = Recommendation(settings, dataset, "CPU", THREADS)
    app.load_model()
    assert app.model_provenance()["weights"] == "loaded"
    with pytest.raises(AppError, match="max_rows_per_table"):
        Recommendation({**settings, "max_rows_per_table": 500}, dataset, "CPU", THREADS).load_model()


def test_the_weights_resource_is_the_seeded_initialisation_loaded_as_it_was_saved(dataset, tmp_path):
    path = tmp_path / Recommendation.weights_tag(SETTINGS) / Recommendation.weights_file_name(SETTINGS)
    digest = Recommendation.build_weights(SETTINGS, dataset, path)
    assert path.parent.name == "rows1000-seed0" and path.name == "model.pt"
    assert (tmp_path / "rows1000-seed0" / "model.pt.sha256").read_text().strip() == digest == sha256_file(path)
    built = Recommendation(SETTINGS, dataset, "CPU", THREADS)
    built.load_model()
    cached = Recommendation(SETTINGS, dataset, "CPU", THREADS, initial_weights=verified_weights(path))
    cached.load_model()
    saved, loaded = module_tensors(built.model), module_tensors(cached.model)
    assert saved.keys() == loaded.keys() and all(torch.equal(saved[k], loaded[k]) for k in saved)  # buffers too
    batch = built.synthetic_batch(2)
    assert [np.array_equal(a[0], b[0]) for a, b in zip(built.infer(batch), cached.infer(batch), strict=True)] == \
        [True, True]
    provenance = cached.model_provenance()
    assert provenance["weights"] == "random" and provenance["weights_sha256"] == digest
    assert provenance["weights_source"].startswith("seeded random initialisation, cached")
    # another model's weights, or a changed file, are refused naming the file
    other = {**SETTINGS, "max_rows_per_table": 2000}
    with pytest.raises(AppError, match=r"weights resource .*model.pt: not this model's weights"):
        Recommendation(other, dataset, "CPU", THREADS, initial_weights=verified_weights(path)).load_model()
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(AppError, match=r"model.pt: sha256 [0-9a-f]{64} != [0-9a-f]{64} in model.pt.sha256"):
        verified_weights(path)


@pytest.mark.slow
def test_smoke_benchmark_on_bm(workflow_dir):
    config, result = run_one_job(workflow_dir, "rs", "BM/1/VNL/CPU")
    assert result["verified"] and len(result["runs"]) == config["study"]["repetitions"]
    assert result["dataset"]["source"] == "synthetic" and result["model"]["weights"] == "random"
    assert result["model"]["config"]["max_rows_per_table"] == config["apps"]["rs"]["max_rows_per_table"]
    for run in result["runs"]:
        assert run["loadgen"]["validity"] == "VALID" and run["samples"] == config["apps"]["rs"]["dataset"]["count"]
        assert run["quality"]["rows_scored"] == result["dataset"]["lines"]
        assert 0 <= run["quality"]["accuracy"] <= 1 and not math.isnan(run["quality"]["roc_auc"])
        assert all(run["phases"][phase] > 0 for phase in ("pre_s", "infer_s", "post_s"))
        assert run["observed"]["quota_cores"] == pytest.approx(1.0)
