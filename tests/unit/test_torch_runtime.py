"""How the PyTorch apps run their models: frozen TorchScript on CPU, traced at the first call and
answering as the eager module on batches of other sizes; eager on a GPU."""

import torch

from dlvirt.apps.torch_runtime import EAGER_INFERENCE, FrozenOnCpu


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).eval()


def test_on_cpu_the_model_is_traced_at_its_first_call_and_answers_as_the_eager_one():
    model = small_model()
    runner = FrozenOnCpu(model, torch.device("cpu"))
    assert runner.optimisation()["optimisation_s"] is None  # nothing traced before the first call
    with torch.inference_mode():  # as the apps call it
        for rows in (4, 1, 7):
            x = torch.randn(rows, 8)
            assert torch.allclose(runner(x), model(x), rtol=1e-5, atol=1e-6)
    applied = runner.optimisation()
    assert applied["optimisation"] == "torchscript-frozen" and applied["optimisation_s"] > 0
    assert isinstance(runner.script, torch.jit.ScriptModule)


def test_on_a_gpu_the_model_runs_eagerly():
    model = small_model()
    runner = FrozenOnCpu(model, torch.device("cuda"))  # a device object only: nothing runs on it here
    x = torch.randn(3, 8)
    with torch.inference_mode():
        assert torch.equal(runner(x), model(x))
    assert runner.optimisation() == EAGER_INFERENCE and runner.script is None
