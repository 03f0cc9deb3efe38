"""What a process sees of the machine it runs on, recorded from inside every platform.

This is the evidence that a scenario got what it asked for: the harness records it per run and the
host compares it with the platform's expectation (``platforms.base.verify``).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

from dlvirt.system import cgroups, topology

# Written into dlvirt's CN image at build time (envs/cn.Dockerfile).
IMAGE_TAG_FILE = "/etc/dlvirt-image"


def _detect(flag: str) -> str | None:
    if shutil.which("systemd-detect-virt") is None:
        return None
    out = subprocess.run(["systemd-detect-virt", flag], capture_output=True, text=True, check=False)
    return out.stdout.strip() or None


def container_type() -> str:
    found = _detect("--container")
    if found is not None:
        return found
    if os.path.exists("/.dockerenv"):
        return "docker"
    if os.path.exists("/run/.containerenv"):
        return "podman"
    return "none"


def _dmi(name: str) -> str:
    try:
        return Path(f"/sys/class/dmi/id/{name}").read_text().strip()
    except OSError:
        return ""


def vm_type() -> str:
    """'none' on bare metal; otherwise the hypervisor as systemd-detect-virt names it where possible."""
    found = _detect("--vm")
    if found is not None:
        return found
    flags = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = line
            break
    if " hypervisor" not in flags:
        return "none"
    vendor = (_dmi("sys_vendor") + " " + _dmi("product_name")).lower()
    if "qemu" in vendor:
        return "qemu"
    if "firecracker" in vendor:
        return "firecracker"
    return vendor.strip() or "hypervisor"


def virtualization() -> dict[str, str]:
    return {"container": container_type(), "vm": vm_type()}


def image_tag() -> str | None:
    """The tag a dlvirt-built container image carries inside (None outside such an image)."""
    try:
        return Path(IMAGE_TAG_FILE).read_text().strip()
    except OSError:
        return None


def placement(affinity: list[int]) -> dict[str, Any]:
    """Where this process runs, as its kernel shows it: the memory nodes it may allocate on
    (``Mems_allowed_list``), the sockets and nodes its affinity spans (this machine's sysfs: a
    guest's own topology inside a VM) and the nodes its threads last ran on (a sample)."""
    try:
        topo = topology.read()
    except topology.TopologyError:
        return {"mems": None, "sockets": None, "nodes": None, "ran_on_nodes": None}
    span = topo.span(affinity)
    mems = topology.mems_allowed()
    return {"mems": list(mems) if mems is not None else None, "sockets": span["sockets"], "nodes": span["nodes"],
            "ran_on_nodes": ran_on_nodes(topo)}


def ran_on_nodes(topo: topology.Topology | None = None) -> list[int]:
    """The NUMA nodes this process's threads last ran on."""
    topo = topo or topology.read()
    return topo.span(topology.threads_ran_on())["node_ids"]  # type: ignore[no-any-return]


def resample_ran_on(observed: dict[str, Any]) -> None:
    """Add the nodes the threads ran on now (at a repetition's end) to ``observed``'s sample."""
    seen = observed["placement"].get("ran_on_nodes")
    if seen is not None:
        observed["placement"]["ran_on_nodes"] = sorted(set(seen) | set(ran_on_nodes()))


def observe() -> dict[str, Any]:
    affinity = sorted(os.sched_getaffinity(0))
    return {
        "affinity": affinity,
        "placement": placement(affinity),
        "nproc": len(affinity),
        "cpu_count": os.cpu_count(),
        "quota_cores": cgroups.effective_quota_cores(),
        "cgroup": cgroups.own_cgroup_paths(),
        "memory_limit_bytes": cgroups.effective_memory_limit_bytes(),
        "image": image_tag(),
        "virtualization": virtualization(),
        "kernel": platform.release(),
        "hostname": platform.node(),
        "arch": platform.machine(),
    }


def process_threads() -> int:
    return len(os.listdir("/proc/self/task"))
