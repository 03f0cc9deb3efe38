"""keep_others_away on cgroup v2: a cpuset partition for the launch's CPUs (``keepaway`` is the
interface and holds the cgroup v1 implementation; this is the second one).

Before a pinned launch, a group ``dlvirt-bench-<pid>-<start time>`` is made in the cgroup v2 group
``scope`` (``/``: the root), with the cpuset controller enabled there where it was not, the launch's
CPUs (``cpuset.cpus``) and its parent's memory nodes, and made a partition root
(``cpuset.cpus.partition``: ``root``). The kernel then takes those CPUs out of every other group's
effective CPUs: every other process leaves them at once, wherever it is. The runner moves into a
leaf of the partition, ``runner``, so that what it starts (the BM harness and its cgroup, an MVM's
VMM) runs inside it; a platform whose engine starts the launch in a cgroup of its own (CN's dockerd,
VM's libvirtd) would lose the CPUs too, and is refused with the reason. Every thread's affinity that
the partition changes is saved first, and everything is written to the state file before anything
changes, so that a runner killed outright is undone by the next cleanup.

Afterwards (success, failure, Ctrl-C) the partition becomes a member again (the CPUs return to
every group), the runner goes back to its own group, each saved thread gets its mask back, the
leaf and the partition are removed (the partition once the platform's groups in it are: ``settle``),
and the cpuset controller is disabled where it was enabled. Nothing but placement changes. Unlike
v1, the engines (dockerd, libvirtd) lose the launch's CPUs too: only the launch's processes run there.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Any

from dlvirt.core.atomic import write_json_atomic
from dlvirt.core.owner import process_start_time
from dlvirt.system.topology import format_cpulist, parse_cpulist

MECHANISM = "cgroup v2 cpuset partition"
PARTITION = "dlvirt-bench-{tag}"
LEAF = "runner"


def _read(path: Path) -> str:
    return path.read_text().strip()


def why_not(root: Path, settings: dict[str, Any], cpus: tuple[int, ...], launch_in_runner: bool) -> str | None:
    """Why a partition for ``cpus`` cannot be made in ``root``'s group ``settings.scope`` (None: it can be tried)."""
    if "cpuset" not in _read(root / "cgroup.controllers").split():
        return "the cgroup v2 root offers no cpuset controller (it is bound to a v1 hierarchy)"
    if not launch_in_runner:
        return ("on cgroup v2 the launch must run inside the partition, and this platform's engine starts it in a "
                "cgroup of its own")
    scope = root / str(settings.get("scope", "/")).lstrip("/")
    if not (scope / "cgroup.procs").exists():
        return f"keep_others_away.scope {settings.get('scope')!r}: no such cgroup ({scope})"
    if scope != root and not _read(scope / "cpuset.cpus.partition").startswith("root"):
        return f"keep_others_away.scope {settings.get('scope')!r} is not a cpuset partition root ({scope})"
    if not os.access(scope / "cgroup.subtree_control", os.W_OK):
        return f"no right to make a cpuset partition ({scope} is not writable)"
    effective = set(parse_cpulist(_read(scope / "cpuset.cpus.effective")))
    if not set(cpus) <= effective:
        return f"CPUs {format_cpulist(cpus)} are not all {scope}'s (it has {format_cpulist(tuple(sorted(effective)))})"
    for sibling in sorted(p for p in scope.iterdir() if p.is_dir()):
        with contextlib.suppress(OSError):
            claimed = _read(sibling / "cpuset.cpus")
            if claimed and set(parse_cpulist(claimed)) & set(cpus):
                return f"{sibling} sets cpuset.cpus {claimed}: a partition needs the launch's CPUs to itself"
    left = effective - set(cpus)
    wanted = int(settings.get("min_cpus_left", 2))
    if len(left) < wanted:
        return (f"only {len(left)} CPU{'s' if len(left) != 1 else ''} would remain for everything else "
                f"(keep_others_away.min_cpus_left: {wanted})")
    return None


