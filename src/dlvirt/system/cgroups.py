"""Create, join and remove cgroups on cgroup v1 or v2, and read the limits a process lives under.

Bare metal uses the same kernel mechanisms Docker uses (CFS quota for ``--cpus``, cpusets for
``--cpuset-cpus``, the memory controller's limit for ``--memory``), so BM and CN scenarios differ
only in the platform, not in how cores and memory are limited.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from dlvirt.system.topology import format_cpulist

ROOT = Path("/sys/fs/cgroup")
CFS_PERIOD_US = 100_000


class CgroupError(RuntimeError):
    pass


def v2_root() -> Path | None:
    if (ROOT / "cgroup.controllers").exists():
        return ROOT
    return None


# The file that tells a v1 hierarchy carries the controller.
_V1_MARKER = {"cpu": "cpu.cfs_quota_us", "cpuset": "cpuset.cpus", "memory": "memory.limit_in_bytes"}


def v1_dir(controller: str) -> Path | None:
    for candidate in (ROOT / controller, ROOT / "cpu,cpuacct"):
        if (candidate / _V1_MARKER[controller]).exists():
            return candidate
    return None


def v1_hierarchies() -> list[Path]:
    """The v1 hierarchies dlvirt makes groups in (none on a pure v2 host)."""
    return sorted({d for c in _V1_MARKER if (d := v1_dir(c)) is not None})


def version() -> int | None:
    """2 on a pure cgroup v2 host, 1 where the CPU controllers are on v1 (including hybrid hosts)."""
    if v2_root() is not None:
        return 2
    if v1_dir("cpu") is not None:
        return 1
    return None


# where a hybrid host (cgroup v1 controllers) mounts its cgroup2 tree (systemd's layout)
HYBRID_V2 = Path("/sys/fs/cgroup/unified")


def hybrid_v2_controllers(root: Path = HYBRID_V2) -> list[str]:
    """The controllers of a hybrid host's cgroup2 tree (empty: not hybrid, or none there)."""
    try:
        return (root / "cgroup.controllers").read_text().split() if version() == 1 else []
    except OSError:
        return []


