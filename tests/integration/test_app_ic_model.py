"""IC models: ResNet50's output shape in both backends (TensorFlow, PyTorch), their weights, the GPU
guard, and real BM smoke jobs under LoadGen and DLBS (the data: tests/unit/test_app_ic.py)."""

import json

import numpy as np
import pytest

from conftest import ic_app, smoke_config, snakemake, write_config
from dlvirt.apps.base import ThreadPlan, verified_weights
from dlvirt.apps.ic import ImageClassification
from dlvirt.run.tools import dlbs


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


def test_the_frozen_graph_answers_as_the_model_over_its_variables(jpegs):
    import tensorflow as tf

    app = ic_app(jpegs, "tensorflow")
    app.load_model()
    app.first_call()
    batch = np.stack([app.preprocess(i) for i in range(3)])
    frozen = app.infer(batch)
    over_variables = app.backend.forward(tf.constant(batch)).numpy()
    # the same model up to float32 rounding: batch-norm folded into the convolutions reorders sums
    assert np.allclose(frozen, over_variables, rtol=1e-4, atol=1e-6)
    assert np.array_equal(np.argsort(-frozen)[:, :5], np.argsort(-over_variables)[:, :5])
    provenance = app.model_provenance()
    assert provenance["optimisation"] == "frozen-graph" and provenance["optimisation_s"] > 0
    assert {node.device for node in app.backend.session.graph_def.node} == {"/device:CPU:0"}  # not a GPU it sees
    assert ic_app(jpegs, "pytorch").model_provenance()["framework"] == "pytorch"  # not loaded: nothing applied yet


def test_pytorch_resnet50_v15_outputs_probabilities_and_reports_its_device(jpegs):
    app = ic_app(jpegs, "pytorch")
    app.load_model()
    out = app.infer([app.preprocess(0), app.preprocess(1)])
    assert out.shape == (2, 1000) and np.allclose(out.sum(axis=1), 1.0, atol=1e-4)
    assert app.infer(app.synthetic_batch(3)).shape == (3, 1000)
    provenance = app.model_provenance()
    assert provenance["framework"] == "pytorch" and "v1.5" in provenance["architecture"]
    # traced at the first call (2 images), frozen, and answering as the eager model on 3
    assert provenance["optimisation"] == "torchscript-frozen" and provenance["optimisation_s"] > 0
    import torch

    batch = np.stack([app.preprocess(i) for i in range(2)] + [app.preprocess(0)])
    with torch.inference_mode():
        eager = app.backend.model(torch.from_numpy(batch).permute(0, 3, 1, 2)).numpy()
    frozen = app.infer(batch)
    assert np.allclose(frozen, eager, rtol=1e-4, atol=1e-6)
    assert np.array_equal(np.argsort(-frozen)[:, :5], np.argsort(-eager)[:, :5])
    assert app.framework_versions()["torch"].startswith("2.")
    # 25.6 M parameters, torchvision's names, stride 2 in the 3x3 convolution of a down-sampling block
    model = app.backend.model
    assert sum(p.numel() for p in model.parameters()) == 25_557_032
    assert model.layer2[0].conv2.stride == (2, 2) and model.layer2[0].conv1.stride == (1, 1)
    assert app.gpu_state()["weights_device"] == "cpu"


def test_pytorch_weights_come_from_a_state_dict(jpegs, tmp_path):
    import torch

    app = ic_app(jpegs, "pytorch", seed=3)
    app.load_model()
    path = tmp_path / "resnet50.pth"
    torch.save({"state_dict": app.backend.model.state_dict()}, path)
    loaded = ic_app(jpegs, "pytorch", seed=9, weights={"path": str(path), "sha256": None})
    loaded.load_model()
    batch = app.synthetic_batch(2)
    assert np.allclose(app.infer(batch), loaded.infer(batch), atol=1e-6)
    assert loaded.model_provenance()["weights"] == "loaded"
    torch.save({"fc.weight": torch.zeros(1000, 2048)}, path)
    with pytest.raises(Exception, match=r"apps.ic.weights.path .*not a ResNet50 state dict"):
        ic_app(jpegs, "pytorch", weights={"path": str(path), "sha256": None}).load_model()


@pytest.mark.parametrize("framework", ["tensorflow", "pytorch"])
def test_the_weights_resource_is_the_seeded_initialisation_in_the_frameworks_format(jpegs, tmp_path, framework):
    settings = {"seed": 2, "dataset": {"path": None, "count": 3, "seed": 0}, "weights": {"path": None},
                "framework": framework}
    assert ImageClassification.weights_tag(settings) == f"{framework}-seed2"
    path = tmp_path / ImageClassification.weights_file_name(settings)
    assert path.name == {"tensorflow": "model.weights.h5", "pytorch": "model.pt"}[framework]
    built = ic_app(jpegs, framework, seed=2)  # first: it sets the framework's threads in this process
    built.load_model()
    digest = ImageClassification.build_weights(settings, jpegs, path)
    cached = ImageClassification(settings, jpegs, "CPU", ThreadPlan("granted", 1, 1, 1, 1),
                                 initial_weights=verified_weights(path))
    cached.load_model()
    batch = built.synthetic_batch(1)
    assert np.array_equal(built.infer(batch), cached.infer(batch))
    if framework == "tensorflow":  # the build skipped Keras's random draws; they are back afterwards
        import tensorflow as tf

        assert np.abs(tf.keras.initializers.GlorotUniform(seed=1)((4, 4)).numpy()).min() > 0
    provenance = cached.model_provenance()
    assert provenance["weights"] == "random" and provenance["weights_sha256"] == digest


def test_gpu_scenario_fails_when_the_framework_sees_no_gpu(jpegs, monkeypatch):
    import tensorflow as tf
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(Exception, match="scenario asks for GPU but PyTorch sees no CUDA device"):
        ic_app(jpegs, "pytorch", "GPU").load_model()
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [])
    with pytest.raises(Exception, match="scenario asks for GPU but TensorFlow sees no GPU device"):
        ic_app(jpegs, "tensorflow", "GPU").load_model()


@pytest.mark.slow
def test_pytorch_backend_smoke_jobs_on_bm_under_loadgen_and_dlbs(workflow_dir):
    config = smoke_config()
    config["study"].update(apps=["ic"], tools=["mlperf", "dlbs"], matrix=[
        {"platforms": ["BM"], "cores": [1], "pinning": ["PIN"], "processors": ["CPU"]}])
    config["apps"]["ic"]["framework"] = "pytorch"
    path = write_config(workflow_dir / "ic-pytorch.yaml", config)
    targets = [f"results/runs/{tool}/ic/BM/1/PIN/CPU/1.json" for tool in ("mlperf", "dlbs")]
    snakemake(workflow_dir, *targets, "--configfile", str(path))
    mlperf, dlbs_run = (json.loads((workflow_dir / t).read_text()) for t in targets)
    for run in (mlperf, dlbs_run):
        assert run["verified"] and run["model"]["framework"] == "pytorch"
        assert "v1.5" in run["model"]["architecture"] and run["stack"]["stack"] == "cpu"
        assert "torch" in run["versions"]
    assert mlperf["runs"][0]["samples"] == 16 and mlperf["runs"][0]["quality"]["scored"] == 16
    log = workflow_dir / "results/loadgen/dlbs/ic/BM/1/PIN/CPU/1" / dlbs_run["runs"][0]["tool_output"]["log"]
    assert dlbs.parse_log_file(log)["exp.framework"] == "pytorch"
