"""IC pre-processing on known inputs (MLPerf reference semantics) and the model's output shape."""

import numpy as np
import pytest
from PIL import Image

from dlvirt.apps.base import ThreadPlan
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
        ImageClassification.prepare_dataset(tmp_path / "out", {"dataset": {"path": str(tmp_path), "count": 3, "seed": 0}})


def test_resnet50_outputs_1000_class_probabilities(tmp_path):
    ImageClassification.prepare_dataset(tmp_path, {"dataset": {"path": None, "count": 2, "seed": 0}})
    settings = {"seed": 0, "dataset": {"path": None, "count": 2, "seed": 0}, "weights": {"path": None}}
    app = ImageClassification(settings, tmp_path, "CPU", ThreadPlan("granted", 1, 1, 1, 1))
    app.load_model()
    out = app.infer([app.preprocess(0), app.preprocess(1)])
    assert out.shape == (2, 1000)
    assert np.allclose(out.sum(axis=1), 1.0, atol=1e-3)
    assert app.model_provenance()["weights"] == "random"
    assert app.infer(app.synthetic_batch(3)).shape == (3, 1000)
