"""The host's CPU and memory topology read from sysfs, and where a pinned scenario's cores go.

On most two-socket Linux servers CPU numbers alternate between sockets (0, 2, 4, … on socket 0;
1, 3, 5, … on socket 1) and SMT siblings come after all cores, so "the first N CPUs" span both
sockets and include hyperthread pairs. Placement therefore works from the topology itself:
NUMA nodes (``/sys/devices/system/node``), packages, dies, cores and their SMT siblings.

Policies for ``platforms.placement``:

- ``compact`` (default): one NUMA node's physical cores before the next node's, SMT siblings last;
  the first node that can hold all N physical cores is used alone.
- ``spread``: physical cores alternating over the nodes, SMT siblings last.
- ``smt``: sibling pairs first (both threads of a core before the next core), one node at a time.

``root`` is the directory holding ``sys/`` (``/`` on a real host, a fixture tree in tests).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POLICIES = ("compact", "spread", "smt")
DEFAULT_POLICY = "compact"


class TopologyError(RuntimeError):
    pass


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Kernel list format ("0-3,8,10-11") to sorted CPU (or node) numbers."""
    found: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        found.update(range(int(first), int(last or first) + 1))
    return tuple(sorted(found))


def format_cpulist(cpus: Iterable[int]) -> str:
    """Numbers to the kernel list format, ranges collapsed ("0-3,8")."""
    ranges: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


@dataclass(frozen=True)
class Cpu:
    """One logical CPU: where it sits (package = socket, die, core) and its NUMA node."""

    cpu: int
    package: int
    die: int
    core: int
    node: int

    @property
    def core_key(self) -> tuple[int, int, int]:
        """The physical core this logical CPU is a thread of."""
        return (self.package, self.die, self.core)


@dataclass(frozen=True)
class Topology:
    cpus: tuple[Cpu, ...]  # online CPUs, by number

    def by_cpu(self) -> dict[int, Cpu]:
        return {c.cpu: c for c in self.cpus}

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(sorted({c.node for c in self.cpus}))

    @property
    def packages(self) -> tuple[int, ...]:
        return tuple(sorted({c.package for c in self.cpus}))

    def threads_per_core(self) -> int:
        counts: dict[tuple[int, int, int], int] = {}
        for c in self.cpus:
            counts[c.core_key] = counts.get(c.core_key, 0) + 1
        return max(counts.values(), default=1)

    def span(self, cpus: Iterable[int]) -> dict[str, Any]:
        """Which sockets and NUMA nodes ``cpus`` lie on (CPUs this topology lacks are ignored)."""
        known = self.by_cpu()
        chosen = [known[c] for c in cpus if c in known]
        nodes = sorted({c.node for c in chosen})
        packages = sorted({c.package for c in chosen})
        return {"sockets": len(packages), "nodes": len(nodes), "socket_ids": packages, "node_ids": nodes}

    def describe(self) -> dict[str, Any]:
        """Host facts: sockets, nodes with their CPUs, SMT."""
        return {
            "sockets": len(self.packages),
            "numa_nodes": {f"node{n}": format_cpulist(c.cpu for c in self.cpus if c.node == n) for n in self.nodes},
            "threads_per_core": self.threads_per_core(),
            "cpus": len(self.cpus),
        }


def _read_int(path: Path, default: int) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return default


def read(root: Path | str = "/") -> Topology:
    """The online CPUs under ``root``/sys with their package, die, core and node. A kernel without
    NUMA sysfs puts every CPU on node 0."""
    base = Path(root) / "sys" / "devices" / "system"
    try:
        online = parse_cpulist((base / "cpu" / "online").read_text())
    except OSError:
        online = tuple(sorted(int(p.name[3:]) for p in (base / "cpu").glob("cpu[0-9]*")))
    if not online:
        raise TopologyError(f"no online CPUs under {base / 'cpu'}")
    node_of: dict[int, int] = {}
    for node_dir in (base / "node").glob("node[0-9]*"):
        with contextlib.suppress(OSError):
            for cpu in parse_cpulist((node_dir / "cpulist").read_text()):
                node_of[cpu] = int(node_dir.name[4:])
    cpus = []
    for cpu in online:
        topo = base / "cpu" / f"cpu{cpu}" / "topology"
        cpus.append(Cpu(cpu=cpu, package=_read_int(topo / "physical_package_id", 0),
                        die=_read_int(topo / "die_id", 0), core=_read_int(topo / "core_id", cpu),
                        node=node_of.get(cpu, 0)))
    return Topology(tuple(cpus))


@dataclass(frozen=True)
class Placement:
    """Where a pinned scenario runs: its CPUs (by number), its memory nodes, what they span, the
    order vCPUs take them in (node, core, thread) and a spare CPU for a VMM's own threads."""

    cpus: tuple[int, ...]
    mems: tuple[int, ...]
    sockets: int
    nodes: int
    policy: str
    vcpu_order: tuple[int, ...]
    node_of: dict[int, int]
    socket_of: dict[int, int]
    threads_per_core: int      # 2 when whole sibling pairs were taken (policy smt), else 1
    spare_cpu: int | None      # an unused CPU on the placement's first node, for emulator threads

    def to_dict(self) -> dict[str, Any]:
        return {"cpus": list(self.cpus), "mems": list(self.mems), "sockets": self.sockets,
                "nodes": self.nodes, "policy": self.policy}


