"""The noop app (dlvirt.apps.noop), the null app of the plumbing tests: its dataset is a real CSV
file, its model a NumPy linear classifier, and it keeps the app contract every real app keeps
(phases, weights resource, thread plan, real-dataset checks) at a millisecond a batch."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from conftest import NOOP_SETTINGS, one_thread
from dlvirt.apps import KINDS, app_class
from dlvirt.apps.base import AppError, ThreadPlan, verified_weights
from dlvirt.apps.noop import CLASSES, SAMPLES, NoopApp, read_samples


def test_the_dataset_is_a_csv_of_labelled_feature_vectors(noop_dataset):
    lines = (noop_dataset / SAMPLES).read_text().splitlines()
    assert lines[0] == "label," + ",".join(f"f{i}" for i in range(16)) and len(lines) == 33
    label, *features = lines[1].split(",")
    assert 0 <= int(label) < CLASSES and len(features) == 16
    info = json.loads((noop_dataset / "dataset.json").read_text())
    assert info["source"] == "synthetic" and info["count"] == 32 and info["format"] == "CSV"
    labels, offsets = read_samples(noop_dataset / SAMPLES)
    assert len(labels) == len(offsets) == 32 and offsets[0] == len(lines[0]) + 1


def test_it_is_registered_as_a_check_that_no_study_runs_unasked():
    assert app_class("noop") is NoopApp and KINDS["noop"].check
    assert not any(kind.check for name, kind in KINDS.items() if name != "noop")


def test_phases_score_known_outputs(noop_dataset, tmp_path):
    app = NoopApp(NOOP_SETTINGS, noop_dataset, "CPU", one_thread())
    app.load_model()
    assert app.sample_count() == 32
    items = [app.preprocess(i) for i in range(4)]
    assert all(item.shape == (16,) and item.dtype == np.float32 for item in items)
    probabilities = app.infer(items)
    assert probabilities.shape == (4, CLASSES) and np.allclose(probabilities.sum(axis=1), 1, atol=1e-5)
    assert app.infer(app.synthetic_batch(3)).shape == (3, CLASSES)
    app.begin_repetition(tmp_path)
    right = np.eye(CLASSES)[app.labels[:2]]
    wrong = np.eye(CLASSES)[(app.labels[2:4] + 1) % CLASSES]
    answers = app.postprocess([0, 1, 2, 3], np.concatenate([right, wrong]))
    assert [int(np.frombuffer(a, dtype=np.int32)[0]) for a in answers[:2]] == app.labels[:2].tolist()
    assert app.end_repetition() == {"top1": 0.5, "scored": 4}
    assert len((tmp_path / "predictions.txt").read_text().splitlines()) == 4


def test_the_weights_resource_loads_as_it_was_saved(noop_dataset, tmp_path):
    path = tmp_path / NoopApp.weights_tag(NOOP_SETTINGS) / NoopApp.weights_file_name(NOOP_SETTINGS)
    digest = NoopApp.build_weights(NOOP_SETTINGS, noop_dataset, path)
    assert path.name == "model.npz" and verified_weights(path)["sha256"] == digest
    built = NoopApp(NOOP_SETTINGS, noop_dataset, "CPU", one_thread())
    built.load_model()
    cached = NoopApp(NOOP_SETTINGS, noop_dataset, "CPU", one_thread(), initial_weights=verified_weights(path))
    cached.load_model()
    batch = built.synthetic_batch(4)
    assert np.array_equal(built.infer(batch), cached.infer(batch))
    assert cached.model_provenance()["weights_sha256"] == digest
    other = {**NOOP_SETTINGS, "dataset": {**NOOP_SETTINGS["dataset"], "features": 8}}
    NoopApp.prepare_dataset(tmp_path / "narrow", other)
    with pytest.raises(AppError, match=r"needs W \(8, 10\)"):
        NoopApp(other, tmp_path / "narrow", "CPU", one_thread(), initial_weights=verified_weights(path)).load_model()


def test_a_weights_check_hashes_once_per_file(noop_dataset, tmp_path):
    path = tmp_path / NoopApp.weights_file_name(NOOP_SETTINGS)
    digest = NoopApp.build_weights(NOOP_SETTINGS, noop_dataset, path)
    assert verified_weights(path) == {"path": str(path), "sha256": digest, "check": "hashed"}
    again = verified_weights(path)
    assert again["sha256"] == digest and again["check"].startswith("unchanged since hashed at ")
    # the same bytes in a new file (a rebuild) are hashed again; other bytes fail, whatever the record says
    time.sleep(0.05)  # ctime comes from the kernel's coarse clock
    path.write_bytes(path.read_bytes())
    assert verified_weights(path)["check"] == "hashed"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    time.sleep(0.05)
    path.write_bytes(bytes(data))
    with pytest.raises(AppError, match="rebuild it"):
        verified_weights(path)


def test_a_granted_plan_of_two_cores_runs_two_slices_of_a_batch(noop_dataset):
    plan = ThreadPlan(policy="granted", cores=2, intra_op=2, inter_op=1, pre_workers=2, overlap=False,
                      sharing="alternate")
    app = NoopApp(NOOP_SETTINGS, noop_dataset, "CPU", plan)
    app.load_model()
    single = NoopApp(NOOP_SETTINGS, noop_dataset, "CPU", one_thread())
    single.load_model()
    batch = app.synthetic_batch(8)
    assert np.allclose(app.infer(batch), single.infer(batch))
    assert app.framework_threads()["intra_op"] == 2 and app.framework_threads()["inter_op"] == 1


def test_a_real_dataset_is_checked_naming_the_line(noop_dataset, tmp_path):
    good = tmp_path / "good.csv"
    good.write_text((noop_dataset / SAMPLES).read_text())
    out = tmp_path / "registered"
    NoopApp.prepare_dataset(out, {"dataset": {"path": str(good), "count": 5, "seed": 0}})
    info = json.loads((out / "dataset.json").read_text())
    assert info["source"] == "real" and info["count"] == 32
    assert NoopApp({**NOOP_SETTINGS, "dataset": {"count": 5}}, out, "CPU", one_thread()).sample_count() == 5
    bad = tmp_path / "bad.csv"
    bad.write_text("label,f0,f1\n1,0.5,0.25\n2,0.5\n")
    with pytest.raises(AppError, match=r"bad.csv:3: 2 fields, the header has 3"):
        NoopApp.prepare_dataset(tmp_path / "x", {"dataset": {"path": str(bad), "count": 1, "seed": 0}})
    header = tmp_path / "header.csv"
    header.write_text("y,a,b\n1,2,3\n")
    with pytest.raises(AppError, match="not a samples CSV"):
        NoopApp.prepare_dataset(tmp_path / "y", {"dataset": {"path": str(header), "count": 1, "seed": 0}})
