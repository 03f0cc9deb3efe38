"""What the PyTorch apps share: framework threads from the thread plan, the device, checkpoints.

PyTorch lets a process set its inter-op pool once; asking again for the same size is fine (a test
session builds several apps), asking for another size is an error rather than a silent mismatch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

from dlvirt.apps.base import App, AppError, ThreadPlan
from dlvirt.system.hostinfo import package_versions


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
    """PyTorch's own thread counts (intra-op is OpenMP's pool size in its OpenMP build)."""
    import torch

    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads(),
            "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS")}


def load_state_dict(path: Path, setting: str) -> dict[str, Any]:
    """The tensors of a checkpoint file (a bare state dict, or one under 'state_dict'/'model')."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise AppError(f"{setting} {path}: not a PyTorch checkpoint of tensors ({err})") from err
    for key in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict):
        raise AppError(f"{setting} {path}: expected a state dict, found {type(state).__name__}")
    return state


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
    torch_packages: ClassVar[tuple[str, ...]] = ("torch",)  # the packages its framework_versions name

    def gpu_state(self) -> dict[str, Any]:
        return gpu_state(self.model)

    def framework_threads(self) -> dict[str, Any]:
        return reported_threads()

    def framework_versions(self) -> dict[str, str]:
        return package_versions(self.torch_packages)