def _physical_cores(topology: Topology, allowed: set[int]) -> dict[int, list[list[Cpu]]]:
    """node -> its physical cores (each the allowed threads, lowest first), by lowest thread."""
    cores: dict[tuple[int, int, int], list[Cpu]] = {}
    for c in topology.cpus:
        if c.cpu in allowed:
            cores.setdefault(c.core_key, []).append(c)
    per_node: dict[int, list[list[Cpu]]] = {}
    for threads in sorted(cores.values(), key=lambda t: t[0].cpu):
        per_node.setdefault(threads[0].node, []).append(threads)
    return per_node


def _interleave(lists: list[list[int]]) -> list[int]:
    out: list[int] = []
    for i in range(max((len(x) for x in lists), default=0)):
        out += [x[i] for x in lists if i < len(x)]
    return out


def place(topology: Topology, cores: int, policy: str = DEFAULT_POLICY,
          allowed: Iterable[int] | None = None) -> Placement:
    """The ``cores`` CPUs (of ``allowed``, default all online) a pinned scenario gets under ``policy``."""
    if policy not in POLICIES:
        raise TopologyError(f"platforms.placement: {policy!r} is not one of {', '.join(POLICIES)}")
    usable = {c.cpu for c in topology.cpus} & (set(allowed) if allowed is not None else {c.cpu for c in topology.cpus})
    if cores < 1 or cores > len(usable):
        raise TopologyError(f"{cores} pinned cores requested, only {len(usable)} CPUs available")
    per_node = _physical_cores(topology, usable)
    # a node that can hold every core on its own goes first (compact, smt); the rest by number
    need_cores = cores if policy != "smt" else -(-cores // max(topology.threads_per_core(), 1))
    fitting = [n for n in sorted(per_node) if len(per_node[n]) >= need_cores]
    order = ([fitting[0]] if fitting else []) + [n for n in sorted(per_node) if not fitting or n != fitting[0]]
    if policy == "smt":
        ranked = [t.cpu for n in order for core in per_node[n] for t in core]
    else:
        firsts = [[core[0].cpu for core in per_node[n]] for n in order]
        seconds = [[t.cpu for core in per_node[n] for t in core[1:]] for n in order]
        if policy == "compact":
            ranked = [c for x in firsts for c in x] + [c for x in seconds for c in x]
        else:
            ranked = _interleave(firsts) + _interleave(seconds)
    chosen = set(ranked[:cores])
    known = topology.by_cpu()
    picked = [known[c] for c in sorted(chosen)]
    mems = tuple(sorted({c.node for c in picked}))
    node_rank = {n: i for i, n in enumerate(order)}
    vcpu_order = tuple(c.cpu for c in sorted(picked, key=lambda c: (node_rank[c.node], c.core_key, c.cpu)))
    per_core: dict[tuple[int, int, int], int] = {}
    for c in picked:
        per_core[c.core_key] = per_core.get(c.core_key, 0) + 1
    threads = 2 if policy == "smt" and set(per_core.values()) == {2} else 1
    first_node = known[vcpu_order[0]].node
    spare = next((c for c in ranked if c not in chosen and known[c].node == first_node), None)
    return Placement(cpus=tuple(sorted(chosen)), mems=mems, sockets=len({c.package for c in picked}),
                     nodes=len(mems), policy=policy, vcpu_order=vcpu_order,
                     node_of={c.cpu: c.node for c in picked}, socket_of={c.cpu: c.package for c in picked},
                     threads_per_core=threads, spare_cpu=spare)


def host_placement(cores: int, policy: str = DEFAULT_POLICY) -> Placement:
    """``place`` on this host, among the CPUs this process may use."""
    return place(read(), cores, policy, allowed=os.sched_getaffinity(0))


def mems_allowed(status: Path = Path("/proc/self/status")) -> tuple[int, ...] | None:
    """The memory nodes this process may allocate on (``Mems_allowed_list``), None if unknown."""
    with contextlib.suppress(OSError):
        for line in status.read_text().splitlines():
            if line.startswith("Mems_allowed_list:"):
                return parse_cpulist(line.split(":", 1)[1])
    return None


def threads_ran_on(pid: int | str = "self") -> tuple[int, ...]:
    """The CPUs the threads of process ``pid`` last ran on (field 39 of each task's stat): a sample
    of where an unpinned scenario actually runs."""
    found: set[int] = set()
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # the command name (field 2) may hold spaces: count from the closing parenthesis
            fields = stat.read_text().rsplit(")", 1)[1].split()
            found.add(int(fields[36]))
    return tuple(sorted(found))
