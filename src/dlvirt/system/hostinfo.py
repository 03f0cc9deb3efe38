"""What this host is and can do.

``capabilities()`` is cheap (no framework imports) because the Snakefile calls it while building
the DAG; ``facts()`` adds the slow parts (framework versions) for ``results/host.json``.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from importlib import metadata
from pathlib import Path
from typing import Any

from dlvirt.core import formats
from dlvirt.system import cgroups, docker_engine, engine_versions, observe, topology


@dataclass(frozen=True)
class Capabilities:
    cpus: tuple[int, ...]
    gpus: tuple[str, ...]
    kvm_device: bool
    hw_virt: bool
    qemu: bool
    libvirt: bool
    cgroup_version: int | None
    arch: str = field(default_factory=platform.machine)

    @property
    def cores(self) -> int:
        return len(self.cpus)

    @property
    def kvm(self) -> bool:
        """KVM usable for ordinary guests: the device and hardware virtualisation (vmx/svm).

        A /dev/kvm without vmx/svm (a nested paging hypervisor such as kvm_pvm) only boots
        specially built guest kernels, so it does not count."""
        return self.kvm_device and self.hw_virt

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cores"] = self.cores
        data["kvm"] = self.kvm
        return data


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _gpus() -> tuple[str, ...]:
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(line.strip() for line in out.stdout.splitlines() if line.startswith("GPU"))


def _has(*binaries: str) -> bool:
    extra = os.pathsep.join(["/usr/sbin", "/sbin", "/usr/bin", "/usr/local/bin"])
    path = os.environ.get("PATH", "") + os.pathsep + extra
    return any(shutil.which(b, path=path) for b in binaries)


def capabilities() -> Capabilities:
    flags = _cpu_flags()
    return Capabilities(
        cpus=tuple(sorted(os.sched_getaffinity(0))),
        gpus=_gpus(),
        kvm_device=os.path.exists("/dev/kvm"),
        hw_virt=bool({"vmx", "svm"} & flags),
        qemu=_has("qemu-system-x86_64", "qemu-system-aarch64"),
        libvirt=_has("libvirtd"),
        cgroup_version=cgroups.version(),
    )


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_bytes() -> int:
    """This host's memory (MemTotal), in bytes."""
    return observe.mem_total_bytes()


# The packages of the stack itself whose versions host facts and run records report, beside the apps'
# (AppKind.framework_packages and packages: dlvirt.apps.job_packages, which the callers that know the apps pass).
STACK_PACKAGES = ("mlcommons-loadgen", "numpy", "snakemake", "docker")


