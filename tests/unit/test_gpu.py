"""Verified GPU use (dlvirt.system.gpu) with the device's answers faked: nvidia-smi as a script on
PATH, NVML as a stand-in pynvml module, the framework's answers as app_state dicts. This host has no
GPU; the real thing runs in benchmarks/gpu_vs_cpu.py on a GPU machine."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from conftest import FIXTURES
from dlvirt.analysis.aggregate import summarise_launches
from dlvirt.analysis.rows import verified_gpu_rows
from dlvirt.core.records import JobResult
from dlvirt.core.scenario import Scenario
from dlvirt.system import gpu

TORCH_ON_GPU = {"framework": "pytorch", "framework_gpus": ["NVIDIA H200"], "weights_device": "cuda:0",
                "framework_peak_bytes": 3 << 30, "cuda": "13.0", "cudnn": "92000"}


def fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, util: int, pid: int | None = None) -> None:
    """An nvidia-smi on PATH answering the queries dlvirt makes, for one GPU (readings streamed
    every 0.1 s, as -lms makes it)."""
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir(exist_ok=True)
    apps = f"{pid}, 1536" if pid else ""
    script.write_text(f"""#!/bin/sh
case "$1 $3" in
  "--query-gpu=index,name,driver_version,memory.total "*) echo "0, NVIDIA H200, 570.86.15, 143771" ;;
  "--query-gpu=index "*) echo "0" ;;
  "--query-gpu=utilization.gpu,memory.used -lms=100") while :; do echo "{util}, 2048"; sleep 0.1; done ;;
  "--query-compute-apps=pid,used_memory "*) echo "{apps}" ;;
  *) exit 9 ;;
