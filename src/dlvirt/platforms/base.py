"""The platform interface: provision → run the harness inside → verify what it saw → teardown.

A platform is a context manager, so teardown runs on success, on failure and on Ctrl-C (SIGINT);
``runner`` turns SIGTERM into the same path. Teardown runs with those signals held
(``dlvirt.core.signals.held``): one arriving meanwhile does not cut it in half.
"""

from __future__ import annotations

import math
import os
import stat
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

from dlvirt.core.kinds import PlatformKind
from dlvirt.core.records import HarnessJob, HarnessOutput
from dlvirt.core.scenario import Scenario
from dlvirt.core.signals import held
from dlvirt.core.untrusted import Budget, OutputRefused
from dlvirt.system import gpu, topology, whose
from dlvirt.system.engines import Daemon
from dlvirt.system.hostinfo import Capabilities


class PlatformError(RuntimeError):
    pass


class VerificationError(PlatformError):
    """What the harness observed inside the platform is not what the scenario asked for."""


@dataclass(frozen=True)
class Expected:
    """What the harness must observe inside the platform. ``None`` fields are not checked."""

    affinity: tuple[int, ...] | None = None
    nproc: int | None = None
    cpu_count: int | None = None
    quota_cores: float | None = None
    check_quota: bool = True
    container: str | None = None
    vm: str | None = None
    cgroup_id: str | None = None           # must appear in the harness's CPU cgroup path (a container's id)
    image: str | None = None               # the image tag the harness reads from inside its image
    memory_limit_bytes: int | None = None  # the cgroup memory limit the harness lives under (the tightest)
    memory_at_least_bytes: int | None = None  # what it may use (that limit, its kernel's MemTotal) is no less
    mem_total_at_most_bytes: int | None = None  # its kernel's MemTotal is no more (a guest's RAM)
    mems: tuple[int, ...] | None = None    # the memory nodes it may allocate on (Mems_allowed_list)
    sockets: int | None = None             # sockets its CPUs span, on the topology it sees
    nodes: int | None = None               # NUMA nodes its CPUs span, on the topology it sees
    quota_at_least: float | None = None    # no CFS quota over the harness (its own, an enclosing one) below this
    in_vm: bool | None = None              # the harness runs in a virtual machine
    pci_bus: bool | None = None            # it sees PCI devices (a PC-type VM) or none (a microVM)
    kernel: str | None = None              # the kernel release it runs on (a guest's own kernel)
    # the harness's own powers (observe.privileges): uid, euid, cap_eff, no_new_privs as they must be
    privileges: dict[str, Any] | None = None


def _cpu_cgroup_paths(cgroup: dict[str, str]) -> list[str]:
    """The harness's cgroup paths that limit CPU: the v1 cpu/cpuset hierarchies, else the v2 one."""
    v1 = [path for names, path in cgroup.items() if {"cpu", "cpuset"} & set(names.split(","))]
    return v1 or [cgroup.get("unified", "")]


def verify(expected: Expected, observed: dict[str, Any]) -> list[str]:
    """Mismatches between ``expected`` and one run's ``observed`` record (empty when all agree)."""
    problems = []
    if expected.affinity is not None and tuple(observed["affinity"]) != tuple(expected.affinity):
        problems.append(f"affinity {observed['affinity']} != requested {list(expected.affinity)}")
    if expected.nproc is not None and observed["nproc"] != expected.nproc:
        problems.append(f"nproc {observed['nproc']} != requested {expected.nproc}")
    if expected.cpu_count is not None and observed["cpu_count"] != expected.cpu_count:
        problems.append(f"cpu_count {observed['cpu_count']} != requested {expected.cpu_count}")
    if expected.check_quota:
        got = observed["quota_cores"]
        want = expected.quota_cores
        if (got is None) != (want is None) or (got is not None and want is not None
                                                and not math.isclose(got, want, rel_tol=1e-3)):
            problems.append(f"CFS quota {got} cores != requested {want}")
    floor, got_quota = expected.quota_at_least, observed["quota_cores"]
    if floor is not None and got_quota is not None and got_quota < floor - 1e-6:
        problems.append(f"the harness lives under a CFS quota of {got_quota:g} cores, fewer than the {floor:g} "
                        "asked (an enclosing cgroup limits the runner)")
    virt = observed["virtualization"]
    if expected.in_vm is not None and (virt["vm"] != "none") != expected.in_vm:
        problems.append(f"virtualization {virt['vm']!r}: expected {'a' if expected.in_vm else 'no'} VM")
    if expected.pci_bus is not None and "pci_devices" in observed and \
            (observed["pci_devices"] > 0) != expected.pci_bus:
        problems.append(f"{observed['pci_devices']} PCI devices: expected "
                        f"{'a PCI bus (a PC-type VM)' if expected.pci_bus else 'none (a microVM has no PCI bus)'}")
    if expected.kernel is not None and observed.get("kernel") != expected.kernel:
        problems.append(f"kernel {observed.get('kernel')!r} != the guest's {expected.kernel!r}")
    if expected.container is not None and virt["container"] != expected.container:
        problems.append(f"container type {virt['container']!r} != expected {expected.container!r}")
    if expected.vm is not None and virt["vm"] != expected.vm:
        problems.append(f"virtualization {virt['vm']!r} != expected {expected.vm!r}")
    if expected.cgroup_id is not None:
        outside = [p for p in _cpu_cgroup_paths(observed["cgroup"]) if expected.cgroup_id not in p]
        if outside:
            problems.append(f"CPU cgroup {outside} is not the one of {expected.cgroup_id[:12]}")
    if expected.image is not None and observed.get("image") != expected.image:
        problems.append(f"image {observed.get('image')!r} != requested {expected.image!r}")
    if expected.memory_limit_bytes is not None and observed.get("memory_limit_bytes") != expected.memory_limit_bytes:
        problems.append(f"memory limit {observed.get('memory_limit_bytes')} bytes != requested "
                        f"{expected.memory_limit_bytes} (study.memory)")
    problems += _memory_problems(expected, observed)
    if expected.privileges is not None:
        powers = observed.get("privileges") or {}
        problems += [f"{key} {powers.get(key)!r} inside != the {want!r} asked (least privilege)"
                     for key, want in expected.privileges.items() if powers.get(key) != want]
    seen = observed.get("placement") or {}
    if expected.mems is not None and tuple(seen.get("mems") or ()) != tuple(expected.mems):
        problems.append(f"memory nodes {seen.get('mems')} != requested {list(expected.mems)}")
    for key in ("sockets", "nodes"):
        want = getattr(expected, key)
        if want is not None and seen.get(key) != want:
            problems.append(f"CPUs span {seen.get(key)} {key} != expected {want}")
    return problems


