"""What a process sees of the machine it runs on, recorded from inside every platform.

This is the evidence that a scenario got what it asked for: the harness records it per run and the
host compares it with the platform's expectation (``platforms.base.verify``).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import platform
import resource
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Self

from dlvirt.system import cgroups, topology, whose

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


def mem_total_bytes() -> int:
    """The RAM the kernel this process runs on manages (MemTotal): a guest's own; the host's in a
    container (0 where /proc/meminfo does not say)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


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


PR_GET_NO_NEW_PRIVS = 39  # linux/prctl.h


def no_new_privs_flag() -> int:
    """This thread's no_new_privs flag, from prctl(PR_GET_NO_NEW_PRIVS)."""
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0))


def privileges(status: Path = Path("/proc/self/status")) -> dict[str, Any]:
    """The harness's own powers as its kernel sees them: real and effective uid, the effective
    capability set (hex; all zeros: none) and the no_new_privs flag (1: no setuid can raise them;
    asked of the kernel with prctl where its status file lacks the line, as gVisor's does)."""
    fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
    uids = fields["Uid"].split()
    no_new_privs = fields["NoNewPrivs"].strip() if "NoNewPrivs" in fields else no_new_privs_flag()
    return {"uid": int(uids[0]), "euid": int(uids[1]), "cap_eff": fields["CapEff"].strip(),
            "no_new_privs": int(no_new_privs or 0),
            "seccomp": int(fields.get("Seccomp", "0").strip() or 0)}  # 2: a seccomp filter


def uptime_s() -> float:
    """The kernel's uptime (/proc/uptime): one clock for every process of a kernel, containers
    included, where a guest's wall clock and its host's may differ."""
    return float(Path("/proc/uptime").read_text().split()[0])


def boot_id() -> str | None:
    """This kernel's boot id: a container shares its host's, a guest has its own."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


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
        "mem_total_bytes": mem_total_bytes(),
        "image": image_tag(),
        "privileges": privileges(),
        "virtualization": virtualization(),
        "pci_devices": pci_devices(),
        "kernel": platform.release(),
        "boot_id": boot_id(),
        "hostname": platform.node(),
        "arch": platform.machine(),
    }


def process_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def thread_names() -> collections.Counter[str]:
    """How many of this process's threads carry each name (/proc/self/task/*/comm)."""
    names: collections.Counter[str] = collections.Counter()
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            names[Path(f"/proc/self/task/{tid}/comm").read_text().strip()] += 1
    return names


def pci_devices() -> int:
    """PCI devices the kernel sees: none on QEMU's microvm machine and on Firecracker (virtio-mmio
    only), some on every PC-type VM and on bare metal."""
    try:
        return len(os.listdir("/sys/bus/pci/devices"))
    except OSError:
        return 0


def _proc_stat_cpu() -> list[int]:
    """The aggregate ``cpu`` line of /proc/stat: user nice system idle iowait irq softirq steal ... (ticks)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu "):
            return [int(v) for v in line.split()[1:]]
    return []


def background_load(sample_s: float = 1.0) -> dict[str, Any]:
    """The host's background load: the cores other processes (not this process, its descendants or
    ancestors: the workflow; not kernel threads or the engines: ``whose``) kept busy over
    ``sample_s`` on the CPUs this process may use, and the busiest of them by name."""
    cpus = frozenset(os.sched_getaffinity(0))
    runner = whose.ancestors(os.getpid())
    before = whose.read(cpus, whose.Launch(), runner, os.getpid())
    time.sleep(sample_s)
    after = whose.read(cpus, whose.Launch(), runner, os.getpid())
    found = whose.window([whose.interval(before, after)], before.unix_s, after.unix_s, len(cpus))
    assert found is not None
    return {"cpus": len(cpus), "sample_s": found["window_s"],
            "others_cores": found["others_on_cpus_s"] / found["window_s"], "others_seen": found["others_seen"]}


def counters() -> dict[str, Any]:
    """Cumulative counters a repetition's telemetry is the difference of (``telemetry``)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_stat": cgroups.cpu_stat(), "proc_stat": _proc_stat_cpu(),
            "process_cpu_s": usage.ru_utime + usage.ru_stime, "voluntary_ctx": usage.ru_nvcsw,
            "involuntary_ctx": usage.ru_nivcsw, "max_rss_kib": usage.ru_maxrss, "major_faults": usage.ru_majflt,
            "minor_faults": usage.ru_minflt}


