"""What the PyTorch apps share: framework threads from the thread plan, the device, checkpoints and
the weights resource (every tensor of a module, loaded without initialising it first).

PyTorch lets a process set its inter-op pool once; asking again for the same size is fine (a test
session builds several apps), asking for another size is an error rather than a silent mismatch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlvirt.apps.base import App, AppError, ThreadPlan
from dlvirt.system import pagecache
from dlvirt.system.hostinfo import package_versions

# How the PyTorch apps run their models, for the run record's model (``optimisation``)
EAGER_INFERENCE = {"optimisation": "inference_mode",
                   "optimisation_note": "eager PyTorch under torch.inference_mode() (no autograd state)"}
FROZEN_NOTE = ("TorchScript: traced at the model's first call, torch.jit.freeze'd (parameters folded into "
               "constants) and torch.jit.optimize_for_inference'd (oneDNN fusions of convolutions and linear "
               "layers); the launch's first call (warm-up time: optimisation_s); GPU runs eagerly")


class FrozenOnCpu:
    """``module`` run the strongest way PyTorch offers it on CPU (benchmarks/torch_execution.py):
    traced on the inputs of its first call, frozen and optimised for inference (``FROZEN_NOTE``);
    on a GPU, eagerly (not measured there). Called as the module is, under the caller's
    ``torch.inference_mode()``; the module itself stays what the weights rule saves."""

    def __init__(self, module: Any, device: Any) -> None:
        self.module = module
        self.frozen = device.type == "cpu"
        self.script: Any = None
        self.optimisation_s: float | None = None

    def __call__(self, *inputs: Any) -> Any:
        if not self.frozen:
            return self.module(*inputs)
        if self.script is None:
            import torch

            start = time.perf_counter()
            # tracing records autograd-free ops; it refuses inference tensors' version counters
            with torch.inference_mode(False), torch.no_grad():
                example = tuple(t.clone() for t in inputs)
                traced = torch.jit.trace(self.module, example, check_trace=False)
                self.script = torch.jit.optimize_for_inference(torch.jit.freeze(traced.eval()))
            self.optimisation_s = time.perf_counter() - start
        return self.script(*inputs)

    def optimisation(self) -> dict[str, Any]:
        if not self.frozen:
            return EAGER_INFERENCE
        return {"optimisation": "torchscript-frozen", "optimisation_note": FROZEN_NOTE,
                "optimisation_s": self.optimisation_s}


def configure(threads: ThreadPlan, processor: str) -> Any:
    """Apply ``threads`` to PyTorch (nothing where the plan leaves a count to PyTorch) and return
    the ``torch.device`` the scenario's processor names."""
    import torch

    if threads.intra_op is not None:
        torch.set_num_threads(threads.intra_op)
    if threads.inter_op is not None and torch.get_num_interop_threads() != threads.inter_op:
        try:
            torch.set_num_interop_threads(threads.inter_op)
        except RuntimeError as err:
            raise AppError(f"PyTorch inter-op threads are already {torch.get_num_interop_threads()} in this "
                           f"process; the thread plan asks for {threads.inter_op}") from err
    if processor == "GPU":
        if not torch.cuda.is_available():
            raise AppError("scenario asks for GPU but PyTorch sees no CUDA device")
        return torch.device("cuda")
    return torch.device("cpu")


def reported_threads() -> dict[str, Any]:
    """PyTorch's own thread counts (intra-op is OpenMP's pool size in its OpenMP build) and the
    OpenMP environment (a launch sets it before anything loads torch, whose libgomp reads it then)."""
    import torch

    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads(),
            "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
            "gomp_spincount_env": os.environ.get("GOMP_SPINCOUNT")}


