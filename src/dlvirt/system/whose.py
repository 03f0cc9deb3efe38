"""Whose CPU time a launch's host CPUs gave, seen from the host: the launch's, its platform's, or
other processes' (docs/measurement.md, "Interference").

A ``Sampler`` in the runner reads, while the platform runs the launch, the per-CPU lines of
``/proc/stat`` for the launch's host CPUs and every thread of every process on the host
(``/proc/<pid>/task/<tid>/stat``: CPU time, the CPU it last ran on), every ``INTERVAL_S`` (longer
where a reading takes more than ``MAX_SELF_SHARE`` of it: a host of many threads), from a thread
kept off the launch's CPUs where others remain. A thread's CPU time over an interval counts on the
launch's CPUs when it was last seen on one of them at the interval's end (exact for pinned threads:
a PIN launch's, a guest's vCPU threads, per-CPU kernel threads). Whose it is (``classify``):

- **the launch's** (``Launch``): bare metal, the runner's descendants (the harness, a tool's own
  process); a container, every process in its cgroup; a guest (VM, MVM, VMCN), its VMM's vCPU threads;
- **the platform's**: kernel threads; the runner and its ancestors (dlvirt, Snakemake); the engines
  (``PLATFORM_NAMES``: dockerd, containerd, containerd-shim, runc, docker-proxy, libvirtd and its
  drivers, virtlogd, virtlockd, virtiofsd) and their descendants in no container's cgroup (an OCI
  runtime's helpers: gVisor's gofer, runsc's and crun's calls); the launch's VMM's other threads (QEMU's main loop and
  I/O threads, Firecracker's API and VMM threads); in a guest, the runner's descendants;
- **others'**: the rest of the CPUs' busy time (user + nice + system; interrupts are the kernel's),
  so also what ended unseen between two readings; ``others_seen`` names the busiest of them.

Time of threads that ended between two readings stays in their process's total, and a reaped child's
in its parent's child times (less what was seen of it at the last reading): it counts as that
process's, on the launch's CPUs in the share its live threads ran there. ``window`` sums the
intervals over a repetition's window (a partly covered interval in proportion): good to about
``ACCOUNTING_TICKS`` ticks and an interval's edge either way.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

Whose = Literal["launch", "platform", "other"]

INTERVAL_S = 0.25
MAX_SELF_SHARE = 0.05  # a reading may take at most this share of its interval
# Per-CPU and per-thread times tick at the scheduler's tick (USER_HZ): a repetition's others' time is
# good to about this many ticks either way (the two are read at slightly different instants)
ACCOUNTING_TICKS = 3
PF_KTHREAD = 0x00200000  # /proc/<pid>/stat flags: a kernel thread (include/linux/sched.h)
# the engines' processes (comm, at most 15 characters: containerd-shim-runc-v2 reads containerd-shim)
PLATFORM_NAMES = re.compile(r"dockerd|containerd|containerd-shim.*|runc|runc:\[.*\]|docker-proxy|libvirtd"
                            r"|virtqemud|virtlogd|virtlockd|virtnetworkd|virtstoraged|virtiofsd")
# a container's cgroup (Docker's cgroupfs and systemd drivers): a process in one is a container's
CONTAINER_CGROUP = re.compile(r"docker[-/][0-9a-f]{64}")
# a VMM's vCPU threads: QEMU's with debug-threads=on (KVM or TCG), Firecracker's
VCPU_THREAD = re.compile(r"CPU \d+/(KVM|TCG)|fc_vcpu \d+")


@dataclasses.dataclass(frozen=True)
class Launch:
    """Which of the host's processes are the launch: the runner's descendants (bare metal;
    otherwise they are the platform's), every process in a cgroup whose path holds ``cgroup`` (a
    container's id), the vCPU threads of VMM process ``vmm`` (its other threads are the platform's)."""

    runner_children: bool = True
    cgroup: str | None = None
    vmm: int | None = None


@dataclasses.dataclass(frozen=True)
class Thread:
    process: tuple[int, int]  # its process's (pid, start time)
    ticks: int                # utime + stime
    on_cpus: bool             # last seen on one of the launch's CPUs
    whose: Whose


@dataclasses.dataclass(frozen=True)
class Process:
    comm: str
    ppid: int
    ticks: int      # utime + stime of every thread it had, ended ones included
    children: int   # cutime + cstime: its reaped children's
    whose: Whose    # its threads' (a VMM's vCPU threads: the launch's, the rest: this)
    on_cpus: bool   # its main thread last seen on one of the launch's CPUs


@dataclasses.dataclass(frozen=True)
class Reading:
    unix_s: float
    busy: int       # user + nice + system of the launch's CPUs
    steal: int
    processes: dict[tuple[int, int], Process]       # (pid, start time)
    threads: dict[tuple[int, int, int], Thread]     # (pid, tid, start time)


def _stat(path: str) -> tuple[str, list[str]] | None:
    """A /proc stat file's comm and the fields after it (None: the task ended)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    return text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()


