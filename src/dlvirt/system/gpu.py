"""What a GPU repetition really did on the GPU, measured from inside the platform.

A GPU scenario counts only when the repetition shows GPU work: the harness samples the GPUs'
utilisation and memory while it runs (NVML through ``nvidia-ml-py`` where the stack has it, else
``nvidia-smi``), the app says where its weights live (``App.gpu_state``), and ``usage_problems``
fails the job when the framework saw no GPU, the weights sat on the CPU, or the GPU stayed idle.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

SAMPLE_INTERVAL_S = 0.1
_SMI_TIMEOUT_S = 10


def _nvml() -> Any:
    """The NVML bindings, initialised, or None (not installed, or no driver answers)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - pynvml raises NVMLError subclasses for every missing piece
        return None
    return pynvml


def _smi(*args: str) -> list[list[str]] | None:
    """``nvidia-smi --format=csv,noheader,nounits`` rows split into fields, or None."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", *args, "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return [[field.strip() for field in line.split(",")] for line in out.stdout.splitlines() if line.strip()]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def devices() -> list[dict[str, Any]]:
    """The GPUs this process can see: model, driver, the CUDA version the driver supports, memory."""
    nvml = _nvml()
    if nvml is not None:
        cuda = nvml.nvmlSystemGetCudaDriverVersion()
        found = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            found.append({"index": index, "name": _text(nvml.nvmlDeviceGetName(handle)),
                          "driver": _text(nvml.nvmlSystemGetDriverVersion()),
                          "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}",
                          "memory_total_mib": nvml.nvmlDeviceGetMemoryInfo(handle).total // (1 << 20),
                          "source": "nvml"})
        return found
    rows = _smi("--query-gpu=index,name,driver_version,memory.total")
    return [{"index": int(r[0]), "name": r[1], "driver": r[2], "cuda_driver": None,
             "memory_total_mib": float(r[3]), "source": "nvidia-smi"} for r in rows or [] if len(r) >= 4]


def sample() -> list[dict[str, float]] | None:
    """One reading per GPU: utilisation (%) and used memory (MiB), plus this process's own memory
    where the driver lists it (inside a PID namespace it may not). None when nothing answers."""
    pid = os.getpid()
    nvml = _nvml()
    if nvml is not None:
        readings = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            mine = [p.usedGpuMemory for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                    if p.pid == pid and p.usedGpuMemory is not None]
            readings.append({"util_pct": float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                             "used_mib": nvml.nvmlDeviceGetMemoryInfo(handle).used / (1 << 20),
                             "process_mib": sum(mine) / (1 << 20) if mine else float("nan")})
        return readings
    rows = _smi("--query-gpu=utilization.gpu,memory.used")
    if rows is None:
        return None
    apps = _smi("--query-compute-apps=pid,used_memory") or []
    own_mib = sum(float(r[1]) for r in apps if len(r) >= 2 and r[0] == str(pid))
    return [{"util_pct": float(r[0]), "used_mib": float(r[1]), "process_mib": own_mib or float("nan")}
            for r in rows if len(r) >= 2]


class UsageSampler:
    """Samples every GPU on a background thread while a repetition runs."""

    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.samples: list[list[dict[str, float]]] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="dlvirt-gpu-sampler", daemon=True)

    def _loop(self) -> None:
        while True:
            reading = sample()
            if reading is not None:
                self.samples.append(reading)
            if self.stop_event.wait(self.interval_s):
                return

    def summary(self) -> dict[str, Any]:
        util = [max(g["util_pct"] for g in s) for s in self.samples if s]
        used = [max(g["used_mib"] for g in s) for s in self.samples if s]
        process = [sum(g["process_mib"] for g in s if g["process_mib"] == g["process_mib"]) for s in self.samples]
        process = [p for p in process if p > 0]
        return {"samples": len(util), "interval_s": self.interval_s,
                "util_mean_pct": sum(util) / len(util) if util else None,
                "util_max_pct": max(util) if util else None,
                "used_peak_mib": max(used) if used else None,
                "process_peak_mib": max(process) if process else None}


@contextlib.contextmanager
def sampled(enabled: bool) -> Iterator[UsageSampler | None]:
    """A running ``UsageSampler`` for the block (None when ``enabled`` is false: CPU scenarios)."""
    if not enabled:
        yield None
        return
    sampler = UsageSampler()
    sampler.thread.start()
    try:
        yield sampler
    finally:
        sampler.stop_event.set()
        sampler.thread.join()


def repetition_record(sampler: UsageSampler, app_state: dict[str, Any]) -> dict[str, Any]:
    """A repetition's ``gpu`` record: the devices, what the framework said, the sampled usage."""
    found = devices()
    usage = sampler.summary()
    peak = usage["process_peak_mib"]
    if peak is None and app_state.get("framework_peak_bytes"):
        peak = app_state["framework_peak_bytes"] / (1 << 20)
    return {"devices": found, "model": found[0]["name"] if found else None,
            "driver": found[0]["driver"] if found else None, **app_state, **usage, "peak_mib": peak}


def _on_gpu(device: str) -> bool:
    lowered = device.lower()
    return lowered.startswith("cuda") or "gpu" in lowered


def usage_problems(record: dict[str, Any]) -> list[str]:
    """Why one GPU repetition's record does not show GPU work (empty when it does)."""
    gpu = record.get("gpu")
    if not gpu:
        return ["GPU scenario, but the repetition recorded no GPU use"]
    problems = []
    framework = gpu.get("framework", "the framework")
    if not gpu.get("framework_gpus"):
        problems.append(f"{framework} sees no GPU")
    device = str(gpu.get("weights_device") or "")
    if not _on_gpu(device):
        problems.append(f"the model's weights are on {device or 'an unreported device'}, not on the GPU")
    if not gpu.get("samples"):
        problems.append("GPU utilisation could not be sampled (neither NVML nor nvidia-smi answered)")
    elif not gpu.get("util_max_pct"):
        problems.append(f"the GPU stayed idle: utilisation 0 % in all {gpu['samples']} samples "
                        f"(every {gpu['interval_s']} s) during the repetition")
    return problems