def load_state_dict(path: Path, setting: str, mmap: bool = False) -> dict[str, Any]:
    """The tensors of a checkpoint file (a bare state dict, or one under 'state_dict'/'model');
    ``mmap``: mapped from the file (torch.save's zip format only), not read into memory."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:
        raise AppError(f"{setting} {path}: not a PyTorch checkpoint of tensors ({err})") from err
    for key in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict):
        raise AppError(f"{setting} {path}: expected a state dict, found {type(state).__name__}")
    return state


def module_tensors(model: Any) -> dict[str, Any]:
    """Every parameter and buffer of ``model`` by name, non-persistent buffers included."""
    return {**dict(model.named_parameters(remove_duplicate=False)),
            **dict(model.named_buffers(remove_duplicate=False))}


def save_module(model: Any, path: Path) -> None:
    """``model``'s parameters and buffers (non-persistent ones too: what load_module assigns) as one
    state dict file, written atomically."""
    import torch

    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    torch.save({name: t.detach().cpu().contiguous() for name, t in module_tensors(model).items()}, partial)
    partial.replace(path)


# In-place ops that initialisers apply to fresh parameters (torch.nn.init and models' own), which a
# build on the meta device skips: its tensors hold no values, the saved ones replace them all, and
# some of these ops' meta kernels first import torch._dynamo (~1.3 s here).
INIT_OPS = frozenset({"uniform_", "normal_", "fill_", "zero_", "erfinv_", "mul_", "add_", "clamp_", "copy_",
                      "bernoulli_", "exponential_", "random_", "log_normal_", "cauchy_", "geometric_"})


def _skip_initialisation() -> Any:
    """A torch function mode in which INIT_OPS on meta tensors return the tensor untouched."""
    from torch.overrides import TorchFunctionMode

    class SkipInitialisation(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            target = args[0] if args else kwargs.get("tensor")  # torch.nn.init passes it by name
            if getattr(func, "__name__", "") in INIT_OPS and getattr(target, "is_meta", False):
                return target
            return func(*args, **kwargs)

    return SkipInitialisation()


def load_module(build: Callable[[], Any], path: Path, setting: str) -> Any:
    """The module ``build`` makes, holding the tensors of ``path`` (``save_module``'s file): built on
    the meta device, so nothing is initialised only to be overwritten, then every tensor assigned.
    A file that does not hold exactly the module's tensors, in their shapes, is an AppError.

    The model computes on the file's pages as the page cache holds them (``mmap``, private: a write
    would copy a page, and inference writes none), each page mapped at once (``populate``): no copy
    into fresh memory, no page fault left for a repetition to take (RS's embedding rows, looked up
    at random). Copying into the process's own memory instead faulted in every page of it (BERT-
    large: 347,000 faults, 0.8 s at best on one core here, and 2.4-5.4 s in hours when this
    guest's hypervisor had taken its freed memory back); mapping and populating it took 0.1-0.3 s,
    and one forward pass took as long on either (docs/measurement.md, "Launch cost"). The pages
    count in the process's resident memory either way; a memory limit too tight to keep them would
    show as major faults in the repetitions' telemetry."""
    import torch

    state = load_state_dict(path, setting, mmap=True)
    if pagecache.populate(path) < Path(path).stat().st_size:  # torch mapped it some other way
        raise AppError(f"{setting} {path}: the loaded weights are not one mapping of the file, so their pages "
                       "cannot be mapped before the repetitions")
    with torch.device("meta"), _skip_initialisation():
        model = build()
    wanted = module_tensors(model)
    missing, unexpected = sorted(set(wanted) - set(state)), sorted(set(state) - set(wanted))
    wrong = [name for name in set(wanted) & set(state) if tuple(wanted[name].shape) != tuple(state[name].shape)]
    if missing or unexpected or wrong:
        raise AppError(f"{setting} {path}: not this model's weights (missing {missing[:3]}, unexpected "
                       f"{unexpected[:3]}, other shapes {sorted(wrong)[:3]}): rebuild it (rule weights)")
    persistent = model.state_dict().keys()
    model.load_state_dict({name: state[name] for name in persistent}, strict=True, assign=True)
    for name in set(wanted) - set(persistent):  # non-persistent buffers
        owner, _, attr = name.rpartition(".")
        model.get_submodule(owner).register_buffer(attr, state[name], persistent=False)
    return model


def gpu_state(model: Any) -> dict[str, Any]:
    """``App.gpu_state`` of a torch model: where its first parameter lives, what CUDA PyTorch sees."""
    import torch

    cuda = torch.cuda.is_available()
    return {"framework": "pytorch",
            "framework_gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
            "weights_device": str(next(model.parameters()).device),
            "framework_peak_bytes": torch.cuda.max_memory_allocated() if cuda else None,
            "cuda": torch.version.cuda,
            "cudnn": str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None}


class TorchModelApp(App):
    """An app whose model is one torch module (``self.model``): what it reports of PyTorch."""

    model: Any
    runner: FrozenOnCpu | None = None  # where the app runs its model frozen (FrozenOnCpu), else eagerly

    def import_framework(self) -> None:
        import torch  # noqa: F401

    def save_weights(self, path: Path) -> None:
        save_module(self.model, path)

    def first_call(self) -> None:
        """Run once, outside the timed runs: a frozen model is traced (it then takes any batch size);
        an eager one needs nothing."""
        if self.runner is not None:
            self.infer(self.synthetic_batch(1))

    def model_provenance(self) -> dict[str, Any]:
        return {**super().model_provenance(), **(self.runner.optimisation() if self.runner else EAGER_INFERENCE)}

    def gpu_state(self) -> dict[str, Any]:
        return gpu_state(self.model)

    def framework_threads(self) -> dict[str, Any]:
        return reported_threads()

    def framework_versions(self) -> dict[str, str]:
        return package_versions((*self.kind.framework_packages, *self.kind.packages))