def _in_cgroup(pid: int, part: str) -> bool:
    try:
        return part in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False


def ancestors(pid: int) -> set[int]:
    """``pid`` and the processes above it, up to init (not included)."""
    found = set()
    while pid > 1:
        found.add(pid)
        stat = _stat(f"/proc/{pid}/stat")
        if stat is None:
            break
        pid = int(stat[1][1])
    return found


def _in_a_container(pid: int) -> bool:
    try:
        return CONTAINER_CGROUP.search(Path(f"/proc/{pid}/cgroup").read_text()) is not None
    except OSError:
        return False


def classify(pid: int, comm: str, kernel: bool, runner: set[int], below_runner: bool, launch: Launch,
             below_engine: bool = False) -> Whose:
    """Whose a host process is (a VMM's vCPU threads aside: ``thread_whose``); ``runner``: the
    runner and its ancestors; ``below_runner``: ``pid`` descends from the runner; ``below_engine``:
    from an engine's process (``PLATFORM_NAMES``)."""
    if kernel or pid in runner or pid == launch.vmm or PLATFORM_NAMES.fullmatch(comm):
        return "platform"
    if launch.cgroup is not None and _in_cgroup(pid, launch.cgroup):
        return "launch"
    if below_runner:
        return "launch" if launch.runner_children else "platform"
    # an OCI runtime's helpers outside any container (gVisor's gofer, runsc's and crun's calls)
    if below_engine and not _in_a_container(pid):
        return "platform"
    return "other"


def thread_whose(process: Whose, pid: int, thread_comm: str, launch: Launch) -> Whose:
    """A thread's: its process's, but the launch's for a vCPU thread of the launch's VMM."""
    return "launch" if pid == launch.vmm and VCPU_THREAD.fullmatch(thread_comm) else process


def _cpu_ticks(cpus: frozenset[int]) -> tuple[int, int]:
    """The busy (user + nice + system) and steal ticks of ``cpus`` so far (/proc/stat)."""
    busy = steal = 0
    wanted = {f"cpu{c}" for c in cpus}
    for line in Path("/proc/stat").read_text().splitlines():
        name, _, values = line.partition(" ")
        if name in wanted:
            ticks = [int(v) for v in values.split()]
            busy += sum(ticks[:3])
            steal += ticks[7] if len(ticks) > 7 else 0
    return busy, steal