def package_versions(names: Iterable[str]) -> dict[str, str]:
    """The installed versions of the distributions ``names`` (those not installed left out)."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


# Written by setup.sh (and the CN image's build) into the Python environment: which lock it installed.
STACK_FILE = "dlvirt-stack.json"
STACKS = ("cpu", "gpu")


def python_stack(app_packages: Iterable[str]) -> dict[str, Any]:
    """Which locked stack this Python environment runs (``cpu`` or ``gpu``), as its installer
    recorded it with the reason for the choice; else inferred from the builds of ``app_packages``
    installed (an environment not made by setup.sh): a CPU build is a ``-cpu`` distribution
    (tensorflow-cpu) or a ``+cpu`` local version (torch's)."""
    try:
        recorded = json.loads((Path(sys.prefix) / STACK_FILE).read_text())
    except (OSError, ValueError):
        recorded = None
    if isinstance(recorded, dict) and recorded.get("stack") in STACKS:
        return recorded
    found = package_versions(app_packages)
    cpu_build = any(name.endswith("-cpu") or version.endswith("+cpu") for name, version in found.items())
    return {"stack": "cpu" if cpu_build else "gpu",
            "reason": f"not recorded in {Path(sys.prefix) / STACK_FILE}; inferred from the installed builds "
                      "(" + ", ".join(f"{k} {v}" for k, v in found.items()) + ")"}


def node_identity() -> dict[str, Any]:
    """The machine a job runs on: on a cluster or an edge host each result records its own, because
    results/host.json describes only the machine that wrote it."""
    uname = platform.uname()
    return {
        "hostname": uname.node,
        "cpu_model": _cpu_model(),
        "logical_cpus_online": os.cpu_count(),
        "sockets": len(topology.read().packages),
        "memory_bytes": memory_bytes(),
        "arch": uname.machine,
    }


def hardware_label(node: dict[str, Any]) -> str:
    """What makes two nodes' timings comparable: CPU model, logical CPUs, sockets, architecture."""
    return (f"{node['cpu_model']}, {node['logical_cpus_online']} CPUs, {node['sockets']} socket(s), "
            f"{node['arch']}")


def slurm_allocation() -> dict[str, Any] | None:
    """The SLURM job this process runs in (None outside SLURM), as SLURM's environment states it."""
    job_id = os.environ.get("SLURM_JOB_ID")
    if job_id is None:
        return None
    cpus = os.environ.get("SLURM_CPUS_ON_NODE")
    return {"job_id": job_id, "node": os.environ.get("SLURMD_NODENAME"),
            "cpus_on_node": int(cpus) if cpus and cpus.isdigit() else None,
            "partition": os.environ.get("SLURM_JOB_PARTITION")}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cpu_frequency(root: Path = Path("/sys/devices/system/cpu")) -> dict[str, Any]:
    """The frequency scaling of CPU 0: driver, governor, and whether boost/turbo is on (None where
    the kernel exposes no cpufreq, as in most VMs: the hypervisor decides the clock)."""
    policy = root / "cpu0" / "cpufreq"
    boost: bool | None = None
    if (text := _read(root / "cpufreq" / "boost")) is not None:
        boost = text == "1"
    elif (text := _read(root / "intel_pstate" / "no_turbo")) is not None:
        boost = text == "0"
    return {"driver": _read(policy / "scaling_driver"), "governor": _read(policy / "scaling_governor"),
            "boost": boost, "max_khz": _read(policy / "cpuinfo_max_freq")}


def facts(app_packages: Iterable[str]) -> dict[str, Any]:
    """The host's facts, with the versions of ``app_packages`` (dlvirt.apps.job_packages) and the stack's."""
    app_packages = tuple(app_packages)
    caps = capabilities()
    uname = platform.uname()
    topo = topology.read().describe()
    return formats.stamped("host facts", {
        **node_identity(),
        "numa_nodes": topo["numa_nodes"],
        "threads_per_core": topo["threads_per_core"],
        "kernel": uname.release,
        "cpu_frequency": cpu_frequency(),
        "os": _os_release(),
        "in_container": os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"),
        # the "bare metal" may itself be a VM or a container: then BM rows do not measure bare metal
        "virtualization": observe.virtualization(),
        "capabilities": caps.to_dict(),
        "python": sys.version.split()[0],
        "packages": package_versions((*app_packages, *STACK_PACKAGES)),
        "stack": python_stack(app_packages),
        # asked of the running daemons (the Docker SDK, libvirt's API), not of the CLIs on PATH
        "engines": engine_versions.host_engines(docker_engine.engine_url({}), uname.machine),
    })


def _os_release() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.platform()


def write_facts(path: Path, app_packages: Iterable[str]) -> None:
    from dlvirt.core.atomic import write_json_atomic

    write_json_atomic(path, facts(app_packages))


def load_capabilities(data: dict[str, Any]) -> Capabilities:
    # derived (cores, kvm) and retired keys of facts written by another dlvirt version are not fields
    caps = {name: value for name, value in data.items() if name in {f.name for f in fields(Capabilities)}}
    caps["cpus"] = tuple(caps["cpus"])
    caps["gpus"] = tuple(caps["gpus"])
    return Capabilities(**caps)