@dataclass
class Cgroup:
    """A cgroup this process created; ``remove()`` kills what is left in it and deletes it."""

    dirs: list[Path] = field(default_factory=list)

    def attach(self, pid: int) -> None:
        for directory in self.dirs:
            (directory / "cgroup.procs").write_text(f"{pid}\n")

    def pids(self) -> set[int]:
        found: set[int] = set()
        for directory in self.dirs:
            with contextlib.suppress(OSError):
                found |= {int(p) for p in (directory / "cgroup.procs").read_text().split()}
        return found

    def remove(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        errors = []
        for directory in reversed(self.dirs):
            last: OSError | None = None
            for _ in range(50):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:  # EBUSY while the last task exits
                    last = exc
                    time.sleep(0.1)
            else:
                errors.append(f"{directory}: {last}")
        self.dirs.clear()
        if errors:
            raise CgroupError("could not remove cgroup(s): " + "; ".join(errors))


def v2_parent(root: Path, own: str, wanted: list[str]) -> Path:
    """The v2 group a job's group goes in, with ``wanted`` controllers enabled for its children: the
    nearest group from this process's own (``own``, relative to ``root``) up to the root that may have
    such children, so that the limits above the runner (a SLURM job's, a session's) still hold and
    still count it, and a hard-killed job's harness dies with the job. v2 lets a group hand
    controllers down only when it holds no process itself (the root is exempt), so the runner's own
    group is usually skipped for its parent."""
    problems = []
    for directory in walk_up(root, own):
        try:
            available = (directory / "cgroup.controllers").read_text().split()
            busy = directory != root and bool((directory / "cgroup.procs").read_text().split())
        except OSError as exc:
            problems.append(f"{directory}: {exc}")
            continue
        missing = [c for c in wanted if c not in available]
        if busy or missing:
            problems.append(f"{directory}: " + ("holds processes" if busy else f"lacks {' '.join(missing)}"))
            continue
        control = directory / "cgroup.subtree_control"
        try:
            enabled = control.read_text().split()
            for controller in wanted:
                if controller not in enabled:
                    control.write_text(f"+{controller}\n")
        except OSError as exc:
            problems.append(f"{control}: {exc}")
            continue
        return directory
    raise CgroupError(f"no cgroup v2 group from this process's own up to {root} can hold a group with "
                      f"{' '.join(wanted) or 'no controllers'} (creating one needs root): " + "; ".join(problems))


def _v1_group(group: Cgroup, controller: str, name: str, nested: bool = False) -> Path:
    """Group ``name`` in the v1 hierarchy of ``controller``, made once and added to ``group``
    (two controllers may share a hierarchy); ``nested``: inside this process's own group there,
    so that a limit above it (a SLURM job's, a session's) still holds and still counts it."""
    base = v1_dir(controller)
    if base is None:
        raise CgroupError(f"no cgroup v1 {controller} controller mounted under /sys/fs/cgroup")
    directory = (walk_up(base, own_path(controller))[0] if nested else base) / name
    if directory not in group.dirs:
        directory.mkdir()
        group.dirs.append(directory)
    return directory


def create(name: str, *, quota_cores: float | None = None, cpus: tuple[int, ...] | None = None,
           mems: tuple[int, ...] | None = None, memory_bytes: int | None = None) -> Cgroup:
    """Create cgroup ``name`` limited by a CFS quota of ``quota_cores`` and/or the cpuset ``cpus``
    with its memory nodes ``mems`` (default: the parent's) and/or a memory limit of
    ``memory_bytes``, without swap (what docker's ``--memory`` with ``--memory-swap`` equal sets)."""
    group = Cgroup()
    pinned = cpus is not None or mems is not None
    try:
        root = v2_root()
        if root is not None:
            wanted = [c for c, on in (("cpu", quota_cores is not None), ("cpuset", pinned),
                                      ("memory", memory_bytes is not None)) if on]
            directory = v2_parent(root, own_path(None), wanted) / name
            directory.mkdir()
            group.dirs.append(directory)
            # cpuset.mems before cpuset.cpus, as v1 needs: an empty v2 file means the parent's
            if mems is not None:
                (directory / "cpuset.mems").write_text(format_cpulist(mems))
            if cpus is not None:
                (directory / "cpuset.cpus").write_text(format_cpulist(cpus))
            if quota_cores is not None:
                quota = math.ceil(quota_cores * CFS_PERIOD_US)
                (directory / "cpu.max").write_text(f"{quota} {CFS_PERIOD_US}\n")
            if memory_bytes is not None:
                (directory / "memory.max").write_text(f"{memory_bytes}\n")
                if (directory / "memory.swap.max").exists():  # absent without swap accounting
                    (directory / "memory.swap.max").write_text("0\n")
            return group
        if quota_cores is not None:
            directory = _v1_group(group, "cpu", name)
            (directory / "cpu.cfs_period_us").write_text(f"{CFS_PERIOD_US}\n")
            (directory / "cpu.cfs_quota_us").write_text(f"{math.ceil(quota_cores * CFS_PERIOD_US)}\n")
        if pinned:
            directory = _v1_group(group, "cpuset", name)
            base = directory.parent
            # a v1 cpuset starts empty: both files must be set before a task may join
            (directory / "cpuset.mems").write_text(format_cpulist(mems) if mems is not None
                                                   else (base / "cpuset.mems").read_text())
            (directory / "cpuset.cpus").write_text(format_cpulist(cpus) if cpus is not None
                                                   else (base / "cpuset.cpus").read_text())
        if memory_bytes is not None:
            directory = _v1_group(group, "memory", name, nested=True)
            # the limit first: memory+swap may not be set below it
            (directory / "memory.limit_in_bytes").write_text(f"{memory_bytes}\n")
            if (directory / "memory.memsw.limit_in_bytes").exists():  # absent without swap accounting
                (directory / "memory.memsw.limit_in_bytes").write_text(f"{memory_bytes}\n")
        return group
    except BaseException:
        group.remove()
        raise


def own_path(controller: str | None) -> str:
    """This process's cgroup path for a v1 controller, or the v2 path when ``controller`` is None."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller is None and names == "":
            return path
        if controller is not None and controller in names.split(","):
            return path
    return "/"


def own_cgroup_paths() -> dict[str, str]:
    paths = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        paths[names or "unified"] = path
    return paths


def walk_up(mount: Path, rel: str) -> list[Path]:
    """Directories from this process's cgroup up to the mount root.

    Inside a container the recorded path may not exist under the (namespaced) mount: then the
    mount root itself is the container's cgroup."""
    start = mount / rel.lstrip("/")
    if not start.exists():
        start = mount
    chain = [start]
    while chain[-1] != mount and mount in chain[-1].parents:
        chain.append(chain[-1].parent)
    return chain


def _quotas() -> list[tuple[Path, float]]:
    """Each CPU cgroup from this process's own up to the root that sets a CFS quota, with it in cores."""
    quotas: list[tuple[Path, float]] = []
    root = v2_root()
    if root is not None:
        for directory in walk_up(root, own_path(None)):
            with contextlib.suppress(OSError):
                quota, period = (directory / "cpu.max").read_text().split()
                if quota != "max":
                    quotas.append((directory, int(quota) / int(period)))
    else:
        base = v1_dir("cpu")
        if base is None:
            return []
        for directory in walk_up(base, own_path("cpu")):
            with contextlib.suppress(OSError, ValueError):
                quota_us = int((directory / "cpu.cfs_quota_us").read_text())
                period_us = int((directory / "cpu.cfs_period_us").read_text())
                if quota_us > 0:
                    quotas.append((directory, quota_us / period_us))
    return quotas


def effective_quota_cores() -> float | None:
    """The tightest CFS quota (in cores) over this process's cgroup and its ancestors; None if unlimited."""
    quotas = [cores for _, cores in _quotas()]
    return min(quotas) if quotas else None


def throttling_cgroup() -> Path | None:
    """The CPU cgroup whose quota limits this process (the tightest), else its own CPU cgroup."""
    quotas = _quotas()
    if quotas:
        return min(quotas, key=lambda item: item[1])[0]
    root = v2_root()
    if root is not None:
        return walk_up(root, own_path(None))[0]
    base = v1_dir("cpu")
    return None if base is None else walk_up(base, own_path("cpu"))[0]


def cpu_stat(directory: Path | None = None) -> dict[str, float] | None:
    """CFS bandwidth counters of ``directory`` (default: ``throttling_cgroup()``): ``nr_periods``,
    ``nr_throttled`` and ``throttled_s`` (v1 ``throttled_time`` ns, v2 ``throttled_usec``); None
    where there is no cpu.stat to read."""
    directory = throttling_cgroup() if directory is None else directory
    if directory is None:
        return None
    try:
        fields = dict(line.split() for line in (directory / "cpu.stat").read_text().splitlines() if line.strip())
    except (OSError, ValueError):
        return None
    if "throttled_usec" in fields:
        throttled_s = int(fields["throttled_usec"]) / 1e6
    elif "throttled_time" in fields:
        throttled_s = int(fields["throttled_time"]) / 1e9
    else:  # v2 without the cpu controller enabled: no bandwidth counters
        return None
    return {"nr_periods": float(fields.get("nr_periods", 0)), "nr_throttled": float(fields.get("nr_throttled", 0)),
            "throttled_s": throttled_s}


def effective_memory_limit_bytes() -> int | None:
    """The tightest memory limit over this process's cgroup and its ancestors; None if unlimited."""
    limits: list[int] = []
    root = v2_root()
    if root is not None:
        chain, limit_file = walk_up(root, own_path(None)), "memory.max"
    else:
        base = v1_dir("memory")
        if base is None:
            return None
        chain, limit_file = walk_up(base, own_path("memory")), "memory.limit_in_bytes"
    for directory in chain:
        with contextlib.suppress(OSError, ValueError):
            text = (directory / limit_file).read_text().strip()
            # v1 spells "unlimited" as the largest page-aligned 64-bit value
            if text != "max" and int(text) < 1 << 62:
                limits.append(int(text))
    return min(limits) if limits else None
