"""RS model (DLRM): shapes and reference layout, inference per sample, checked weights, the weights
resource, and one real benchmark job on BM (the data: tests/unit/test_app_rs.py)."""

import math

import numpy as np
import pytest
import torch

from conftest import RS_SETTINGS, one_thread, resident_mappings, smoke_job
from dlvirt.apps.base import AppError, sha256_file, verified_weights
from dlvirt.apps.rs import KAGGLE_TABLE_ROWS, CriteoBatch, Recommendation, build_model, collate, table_rows
from dlvirt.apps.torch_runtime import module_tensors

THREADS = one_thread()


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


def test_infer_splits_ctrs_per_sample_and_model_only_batch(rs_dataset):
    app = Recommendation(RS_SETTINGS, rs_dataset, "CPU", THREADS)
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
    # what the run record says was applied: traced on the first batch (3 samples' lines), frozen,
    # and answering as the eager model on batches of other sizes
    assert provenance["optimisation"] == "torchscript-frozen" and provenance["optimisation_s"] > 0
    for other in (samples[:1], [batch]):
        inputs = collate(other)
        dense, sparse = torch.as_tensor(inputs.dense), torch.as_tensor(inputs.sparse)
        with torch.inference_mode():
            assert torch.allclose(app.runner(dense, sparse), app.model(dense, sparse), rtol=1e-5, atol=1e-6)


def test_checked_weights_load_and_mismatched_tables_are_refused(rs_dataset, tmp_path):
    torch.manual_seed(1)
    path = tmp_path / "dlrm.pt"
    torch.save({"state_dict": build_model(table_rows(1000)).state_dict()}, path)
    settings = {**RS_SETTINGS, "weights": {"path": str(path), "sha256": sha256_file(path)}}
    app = Recommendation(settings, rs_dataset, "CPU", THREADS)
    app.load_model()
    assert app.model_provenance()["weights"] == "loaded"
    with pytest.raises(AppError, match="max_rows_per_table"):
        Recommendation({**settings, "max_rows_per_table": 500}, rs_dataset, "CPU", THREADS).load_model()


def test_the_weights_resource_is_the_seeded_initialisation_loaded_as_it_was_saved(rs_dataset, tmp_path):
    path = tmp_path / Recommendation.weights_tag(RS_SETTINGS) / Recommendation.weights_file_name(RS_SETTINGS)
    digest = Recommendation.build_weights(RS_SETTINGS, rs_dataset, path)
    assert path.parent.name == "rows1000-seed0" and path.name == "model.pt"
    assert (tmp_path / "rows1000-seed0" / "model.pt.sha256").read_text().strip() == digest == sha256_file(path)
    built = Recommendation(RS_SETTINGS, rs_dataset, "CPU", THREADS)
    built.load_model()
    cached = Recommendation(RS_SETTINGS, rs_dataset, "CPU", THREADS, initial_weights=verified_weights(path))
    cached.load_model()
    # the model computes on the file's pages, every one of them mapped by the load: nothing left to fault in
    mapped = resident_mappings(path)
    assert mapped and all(rss == size for size, rss in mapped)
    saved, loaded = module_tensors(built.model), module_tensors(cached.model)
    assert saved.keys() == loaded.keys() and all(torch.equal(saved[k], loaded[k]) for k in saved)  # buffers too
    batch = built.synthetic_batch(2)
    assert [np.array_equal(a[0], b[0]) for a, b in zip(built.infer(batch), cached.infer(batch), strict=True)] == \
        [True, True]
    provenance = cached.model_provenance()
    assert provenance["weights"] == "random" and provenance["weights_sha256"] == digest
    assert provenance["weights_source"].startswith("seeded random initialisation, cached")
    # another model's weights, or a changed file, are refused naming the file
    other = {**RS_SETTINGS, "max_rows_per_table": 2000}
    with pytest.raises(AppError, match=r"weights resource .*model.pt: not this model's weights"):
        Recommendation(other, rs_dataset, "CPU", THREADS, initial_weights=verified_weights(path)).load_model()
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(AppError, match=r"model.pt: sha256 [0-9a-f]{64} != [0-9a-f]{64} in model.pt.sha256"):
        verified_weights(path)


@pytest.mark.slow
def test_smoke_benchmark_on_bm(smoke_study):
    config, result = smoke_job(smoke_study, "rs", "BM/1/VNL/CPU")
    assert result["verified"] and len(result["runs"]) == config["study"]["repetitions"]
    assert result["dataset"]["source"] == "synthetic" and result["model"]["weights"] == "random"
    assert result["model"]["config"]["max_rows_per_table"] == config["apps"]["rs"]["max_rows_per_table"]
    # the model was traced and frozen in the launch's first call (warm-up time), not in a repetition
    model, launch = result["model"], result["launch_s"]
    assert model["optimisation"] == "torchscript-frozen" and 0 < model["optimisation_s"] <= launch["first_call_s"]
    for run in result["runs"]:
        assert run["loadgen"]["validity"] == "VALID" and run["samples"] == config["apps"]["rs"]["dataset"]["count"]
        assert run["quality"]["rows_scored"] == result["dataset"]["lines"]
        assert 0 <= run["quality"]["accuracy"] <= 1 and not math.isnan(run["quality"]["roc_auc"])
        assert all(run["phases"][phase] > 0 for phase in ("pre_s", "infer_s", "post_s"))
        assert run["observed"]["quota_cores"] == pytest.approx(1.0)
