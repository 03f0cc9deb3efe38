"""What a GPU repetition really did on the GPU, measured from inside the platform.

A GPU scenario counts only when the repetition shows GPU work: the harness samples the GPUs'
utilisation and memory while it runs (NVML through ``nvidia-ml-py`` where the stack has it, else
``nvidia-smi``), the app says where its weights live (``App.gpu_state``), and ``usage_problems``
fails the job when the framework saw no GPU, the weights sat on the CPU, or the GPU stayed idle.

The driver's utilisation is a share of its own sample period (1/6 s to 1 s, by product: NVML's
``nvmlDeviceGetUtilizationRates``), updated once per period. A repetition shorter than that (a
DLBS batch loop of 10 ms on an H200) can read 0 % in every sample taken while it runs although its
kernels ran: the period that holds them is reported after it ended. So when every reading during
the repetition is 0 %, the sampler keeps reading for up to ``TRAIL_S`` after it, until a non-zero
reading; that reading stands for the repetition (``util_after_pct``, ``samples_after``). It is the
driver's share over the period that held the repetition's end, so it may hold the job's own GPU work
just before the repetition too (and, as every reading, another process's on the same GPU): evidence
that the GPU worked, not a utilisation of the repetition alone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

SAMPLE_INTERVAL_S = 0.1
TRAIL_S = 1.0  # the longest utilisation sample period NVML documents
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


def _nan_if_zero(mib: float) -> float:
    return mib if mib else float("nan")


def _nvml_sample(nvml: Any) -> list[dict[str, float]]:
    """One NVML reading per GPU: utilisation (%), used memory (MiB) and this process's own memory
    where the driver lists it (inside a PID namespace it may not: NaN)."""
    pid = os.getpid()
    readings = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        mine = [p.usedGpuMemory for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                if p.pid == pid and p.usedGpuMemory is not None]
        readings.append({"util_pct": float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                         "used_mib": nvml.nvmlDeviceGetMemoryInfo(handle).used / (1 << 20),
                         "process_mib": _nan_if_zero(sum(mine) / (1 << 20))})
    return readings


def _smi_process_mib() -> float:
    """This process's GPU memory as nvidia-smi lists it (NaN when it does not list the process)."""
    apps = _smi("--query-compute-apps=pid,used_memory") or []
    return _nan_if_zero(sum(float(r[1]) for r in apps if len(r) >= 2 and r[0] == str(os.getpid())))


class UsageSampler:
    """Samples every GPU while a repetition runs: NVML polled on a thread, else one ``nvidia-smi
    -lms`` process streaming readings (spawning nvidia-smi per sample would load the CPU the
    repetition is measured on). ``samples`` holds one list of per-GPU readings per instant."""

    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S, trail_s: float = TRAIL_S) -> None:
        self.interval_s = interval_s
        self.trail_s = trail_s
        self.samples: list[list[dict[str, float]]] = []
        self.after: list[list[dict[str, float]]] = []  # readings after the repetition (trailing)
        self.source: str | None = None
        self.stop_event = threading.Event()
        self.proc: subprocess.Popen[str] | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        nvml = _nvml()
        if nvml is not None:
            self.source = "nvml"
            self.thread = threading.Thread(target=self._poll, args=(nvml,), name="dlvirt-gpu-sampler", daemon=True)
        elif shutil.which("nvidia-smi") is not None:
            self.source = "nvidia-smi"
            gpus = max(1, len(_smi("--query-gpu=index") or []))
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits",
                 f"-lms={max(1, round(self.interval_s * 1000))}"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self.thread = threading.Thread(target=self._read, args=(self.proc, gpus), name="dlvirt-gpu-sampler",
                                           daemon=True)
        if self.thread is not None:
            self.thread.start()

    def _busy(self) -> bool:
        return any(g["util_pct"] > 0 for s in self.samples + self.after for g in s)

    def _poll(self, nvml: Any) -> None:
        while True:
            self.samples.append(_nvml_sample(nvml))
            if self.stop_event.wait(self.interval_s):
                break
        deadline = time.monotonic() + self.trail_s
        while not self._busy() and time.monotonic() < deadline:
            time.sleep(self.interval_s)
            self.after.append(_nvml_sample(nvml))

    def _read(self, proc: subprocess.Popen[str], gpus: int) -> None:
        assert proc.stdout is not None
        instant: list[dict[str, float]] = []
        for line in proc.stdout:
            fields = [f.strip() for f in line.split(",")]
            try:
                instant.append({"util_pct": float(fields[0]), "used_mib": float(fields[1]),
                                "process_mib": float("nan")})
            except (IndexError, ValueError):
                continue
            if len(instant) == gpus:
                (self.after if self.stop_event.is_set() else self.samples).append(instant)
                instant = []

    def stop(self) -> None:
        self.stop_event.set()
        if self.proc is not None:
            deadline = time.monotonic() + self.trail_s
            while not self._busy() and time.monotonic() < deadline and self.proc.poll() is None:
                time.sleep(self.interval_s)
            # the process's own memory, once, while the model still holds it
            own = _smi_process_mib()
            if self.samples:
                self.samples[-1] = [{**g, "process_mib": own} for g in self.samples[-1]]
            self.proc.terminate()
            self.proc.wait()
        if self.thread is not None:
            self.thread.join()

    def summary(self) -> dict[str, Any]:
        util = [max(g["util_pct"] for g in s) for s in self.samples if s]
        used = [max(g["used_mib"] for g in s) for s in self.samples if s]
        process = [sum(g["process_mib"] for g in s if g["process_mib"] == g["process_mib"]) for s in self.samples]
        process = [p for p in process if p > 0]
        after = [max(g["util_pct"] for g in s) for s in self.after if s]
        util_after = max(after) if after else None
        mean = sum(util) / len(util) if util else None
        if not any(util) and util_after:
            mean = util_after  # every reading during it was 0 %: the one after it stands for it
        return {"samples": len(util), "interval_s": self.interval_s, "source": self.source,
                "util_mean_pct": mean, "util_max_pct": max(util) if util else None,
                "samples_after": len(after), "util_after_pct": util_after,
                "used_peak_mib": max(used) if used else None,
                "process_peak_mib": max(process) if process else None}


@contextlib.contextmanager
def sampled(enabled: bool) -> Iterator[UsageSampler | None]:
    """A running ``UsageSampler`` for the block (None when ``enabled`` is false: CPU scenarios)."""
    if not enabled:
        yield None
        return
    sampler = UsageSampler()
    sampler.start()
    try:
        yield sampler
    finally:
        sampler.stop()


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
    elif not gpu.get("util_max_pct") and not gpu.get("util_after_pct"):
        problems.append(f"the GPU stayed idle: utilisation 0 % in all {gpu['samples']} samples "
                        f"(every {gpu['interval_s']} s) during the repetition and in "
                        f"{gpu.get('samples_after', 0)} after it")
    return problems