def read(cpus: frozenset[int], launch: Launch, runner: set[int], runner_pid: int) -> Reading:
    """One reading of the launch's CPUs and of every thread on the host. The threads are read one
    after another: the CPUs' counters and the clock are taken before and after them, and the
    reading holds their means (its instant is the scan's middle)."""
    began, (busy_before, steal_before) = time.time(), _cpu_ticks(cpus)
    stats: dict[int, tuple[str, list[str]]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (stat := _stat(f"/proc/{name}/stat")) is not None:
            stats[int(name)] = stat
    below: set[int] = set()
    children: dict[int, list[int]] = collections.defaultdict(list)
    for pid, (_, fields) in stats.items():
        children[int(fields[1])].append(pid)
    todo = list(children.get(runner_pid, []))
    while todo:
        pid = todo.pop()
        below.add(pid)
        todo += children.get(pid, [])
    below_engines: set[int] = set()
    todo = [child for pid, (comm, _) in stats.items() if PLATFORM_NAMES.fullmatch(comm)
            for child in children.get(pid, [])]
    while todo:
        pid = todo.pop()
        below_engines.add(pid)
        todo += children.get(pid, [])
    processes: dict[tuple[int, int], Process] = {}
    threads: dict[tuple[int, int, int], Thread] = {}
    for pid, (comm, fields) in stats.items():
        kernel = bool(int(fields[6]) & PF_KTHREAD) or int(fields[1]) == 2
        whose = classify(pid, comm, kernel, runner, pid in below, launch, pid in below_engines)
        key = (pid, int(fields[19]))
        processes[key] = Process(comm=comm, ppid=int(fields[1]), ticks=int(fields[11]) + int(fields[12]),
                                 children=int(fields[13]) + int(fields[14]), whose=whose,
                                 on_cpus=int(fields[36]) in cpus)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{pid}/task"):
                if (stat := _stat(f"/proc/{pid}/task/{task}/stat")) is not None:
                    thread_comm, tf = stat
                    threads[(pid, int(task), int(tf[19]))] = Thread(
                        process=key, ticks=int(tf[11]) + int(tf[12]), on_cpus=int(tf[36]) in cpus,
                        whose=thread_whose(whose, pid, thread_comm, launch))
    ended, (busy_after, steal_after) = time.time(), _cpu_ticks(cpus)
    return Reading(unix_s=(began + ended) / 2, busy=(busy_before + busy_after) // 2,
                   steal=(steal_before + steal_after) // 2, processes=processes, threads=threads)


def interval(before: Reading, after: Reading) -> dict[str, Any]:
    """What the launch's CPUs gave between two readings (ticks): busy, steal, the launch's, the
    platform's, and the visible others' by process name."""
    on: dict[str, int] = {"launch": 0, "platform": 0, "other": 0}
    names: collections.Counter[str] = collections.Counter()
    live: dict[tuple[int, int], list[int]] = collections.defaultdict(lambda: [0, 0])  # process: [on, all]
    for tkey, thread in after.threads.items():
        seen = before.threads.get(tkey)
        ran = max(0, thread.ticks - (seen.ticks if seen else 0))
        live[thread.process][1] += ran
        if thread.on_cpus:
            live[thread.process][0] += ran
            on[thread.whose] += ran
            if thread.whose == "other" and thread.process in after.processes:
                names[after.processes[thread.process].comm] += ran
    # a child reaped meanwhile moved its whole time into its parent's child times: what of it was
    # seen at the last reading (in its own or its threads' counts) is taken off again
    seen_of_reaped: collections.Counter[int] = collections.Counter()
    for key, process in before.processes.items():
        if key not in after.processes:
            seen_of_reaped[process.ppid] += process.ticks + process.children
    for key, process in after.processes.items():
        earlier = before.processes.get(key)
        ran_on, ran_all = live.get(key, (0, 0))
        threads_ended = process.ticks - (earlier.ticks if earlier else 0) - ran_all
        children = process.children - (earlier.children if earlier else 0) - seen_of_reaped[key[0]]
        residual = max(0, threads_ended) + max(0, children)
        if residual:
            counted = round(residual * (ran_on / ran_all if ran_all else float(process.on_cpus)))
            on[process.whose] += counted
            if process.whose == "other" and counted:
                names[process.comm] += counted
    return {"t0": before.unix_s, "t1": after.unix_s, "busy": after.busy - before.busy,
            "steal": after.steal - before.steal, "launch": on["launch"], "platform": on["platform"],
            "names": dict(names)}


def window(intervals: list[dict[str, Any]], start: float, end: float, cpus: int,
           cores: float | None = None) -> dict[str, Any] | None:
    """Whose the launch's ``cpus`` CPUs' time was from ``start`` to ``end`` (host clock, seconds):
    the intervals' sums, a partly covered interval in proportion; None where the readings do not
    cover the window. ``cores``: how many CPUs' time the launch may use of them (a vanilla launch's
    quota; None: all). Others' share is of those cores' time, counting only what others took beyond
    the rest (``cpus - cores``, less what the platform used of it): a 1-core launch floating on two
    CPUs is not disturbed by a process on the core its quota leaves idle."""
    if not intervals or end <= start or start < intervals[0]["t0"] or end > intervals[-1]["t1"]:
        return None
    summed: dict[str, float] = {"busy": 0.0, "steal": 0.0, "launch": 0.0, "platform": 0.0}
    names: collections.Counter[str] = collections.Counter()
    for part in intervals:
        overlap = min(end, part["t1"]) - max(start, part["t0"])
        if overlap <= 0 or part["t1"] <= part["t0"]:
            continue
        share = overlap / (part["t1"] - part["t0"])
        for key in summed:
            summed[key] += part[key] * share
        for name, ticks in part["names"].items():
            names[name] += ticks * share  # type: ignore[assignment]
    tick = os.sysconf("SC_CLK_TCK")
    span = end - start
    usable = min(float(cpus), cores or float(cpus))
    # never more than the CPUs had, never less than nothing: the counters tick at other instants
    capacity = span * cpus * tick
    others = max(0.0, min(summed["busy"], capacity) - summed["launch"] - summed["platform"])
    platform = min(summed["platform"], capacity)
    spare = max(0.0, (cpus - usable) * span * tick - platform)
    taken = max(0.0, others - spare)
    return {"window_s": round(span, 4), "accounted_from": "host", "launch_cores": usable,
            "launch_on_cpus_s": round(summed["launch"] / tick, 4),
            "others_on_cpus_s": round(others / tick, 4),
            "others_taken_s": round(taken / tick, 4),
            "others_on_cpus_share": round(taken / tick / (span * usable), 4),
            "platform_on_cpus_s": round(platform / tick, 4),
            "platform_on_cpus_share": round(platform / tick / (span * cpus), 4),
            "steal_on_cpus_s": round(summed["steal"] / tick, 4),
            "others_seen": {name: round(ticks / tick, 3) for name, ticks in names.most_common(3) if ticks >= 1}}


class Sampler:
    """Reads whose the launch's ``cpus`` gave, in a thread of its own, while the block runs;
    ``intervals`` holds what each pair of readings found (``interval``); ``launch()`` says which
    processes are the launch, asked at each reading (a container or VMM appears as the platform
    starts it)."""

    def __init__(self, cpus: tuple[int, ...], launch: Callable[[], Launch], interval_s: float = INTERVAL_S) -> None:
        self.cpus = frozenset(cpus)
        self.launch = launch
        self.interval_s = interval_s
        self.intervals: list[dict[str, Any]] = []
        self.runner_pid = os.getpid()
        self.runner = ancestors(self.runner_pid)
        self._last: Reading | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dlvirt-whose", daemon=True)

    def _read(self) -> float:
        """Take a reading, add its interval; the CPU seconds it took."""
        began = time.thread_time()
        reading = read(self.cpus, self.launch(), self.runner, self.runner_pid)
        if self._last is not None:
            self.intervals.append(interval(self._last, reading))
        self._last = reading
        return time.thread_time() - began

    def _loop(self) -> None:
        # off the launch's CPUs where the runner has others: the readings' own time is not the launch's CPUs'
        rest = os.sched_getaffinity(0) - self.cpus
        if rest:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(threading.get_native_id(), rest)
        took = 0.0
        while not self._stop.wait(max(self.interval_s, took / MAX_SELF_SHARE)):
            took = self._read()

    def __enter__(self) -> Self:
        self._read()
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        if exc_type is None:
            self._read()

    def window(self, start: float, end: float, cores: float | None = None) -> dict[str, Any] | None:
        return window(self.intervals, start, end, len(self.cpus), cores)