def _memory_problems(expected: Expected, observed: dict[str, Any]) -> list[str]:
    """The memory the harness may use against study.memory: no cgroup limit and no kernel
    (MemTotal: a guest's RAM) gives it less; a guest's kernel has no more than its RAM."""
    problems = []
    floor, ceiling = expected.memory_at_least_bytes, expected.mem_total_at_most_bytes
    limit, total = observed.get("memory_limit_bytes"), observed.get("mem_total_bytes")
    if floor is not None:
        if limit is not None and limit < floor:
            problems.append(f"the harness lives under a memory limit of {limit >> 20} MiB, less than the "
                            f"{floor >> 20} MiB of study.memory (an enclosing cgroup limits the runner)")
        if total is None or total < floor:
            problems.append(f"its kernel has {'no recorded' if total is None else total >> 20} MiB of RAM "
                            f"(MemTotal), less than the {floor >> 20} MiB of study.memory")
    if ceiling is not None and total is not None and total > ceiling:
        problems.append(f"its kernel has {total >> 20} MiB of RAM (MemTotal), more than the {ceiling >> 20} MiB "
                        "the guest was given")
    return problems


def mismatches(expected: Expected, harness: HarnessOutput, uses_gpu: bool = False) -> dict[int, list[str]]:
    """Every repetition's (warm-ups included) mismatches with ``expected`` (and, ``uses_gpu``, its
    missing GPU use), by repetition; empty when each one got what was asked."""
    found = {r.repetition: verify(expected, r.observed) + (gpu.usage_problems(r.to_dict()) if uses_gpu else [])
             for r in harness.warmups + harness.runs}
    return {rep: problems for rep, problems in found.items() if problems}


def require_verified(what: str, expected: Expected, harness: HarnessOutput, uses_gpu: bool = False) -> None:
    """Raise VerificationError naming ``what`` and every mismatch, unless every repetition got what was asked."""
    problems = mismatches(expected, harness, uses_gpu)
    if problems:
        lines = "; ".join(f"rep {rep}: {', '.join(p)}" for rep, p in problems.items())
        raise VerificationError(f"{what}: the platform did not give what was asked: {lines}")


def job_input_paths(job: HarnessJob) -> list[Path]:
    """Host files and folders the harness reads: the dataset folder, every ``path`` in the app's
    settings (a real dataset, a weights file) and the weights resource. Platforms with their own file
    system share exactly these."""
    found = [Path(job.dataset_dir).resolve()]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "path" and isinstance(value, str) and value:
                    found.append(Path(value).resolve())
                else:
                    walk(value)

    walk(job.app_settings)
    if job.weights is not None:
        found.append(Path(job.weights["path"]).resolve())
    return sorted(set(found))


