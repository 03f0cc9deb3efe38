"""IC data, without a model: pre-processing on known inputs (MLPerf reference semantics), the
synthetic dataset, and both backends' pre- and post-processing alike (the models:
tests/integration/test_app_ic_model.py)."""


import numpy as np
import pytest
from PIL import Image

from conftest import ic_app
from dlvirt.apps.ic import CHANNEL_MEANS, IMAGE_SIZE, ImageClassification, preprocess_image, read_val_map


def test_solid_colour_jpeg_becomes_colour_minus_means(tmp_path):
    path = tmp_path / "red.jpg"
    Image.new("RGB", (500, 375), (200, 40, 10)).save(path, quality=100)
    tensor = preprocess_image(path)
    assert tensor.shape == (IMAGE_SIZE, IMAGE_SIZE, 3) and tensor.dtype == np.float32
    expected = np.array([200, 40, 10], np.float32) - CHANNEL_MEANS
    assert np.abs(tensor.reshape(-1, 3).mean(axis=0) - expected).max() < 2.0


def test_aspect_preserving_resize_then_centre_crop(tmp_path):
    # Left half black, right half white, 2:1 landscape: after resize to 512x256 and a 224 centre crop
    # the crop spans columns 144..368 of the resized image, i.e. the black/white edge sits at 112.
    img = np.zeros((250, 500, 3), np.uint8)
    img[:, 250:] = 255
    path = tmp_path / "half.png"
    Image.fromarray(img).save(path)
    tensor = preprocess_image(path) + CHANNEL_MEANS
    row = tensor[IMAGE_SIZE // 2, :, 0]
    assert row[:100].max() < 5 and row[124:].min() > 250


def test_synthetic_dataset_is_real_jpegs_with_a_val_map(tmp_path):
    ImageClassification.prepare_dataset(tmp_path, {"dataset": {"path": None, "count": 3, "seed": 1}})
    entries = read_val_map(tmp_path)
    assert len(entries) == 3
    for name, label in entries:
        with Image.open(tmp_path / name) as img:
            assert img.format == "JPEG" and max(img.size) == 500 and min(img.size) >= 333
        assert 0 <= label < 1000


def test_real_dataset_without_val_map_is_refused_naming_the_key(tmp_path):
    with pytest.raises(Exception, match=r"apps.ic.dataset.path .*val_map.txt"):
        ImageClassification.prepare_dataset(tmp_path / "out",
                                            {"dataset": {"path": str(tmp_path), "count": 3, "seed": 0}})


def test_both_backends_preprocess_and_score_the_same_jpegs_alike(jpegs, tmp_path):
    keras, torch_ = ic_app(jpegs, "tensorflow"), ic_app(jpegs, "pytorch")
    inputs = {name: np.stack([app.preprocess(i) for i in range(3)]) for name, app in (("tf", keras), ("pt", torch_))}
    assert inputs["tf"].shape == (3, IMAGE_SIZE, IMAGE_SIZE, 3) and np.array_equal(inputs["tf"], inputs["pt"])
    probabilities = np.random.default_rng(1).dirichlet(np.ones(1000), size=3).astype(np.float32)
    labels = [label for _, label in read_val_map(jpegs)]
    probabilities[0, labels[0]] = 2.0            # top-1 hit for the first image
    lines, answers = {}, {}
    for name, app in (("tf", keras), ("pt", torch_)):
        app.begin_repetition(tmp_path / name)
        answers[name] = app.postprocess([0, 1, 2], probabilities)
        quality = app.end_repetition()
        lines[name] = (tmp_path / name / "predictions.txt").read_text().splitlines()
        assert quality["top1"] >= 1 / 3 and quality["scored"] == 3
    assert lines["tf"] == lines["pt"] and answers["tf"] == answers["pt"]
    top5 = [int(c) for c in lines["pt"][0].split()[1:]]
    assert top5[0] == labels[0] and top5 == list(np.argsort(-probabilities[0])[:5])


def test_unknown_framework_is_refused_naming_the_key(jpegs):
    with pytest.raises(Exception, match=r"apps.ic.framework 'mxnet'"):
        ic_app(jpegs, "mxnet")


def test_each_framework_is_a_model_backend_behind_one_interface():
    """IC keeps the dataset and pre/post-processing; each framework is a backend with the members of
    ``dlvirt.apps.backend.ModelBackend`` (checked here without importing a framework)."""
    from dlvirt.apps.backend import ModelBackend
    from dlvirt.apps.ic import BACKENDS

    members = [name for name in vars(ModelBackend) if not name.startswith("_")] + ["__call__", "__init__"]
    members += list(ModelBackend.__annotations__)
    for framework, cls in BACKENDS.items():
        assert cls.framework == framework and cls.weights_file and cls.architecture
        assert all(hasattr(cls, name) for name in members), framework