def plan(root: Path, settings: dict[str, Any], cpus: tuple[int, ...], tag: str, runner: int) -> dict[str, Any]:
    """The state to apply: the partition's path, the runner and the group it is in now (to go back to)."""
    scope = root / str(settings.get("scope", "/")).lstrip("/")
    own = next((line.split(":", 2)[2] for line in Path(f"/proc/{runner}/cgroup").read_text().splitlines()
                if line.startswith("0::")), "/")
    return {"tag": tag, "mechanism": MECHANISM, "scope": str(settings.get("scope", "/")), "launch_cpus": list(cpus),
            "root": str(root), "partition": str(scope / PARTITION.format(tag=tag)), "enabled_cpuset_in": None,
            "runner": {"pid": runner, "start": process_start_time(runner), "cgroup": own}, "saved": {},
            "made": False}


def apply(state: dict[str, Any], saved: dict[str, Any], path: Path) -> None:
    """Make the partition ``state`` plans, with ``saved`` (pid -> start, comm, threads' affinity)
    recorded first; each step written to ``path`` before it is taken."""
    partition = Path(state["partition"])
    scope = partition.parent
    state["saved"] = saved
    control = scope / "cgroup.subtree_control"
    if "cpuset" not in _read(control).split():
        state["enabled_cpuset_in"] = str(scope)
        write_json_atomic(path, state)
        control.write_text("+cpuset\n")
    state["made"] = True
    write_json_atomic(path, state)
    partition.mkdir()
    (partition / "cpuset.mems").write_text(_read(scope / "cpuset.mems.effective") + "\n")
    (partition / "cpuset.cpus").write_text(format_cpulist(tuple(state["launch_cpus"])) + "\n")
    (partition / LEAF).mkdir()
    (partition / "cpuset.cpus.partition").write_text("root\n")
    became = _read(partition / "cpuset.cpus.partition")
    if became != "root":  # "root invalid (reason)": the kernel says why
        raise OSError(errno.EINVAL, f"the kernel made {partition} {became!r}")
    (partition / LEAF / "cgroup.procs").write_text(f"{state['runner']['pid']}\n")


def _masks(saved: dict[str, Any]) -> tuple[int, list[str]]:
    """Give each saved thread still alive its saved affinity back: how many changed, and problems."""
    changed, problems = 0, []
    for pid, record in saved.items():
        if process_start_time(int(pid)) != record["start"]:
            continue
        for tid, (start, mask) in record["threads"].items():
            try:
                if process_start_time(int(tid)) == start and sorted(os.sched_getaffinity(int(tid))) != mask:
                    os.sched_setaffinity(int(tid), mask)
                    changed += 1
            except ProcessLookupError:
                continue
            except OSError as exc:
                problems.append(f"thread {tid} of pid {pid}: affinity {format_cpulist(tuple(mask))} "
                                f"not restored ({exc.strerror})")
    return changed, problems


def restore(state: dict[str, Any]) -> dict[str, Any]:
    """Undo what ``state`` records (see the module doc); ``busy``: the partition still holds the
    platform's groups (removed by a later ``restore``, once they are gone)."""
    root, partition = Path(state["root"]), Path(state["partition"])
    problems: list[str] = []
    moved_back, busy = 0, False
    if state.get("made") and partition.is_dir():
        with contextlib.suppress(OSError):  # a member again: the CPUs return to every group at once
            (partition / "cpuset.cpus.partition").write_text("member\n")
        origin = root / str(state["runner"]["cgroup"]).lstrip("/")
        leaf = partition / LEAF
        for _ in range(3):  # the runner, and anything it started that is still in the leaf
            for pid in (_read(leaf / "cgroup.procs").split() if (leaf / "cgroup.procs").exists() else []):
                try:
                    (origin / "cgroup.procs").write_text(f"{pid}\n")
                    moved_back += 1
                except ProcessLookupError:
                    continue
                except OSError as exc:
                    problems.append(f"pid {pid} could not go back to {origin}: {exc.strerror}")
    masks, mask_problems = _masks(state.get("saved") or {})
    problems += mask_problems
    for directory in (partition / LEAF, partition):
        try:
            directory.rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno == errno.EBUSY and directory == partition:
                busy = True  # the platform's groups are still in it: settle() after its teardown
            else:
                problems.append(f"{directory} not removed: {exc.strerror}")
    if not busy and state.get("enabled_cpuset_in"):
        with contextlib.suppress(OSError):  # another group may have started to use it meanwhile
            (Path(state["enabled_cpuset_in"]) / "cgroup.subtree_control").write_text("-cpuset\n")
    return {"moved_back": moved_back, "affinities_restored": masks, "problems": problems, "busy": busy}