def copy_regular_files(src: Path, dest: Path, budget: Budget | None = None, depth: int = 0) -> None:
    """Copy what an untrusted writer left under ``src`` to the new folder ``dest``: directories and
    regular files only (symlinks, devices, FIFOs and sockets stay behind, nothing is followed out of
    ``src``), every file with a plain mode (no setuid, no owner kept), within ``budget`` (entries,
    bytes and depth: ``untrusted``'s caps by default; PlatformError beyond them, before the file
    that breaks them is copied)."""
    budget = budget or Budget(f"the container's out folder {src}")
    dest.mkdir(mode=0o755)
    try:
        for entry in os.scandir(src):
            target = dest / entry.name
            if entry.is_dir(follow_symlinks=False):
                budget.take(depth)
                copy_regular_files(Path(entry.path), target, budget, depth + 1)
            elif entry.is_file(follow_symlinks=False):
                fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                with os.fdopen(fd, "rb") as source:
                    info = os.fstat(source.fileno())
                    if not stat.S_ISREG(info.st_mode):
                        continue
                    budget.take(depth, info.st_size)
                    with open(target, "xb") as copy:
                        left = info.st_size  # what it held when counted, no more
                        while left > 0 and (block := source.read(min(left, 1 << 20))):
                            copy.write(block)
                            left -= len(block)
    except OutputRefused as refused:
        raise PlatformError(str(refused)) from None


class Platform(ABC):
    kind: ClassVar[PlatformKind]  # what the rest of dlvirt knows about it (each platform module declares it)
    name: ClassVar[str]           # kind.name
    # Settings of its config section that are paths ("file" or "dir"), which the config check
    # looks at before any job is built.
    path_settings: ClassVar[dict[str, str]] = {}
    # a pinned scenario's CPUs and memory nodes, chosen by provision (None: not pinned)
    placement: topology.Placement | None = None
    # the launch's processes start in the runner's cgroup (bare metal, a VMM the runner starts), not
    # in one its engine makes: what keep_others_away's cgroup v2 partition needs (system.keepaway_v2)
    launch_in_runner_cgroup: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            cls.name = cls.kind.name

    def __init__(self, scenario: Scenario, config: dict[str, Any], workdir: Path, run_id: str) -> None:
        self.scenario = scenario
        self.config = config
        self.workdir = Path(workdir)
        self.run_id = run_id

    @classmethod
    def unavailable_reason(cls, scenario: Scenario, caps: Capabilities, config: dict[str, Any]) -> str | None:
        """Why this host cannot run ``scenario`` (None when it can). Subclasses add engine checks."""
        if scenario.cores > caps.cores:
            return f"{scenario.cores} cores requested, host has {caps.cores}"
        if scenario.processor == "GPU" and not caps.gpus:
            return "no GPU on this host (nvidia-smi lists none)"
        return None

    @classmethod
    def host_memory_mib(cls, memory_mib: int) -> int:
        """The host memory one job takes for a ``study.memory`` of ``memory_mib``: that limit (a
        guest adds its overhead)."""
        return memory_mib

    @property
    def memory_mib(self) -> int | None:
        """``study.memory`` in MiB, which the workflow puts into every platform's settings
        (``memory_mib``); None in a hand-made spec that asks for no memory limit."""
        value = self.config.get("memory_mib")
        return None if value is None else int(value)

    @classmethod
    def daemons(cls, platforms: dict[str, Any]) -> list[Daemon]:
        """Engines this platform needs running on this host (``platforms``: the config's platforms
        section); the workflow starts them at its start when none answers (``dlvirt.system.engines``)."""
        return []

    def place(self, allowed: tuple[int, ...], root: Path | str = "/") -> topology.Placement:
        """The CPUs and memory nodes a pinned scenario gets among ``allowed`` (the CPUs the runner
        may use), by the ``placement`` policy in this platform's settings (``platforms.placement``)
        on the topology under ``root``: small instances stay on one socket/NUMA node."""
        policy = str(self.config.get("placement") or topology.DEFAULT_POLICY)
        try:
            return topology.place(topology.read(root), self.scenario.cores, policy, allowed)
        except topology.TopologyError as exc:
            raise PlatformError(str(exc)) from None

    @abstractmethod
    def provision(self) -> None:
        """Create the platform (cgroup, container engine state, VM) before any run."""

    @abstractmethod
    def run(self, job: HarnessJob, timeout_s: float) -> HarnessOutput:
        """Run the harness with ``job`` inside the platform; return the harness's output document."""

    @abstractmethod
    def expected(self) -> Expected:
        """What the harness must observe inside for this scenario."""

    @abstractmethod
    def teardown(self) -> None:
        """Remove everything provision/run created. Must be safe to call twice and after a failure."""

    def launch_tasks(self) -> whose.Launch:
        """Which host processes are the launch while it runs (``whose``, asked from another thread):
        here the runner's descendants, the harness process bare metal starts."""
        return whose.Launch()

    def describe(self) -> dict[str, Any]:
        """Facts about the platform as measured (engine, versions, accelerator) for result files."""
        return {"platform": self.name}

    def startup_s(self, harness: HarnessOutput, run_started_unix: float) -> float | None:
        """Seconds from the start of ``run`` until the harness inside had imported its framework
        (None: not measured). A process or a container shares this host's wall clock."""
        ready = (harness.timeline or {}).get("ready_unix")
        return None if ready is None else ready - run_started_unix

    def __enter__(self) -> Self:
        try:
            self.provision()
        except BaseException:
            with held():
                self.teardown()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with held():
            self.teardown()
