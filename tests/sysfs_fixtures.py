"""Server topologies this 2-CPU, one-node test machine does not have, as sysfs trees.

Each builder writes ``ROOT/sys/devices/system/{cpu,node}`` the way the kernel lays them out
(``cpu/online``, ``cpuN/topology/{physical_package_id,die_id,core_id,thread_siblings_list}``,
``node/online``, ``nodeN/cpulist``) and returns ROOT, for ``dlvirt.system.topology.read(ROOT)`` and
``python -m dlvirt cpus --sysfs ROOT``.
"""

from __future__ import annotations

from pathlib import Path

from dlvirt.system.topology import format_cpulist

# (cpu, package, core, node) — die 0 everywhere, as on the Xeons of the paper
Layout = list[tuple[int, int, int, int]]


def write_sysfs(root: Path, layout: Layout) -> Path:
    base = root / "sys" / "devices" / "system"
    (base / "cpu").mkdir(parents=True, exist_ok=True)
    (base / "cpu" / "online").write_text(format_cpulist(c for c, *_ in layout) + "\n")
    for cpu, package, core, _ in layout:
        topo = base / "cpu" / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        siblings = [c for c, p, k, _ in layout if (p, k) == (package, core)]
        for name, value in (("physical_package_id", package), ("die_id", 0), ("core_id", core),
                            ("thread_siblings_list", format_cpulist(siblings))):
            (topo / name).write_text(f"{value}\n")
    nodes = sorted({n for *_, n in layout})
    (base / "node").mkdir(parents=True, exist_ok=True)
    (base / "node" / "online").write_text(format_cpulist(nodes) + "\n")
    for node in nodes:
        (base / "node" / f"node{node}").mkdir()
        (base / "node" / f"node{node}" / "cpulist").write_text(
            format_cpulist(c for c, _, _, n in layout if n == node) + "\n")
    return root


def interleaved_two_socket(root: Path) -> Path:
    """8 CPUs, no SMT; socket 0 = even CPUs (node 0), socket 1 = odd CPUs (node 1): Dell PowerEdge style."""
    return write_sysfs(root, [(c, c % 2, c // 2, c % 2) for c in range(8)])


def contiguous_two_socket(root: Path) -> Path:
    """8 CPUs, no SMT; socket 0 = CPUs 0-3 (node 0), socket 1 = CPUs 4-7 (node 1)."""
    return write_sysfs(root, [(c, c // 4, c % 4, c // 4) for c in range(8)])


def one_socket_smt(root: Path) -> Path:
    """16 CPUs on one socket and node: CPUs 0-7 are the cores, 8-15 their SMT siblings."""
    return write_sysfs(root, [(c, 0, c % 8, 0) for c in range(16)])


def interleaved_two_socket_smt(root: Path) -> Path:
    """The paper's server in small: 2 sockets x 4 cores x 2 threads, interleaved (socket 0 = even
    CPUs), siblings after all cores (CPU c and c + 8)."""
    return write_sysfs(root, [(c, c % 2, (c % 8) // 2, c % 2) for c in range(16)])


def four_nodes(root: Path) -> Path:
    """16 CPUs, no SMT, 2 sockets split into 2 NUMA nodes each (sub-NUMA clustering): node n = CPUs 4n-4n+3."""
    return write_sysfs(root, [(c, c // 8, c % 8, c // 4) for c in range(16)])