def process_usage(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """This process's CPU time and page faults between two ``counters()``: major faults read from
    disk (weights a memory limit evicted), minor ones map cached pages or give it fresh memory
    (slow where a hypervisor has to give the guest that memory back first)."""
    return {"cpu_s": round(after["process_cpu_s"] - before["process_cpu_s"], 4),
            "major_faults": after["major_faults"] - before["major_faults"],
            "minor_faults": after["minor_faults"] - before["minor_faults"]}


def telemetry(before: dict[str, Any], after: dict[str, Any], sampler: ThreadSampler | None = None) -> dict[str, Any]:
    """What the kernel did to this process between two ``counters()``: CFS throttling of the cgroup
    that limits it, steal time (non-zero only in a guest whose host took time from its vCPUs),
    the CPU-seconds the rest of the machine (this kernel's other processes) used meanwhile
    (``others_cpu_s``: a shared machine says so), context switches, page faults, the process's peak resident
    memory, and, from ``sampler``, the CPUs its threads ran on."""
    found: dict[str, Any] = {"voluntary_ctx": after["voluntary_ctx"] - before["voluntary_ctx"],
                             "involuntary_ctx": after["involuntary_ctx"] - before["involuntary_ctx"],
                             # the process's peak resident memory so far (what study.memory must hold)
                             "max_rss_mib": after["max_rss_kib"] / 1024}
    usage = process_usage(before, after)
    found.update(major_faults=usage["major_faults"], minor_faults=usage["minor_faults"])
    if before["cpu_stat"] is not None and after["cpu_stat"] is not None:
        found.update({key: after["cpu_stat"][key] - before["cpu_stat"][key]
                      for key in ("nr_periods", "nr_throttled", "throttled_s")})
    else:
        found.update({"nr_periods": None, "nr_throttled": None, "throttled_s": None})
    ticks = [b - a for a, b in zip(before["proc_stat"], after["proc_stat"], strict=False)]
    # /proc/stat's guest columns (9, 10) are already inside user/nice: leave them out of the total
    total = sum(ticks[:8])
    found["steal_pct"] = 100.0 * ticks[7] / total if len(ticks) > 7 and total > 0 else None
    if len(ticks) > 4 and "process_cpu_s" in before:
        busy_s = (total - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait
        found["others_cpu_s"] = max(0.0, busy_s - (after["process_cpu_s"] - before["process_cpu_s"]))
    if sampler is not None:
        found.update(sampler.summary())
    return found


class ThreadSampler:
    """Samples this process's threads every ``interval_s`` while running: the CPUs they ran on, the
    peak of threads and the peak of runnable ones (state R, the sampler itself not counted), how
    many samples found k threads runnable (``runnable_counts[k]``: what a thread plan's "no more
    runnable compute threads than granted cores" is checked against; existing threads that wait
    blocked cost nothing) and in how many each thread name was runnable, and how many threads used
    CPU between their first and last sample (``busy_threads``)."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.cpus: set[int] = set()
        self.runnable_peak = 0
        self.runnable_counts: list[int] = []
        self.runnable_names: collections.Counter[str] = collections.Counter()
        self.threads_peak = 0
        self.samples = 0
        self.first_ticks: dict[int, int] = {}
        self.last_ticks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dlvirt-sampler", daemon=True)

    def _sample(self, own: int) -> None:
        runnable = 0
        tasks = os.listdir("/proc/self/task")
        for tid in tasks:
            if int(tid) == own:
                continue
            try:
                stat = Path(f"/proc/self/task/{tid}/stat").read_text()
            except OSError:  # the thread ended between listing and reading
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] == "R":
                runnable += 1
                self.runnable_names[stat[stat.index("(") + 1:stat.rindex(")")]] += 1
            self.cpus.add(int(fields[36]))  # field 39 of stat: the CPU it last ran on
            ticks = int(fields[11]) + int(fields[12])  # utime + stime
            self.first_ticks.setdefault(int(tid), ticks)
            self.last_ticks[int(tid)] = ticks
        self.runnable_peak = max(self.runnable_peak, runnable)
        self.runnable_counts += [0] * (runnable + 1 - len(self.runnable_counts))
        self.runnable_counts[runnable] += 1
        self.threads_peak = max(self.threads_peak, len(tasks))
        self.samples += 1

    def _loop(self) -> None:
        own = threading.get_native_id()
        while True:
            self._sample(own)
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, Any]:
        return {"cpus_ran_on": sorted(self.cpus), "threads_peak": self.threads_peak,
                "runnable_peak": self.runnable_peak, "runnable_counts": list(self.runnable_counts),
                "runnable_names": dict(self.runnable_names.most_common()),
                "thread_samples": self.samples,
                "busy_threads": sum(self.last_ticks[t] > first for t, first in self.first_ticks.items())}