esac
""")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML: the nvidia-smi path


def sampled_record(app_state: dict) -> dict:
    with gpu.sampled(True) as sampler:
        assert sampler is not None
        time.sleep(0.35)
    return {"gpu": gpu.repetition_record(sampler, app_state)}


def test_busy_gpu_with_weights_on_it_is_verified(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, util=87, pid=os.getpid())
    record = sampled_record(TORCH_ON_GPU)
    assert gpu.usage_problems(record) == []
    info = record["gpu"]
    assert info["model"] == "NVIDIA H200" and info["driver"] == "570.86.15"
    assert info["devices"][0]["source"] == "nvidia-smi"
    assert info["samples"] >= 2 and info["util_max_pct"] == 87 and info["util_mean_pct"] == 87
    assert info["process_peak_mib"] == 1536 and info["peak_mib"] == 1536  # the process's own, as the driver saw it
    assert info["devices"][0]["memory_total_mib"] == 143771 and info["cuda"] == "13.0"


def test_idle_gpu_fails_with_a_clear_message(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, util=0)
    record = sampled_record(TORCH_ON_GPU)
    (problem,) = gpu.usage_problems(record)
    assert problem.startswith("the GPU stayed idle: utilisation 0 % in all")
    # the driver did not list the process (a PID namespace): the framework's own peak stands in
    assert record["gpu"]["process_peak_mib"] is None and record["gpu"]["peak_mib"] == 3072


def test_weights_on_the_cpu_fail(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, util=40)
    record = sampled_record({**TORCH_ON_GPU, "weights_device": "cpu"})
    assert gpu.usage_problems(record) == ["the model's weights are on cpu, not on the GPU"]
    tf_cpu = {**TORCH_ON_GPU, "framework": "tensorflow",
              "weights_device": "/job:localhost/replica:0/task:0/device:CPU:0"}
    assert "not on the GPU" in gpu.usage_problems(sampled_record(tf_cpu))[0]
    tf_gpu = {**tf_cpu, "weights_device": "/job:localhost/replica:0/task:0/device:GPU:0"}
    assert gpu.usage_problems(sampled_record(tf_gpu)) == []


def test_framework_without_a_gpu_and_nothing_to_sample_fail(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))           # no nvidia-smi
    monkeypatch.setitem(sys.modules, "pynvml", None)    # and no NVML
    record = sampled_record({"framework": "pytorch", "framework_gpus": [], "weights_device": "cpu"})
    assert gpu.usage_problems(record) == [
        "pytorch sees no GPU", "the model's weights are on cpu, not on the GPU",
        "GPU utilisation could not be sampled (neither NVML nor nvidia-smi answered)"]
    assert gpu.usage_problems({}) == ["GPU scenario, but the repetition recorded no GPU use"]


def fake_nvml(monkeypatch: pytest.MonkeyPatch, util: Callable[[], int], process_bytes: int | None = None) -> None:
    """A stand-in pynvml for one GPU (driver 570.86.15, CUDA 12.8) whose utilisation reading is
    ``util()``, listing this process with ``process_bytes`` of GPU memory where given."""
    handle = object()
    mine = [] if process_bytes is None else [types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=process_bytes)]
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: handle,
        nvmlDeviceGetName=lambda h: b"NVIDIA H200", nvmlSystemGetDriverVersion=lambda: "570.86.15",
        nvmlSystemGetCudaDriverVersion=lambda: 12080,
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=141 << 30, used=5 << 30),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=util()),
        nvmlDeviceGetComputeRunningProcesses=lambda h: mine)
    monkeypatch.setitem(sys.modules, "pynvml", fake)


def test_nvml_is_preferred_when_the_stack_has_it(monkeypatch):
    fake_nvml(monkeypatch, lambda: 64, process_bytes=2 << 30)
    assert gpu.devices() == [{"index": 0, "name": "NVIDIA H200", "driver": "570.86.15", "cuda_driver": "12.8",
                              "memory_total_mib": 141 << 10, "source": "nvml"}]
    with gpu.sampled(True) as sampler:
        time.sleep(0.25)
    usage = sampler.summary()
    assert usage["source"] == "nvml" and usage["samples"] >= 2 and usage["util_max_pct"] == 64
    assert usage["used_peak_mib"] == 5120 and usage["process_peak_mib"] == 2048


def test_a_repetition_shorter_than_the_drivers_period_is_read_after_it(monkeypatch):
    # the driver reports the period holding a 10 ms repetition's kernels only after it ended
    # (seen on an H200: a DLBS RS batch loop read 0 % in both samples taken while it ran)
    stopped: list[float] = []
    fake_nvml(monkeypatch, lambda: 4 if stopped and time.monotonic() - stopped[0] > 0.25 else 0)
    sampler = gpu.UsageSampler()
    sampler.start()
    time.sleep(0.01)
    stopped.append(time.monotonic())
    sampler.stop()
    record = {"gpu": gpu.repetition_record(sampler, TORCH_ON_GPU)}
    assert gpu.usage_problems(record) == []
    usage = record["gpu"]
    assert usage["util_max_pct"] == 0 and usage["util_after_pct"] == 4 and usage["samples_after"] >= 2
    assert usage["util_mean_pct"] == 4  # the reading after it stands for the repetition
    assert time.monotonic() - stopped[0] < 0.25 + 2 * gpu.SAMPLE_INTERVAL_S + 0.5  # stops at the first reading


def test_an_idle_gpu_is_read_for_at_most_trail_s_after_the_repetition(monkeypatch):
    fake_nvml(monkeypatch, lambda: 0)
    start = time.monotonic()
    with gpu.sampled(True) as sampler:
        time.sleep(0.01)
    assert gpu.TRAIL_S <= time.monotonic() - start < gpu.TRAIL_S + 1.0
    usage = sampler.summary()
    assert usage["util_mean_pct"] == 0 and usage["util_after_pct"] == 0
    (problem,) = gpu.usage_problems({"gpu": {**TORCH_ON_GPU, **usage}})
    assert f"and in {usage['samples_after']} after it" in problem
    # a busy repetition reads nothing after it
    fake_nvml(monkeypatch, lambda: 50)
    with gpu.sampled(True) as sampler:
        time.sleep(0.05)
    assert sampler.summary()["samples_after"] == 0


def test_cpu_scenarios_sample_nothing():
    with gpu.sampled(False) as sampler:
        assert sampler is None


def test_summary_columns_and_only_verified_gpu_rows_count(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, util=87, pid=os.getpid())
    recorded = JobResult.read(FIXTURES / "runs" / "mlperf-ic-BM-1-VNL-CPU.json")
    runs = [dataclasses.replace(recorded.runs[0], e2e_s=2.0 + i / 100,
                                phases={"pre_s": 1.0, "infer_s": 0.5, "post_s": 0.1}, samples=8, samples_per_s=4.0,
                                threads={"policy": "granted", "intra_op": 2}, **sampled_record(TORCH_ON_GPU))
            for i in range(3)]
    result = dataclasses.replace(recorded, scenario=Scenario.parse("BM/2/PIN/GPU"), scenario_name="BM/2/PIN/GPU",
                                 runs=runs, platform={}, dataset={"source": "synthetic"},
                                 model={"weights": "random"}, host="h")
    row = summarise_launches([result])
    assert row["gpu"] == "NVIDIA H200" and row["gpu_util_pct"] == 87 and row["gpu_mem_mib"] == 1536
    cpu = {**row, "processor": "CPU", "gpu": None, "gpu_util_pct": None, "gpu_mem_mib": None}
    idle = {**row, "cores": 1, "gpu_util_pct": 0.0}
    kept = verified_gpu_rows(pd.DataFrame([row, cpu, idle]))
    assert list(zip(kept["processor"], kept["cores"], strict=True)) == [("GPU", 2), ("CPU", 2)]


# -- VM/*/GPU: what passthrough and the guest's driver need -------------------------------------------

def test_passthrough_left_out_reasons_say_what_is_missing(tmp_path):
    from dlvirt.core.scenario import Scenario
    from dlvirt.platforms.vm import VirtualMachine, passthrough_unavailable
    from dlvirt.system.hostinfo import Capabilities

    assert passthrough_unavailable({}, "platforms.VM") == \
        "platforms.VM.gpu_pci_address is not set (the GPU to pass through)"
    assert passthrough_unavailable({"gpu_pci_address": "ff:1f.7"}, "platforms.VM") == \
        "platforms.VM.gpu_pci_address ff:1f.7: no such PCI device on this host"
    # a GPU host (as nvidia-smi would report it) whose settings name no card
    caps = Capabilities(cpus=(0,), gpus=("GPU 0: NVIDIA H200 (UUID: GPU-0)",), kvm_device=True, hw_virt=True,
                        qemu=True, libvirt=True, cgroup_version=2)
    why = VirtualMachine.unavailable_reason(Scenario("VM", 1, "VNL", "GPU"), caps,
                                            {"allow_emulation": True, "platforms": {"VM": {}}})
    assert why == "platforms.VM.gpu_pci_address is not set (the GPU to pass through)"


def test_guest_driver_is_debians_unless_configured(tmp_path):
    from dlvirt.platforms.guestimage import NVIDIA_DRIVER_PACKAGES, ImageError, gpu_driver_packages

    assert gpu_driver_packages({}) == (NVIDIA_DRIVER_PACKAGES, ())
    deb = tmp_path / "nvidia-driver-570.deb"
    deb.write_bytes(b"!<arch>\n")
    assert gpu_driver_packages({"packages": ["nvidia-tesla-driver"], "debs": [str(deb)]}) == \
        (("nvidia-tesla-driver",), (deb,))
    with pytest.raises(ImageError, match=r"platforms.VM.gpu_driver.debs: no such file: .*missing.deb"):
        gpu_driver_packages({"debs": [str(tmp_path / "missing.deb")]})
