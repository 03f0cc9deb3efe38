"""Keep other processes off a launch's CPUs while it runs, and put them back exactly afterwards.

Only when the study asks (``keep_others_away.enabled``, off by default: on a shared server this is
the administrator's call). Before a pinned launch runs, every other process in the cpuset cgroup
``scope`` and below (``/``: every process on the host) is moved, on cgroup v1, into a child cpuset of
the group it is in, ``dlvirt-away-<pid>-<start time>``, holding that group's CPUs less the launch's;
its threads' affinity masks are saved first. Afterwards (success, failure, Ctrl-C) every process
in those children, the ones forked there meanwhile included, goes back to the group it came from,
each saved thread gets its mask back, and the children are removed. What was moved is written to
``RUN_ROOT/keepaway/<pid>-<start time>.json`` before anything moves, so that a runner killed
outright is undone by the next cleanup (``restore_stale``).

Left where they are, and listed: kernel threads, this runner and what it started, the engines
dlvirt runs (their work for the launch is the platform's), processes of a group whose CPUs are
all the launch's (another user's pinned container: moving it would change more than placement), and
any the kernel refuses to move. Nothing but placement (cpuset membership and affinity) is changed.
On cgroup v2 a cpuset partition does it instead (``keepaway_v2``: the second implementation of
this interface, ``others_away``). Not done, with the reason recorded once: under SLURM
(``--exclusive`` keeps other jobs off the node; what is outside the job's cgroup is not the job's to
move), for an unpinned launch (no CPUs are its own), when fewer than
``min_cpus_left`` CPUs would remain for everything else, and without the rights to write cgroups.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dlvirt.core.atomic import read_json, write_json_atomic
from dlvirt.core.owner import RUN_ID, TAG, is_stale, process_start_time, process_tag
from dlvirt.core.signals import held
from dlvirt.system import cgroups, keepaway_v2, private
from dlvirt.system.engines import DAEMON_STATE, RUN_ROOT
from dlvirt.system.topology import format_cpulist, parse_cpulist

STATE_DIR = RUN_ROOT / "keepaway"
STATE_WHAT = "dlvirt's record of processes kept away"
AWAY_NAME = rf"dlvirt-away-{TAG}"
JOB_NAME = rf"dlvirt-{RUN_ID}"  # a BM launch's own group (dlvirt.platforms.bm)
STATE_NAME = rf"{TAG}\.json"
_PF_KTHREAD = 0x00200000  # /proc/<pid>/stat flags: a kernel thread


def _stat_fields(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return [stat[stat.index("(") + 1:stat.rindex(")")], *stat[stat.rindex(")") + 2:].split()]


def _comm(pid: int) -> str:
    fields = _stat_fields(pid)
    return fields[0] if fields else "?"


def _is_kernel_thread(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and (int(fields[7]) & _PF_KTHREAD) != 0


def _descendants(roots: set[int]) -> set[int]:
    """``roots`` and every process below them."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        fields = _stat_fields(int(proc.name))
        if fields is not None:
            children.setdefault(int(fields[2]), []).append(int(proc.name))
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def _engine_pids() -> set[int]:
    """The daemons dlvirt runs (dlvirt.system.engines), which serve the launch."""
    pids = set()
    for state in RUN_ROOT.glob(f"*/{DAEMON_STATE}") if RUN_ROOT.is_dir() else []:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            document = read_json(state)
            if process_start_time(int(document["pid"])) == int(document["start_time"]):
                pids.add(int(document["pid"]))
    return pids


def _threads(pid: int) -> dict[str, list[Any]]:
    """tid -> [its start time, its affinity] for every thread of ``pid`` we may read."""
    found: dict[str, list[Any]] = {}
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                start = process_start_time(int(task))
                found[task] = [start, sorted(os.sched_getaffinity(int(task)))]
    return found


def _procs(directory: Path) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(p) for p in (directory / "cgroup.procs").read_text().split()]
    return []


def _groups(scope: Path) -> list[Path]:
    """``scope`` and the cpuset groups below it, less dlvirt's own (job groups, away groups)."""
    found = []
    for directory, subdirs, _ in os.walk(scope):
        subdirs[:] = [d for d in subdirs if not re.fullmatch(AWAY_NAME, d) and not re.fullmatch(JOB_NAME, d)]
        found.append(Path(directory))
    return found


def why_not(settings: dict[str, Any], cpus: tuple[int, ...] | None, in_slurm: bool,
            launch_in_runner: bool = True) -> str | None:
    """Why others cannot be kept off ``cpus`` here (None: they can be tried); ``launch_in_runner``:
    the launch runs in the runner's cgroup (what cgroup v2's partition needs: ``keepaway_v2``)."""
    if cpus is None:
        return "the launch is not pinned (VNL): no CPUs are its own"
    if in_slurm:
        return ("under SLURM, --exclusive keeps other jobs off the node; processes outside the job's "
                "cgroup are not the job's to move")
    v2 = cgroups.v2_root()
    if v2 is not None:
        return keepaway_v2.why_not(v2, settings, cpus, launch_in_runner)
    hierarchy = cgroups.v1_dir("cpuset")
    if hierarchy is None:
        return "no cgroup v1 cpuset hierarchy under /sys/fs/cgroup"
    scope = hierarchy / str(settings.get("scope", "/")).lstrip("/")
    if not (scope / "cpuset.cpus").exists():
        return f"keep_others_away.scope {settings.get('scope')!r}: no such cpuset group ({scope})"
    if not os.access(scope / "cgroup.procs", os.W_OK):
        return f"no right to move processes between cpuset groups ({scope} is not writable)"
    left = set(parse_cpulist((scope / "cpuset.effective_cpus").read_text())) - set(cpus)
    wanted = int(settings.get("min_cpus_left", 2))
    if len(left) < wanted:
        return (f"only {len(left)} CPU{'s' if len(left) != 1 else ''} would remain for everything else "
                f"(keep_others_away.min_cpus_left: {wanted})")
    return None


def _move_away(hierarchy: Path, scope: Path, cpus: tuple[int, ...], exempt: set[int], state: dict[str, Any],
               path: Path) -> None:
    """Move every other movable process of ``scope`` into an away group beside it (see the module doc),
    recording each step in ``state`` (written to ``path`` before the step)."""
    for group in _groups(scope):
        pids = [p for p in _procs(group) if p not in exempt]
        if not pids:
            continue
        user = [p for p in pids if not _is_kernel_thread(p)]
        state["kernel_threads"] += len(pids) - len(user)
        if not user:
            continue
        relative = "/" + str(group.relative_to(hierarchy)).lstrip(".").lstrip("/")
        allowed = set(parse_cpulist((group / "cpuset.effective_cpus").read_text()))
        if not allowed & set(cpus):
            continue  # already off the launch's CPUs
        rest = allowed - set(cpus)
        if not rest:
            state["left"] += [{"pid": p, "comm": _comm(p), "cgroup": relative,
                               "why": "its cpuset holds only the launch's CPUs"} for p in user]
            continue
        away = group / f"dlvirt-away-{state['tag']}"
        # every process's threads saved, and written down, before the group is made and any moves
        entry: dict[str, Any] = {"cgroup": relative, "away": str(away), "pids": {
            str(pid): {"start": process_start_time(pid), "comm": _comm(pid), "threads": _threads(pid)}
            for pid in user}}
        state["groups"].append(entry)
        write_json_atomic(path, state)
        away.mkdir()
        # a v1 cpuset starts empty: its memory nodes, then its CPUs, before a task may join
        (away / "cpuset.mems").write_text((group / "cpuset.effective_mems").read_text())
        (away / "cpuset.cpus").write_text(format_cpulist(tuple(sorted(rest))))
        for pid in user:
            try:
                (away / "cgroup.procs").write_text(f"{pid}\n")
            except ProcessLookupError:
                del entry["pids"][str(pid)]
            except OSError as exc:
                del entry["pids"][str(pid)]
                state["left"].append({"pid": pid, "comm": _comm(pid), "cgroup": relative,
                                      "why": f"the kernel refused to move it ({exc.strerror})"})
        write_json_atomic(path, state)


def _saved_masks(saved: dict[str, Any], returned: list[int]) -> Iterator[tuple[int, int, list[int]]]:
    """(pid, tid, mask) to set for each thread of the ``returned`` processes: a saved thread its saved
    mask; a thread started while it was away that of its process's main thread, or, in a process
    forked meanwhile, that of the nearest saved ancestor's (whence it inherited the mask)."""
    for pid in returned:
        source, seen = pid, set()
        while str(source) not in saved and source > 1 and source not in seen:
            seen.add(source)
            fields = _stat_fields(source)
            source = int(fields[2]) if fields else 0
        record = saved.get(str(source))
        if record is None or record["start"] != process_start_time(source):
            continue
        main = record["threads"].get(str(source))
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{pid}/task"):
                thread = record["threads"].get(task) if source == pid else None
                if thread is not None and thread[0] == process_start_time(int(task)):
                    yield pid, int(task), thread[1]
                elif main is not None:
                    yield pid, int(task), main[1]


def restore(state: dict[str, Any]) -> dict[str, Any]:
    """Put back what ``state`` records, by the mechanism that moved them (v1's below, v2's partition)."""
    if state.get("mechanism") == keepaway_v2.MECHANISM:
        return keepaway_v2.restore(state)
    return _restore_v1(state)


def _restore_v1(state: dict[str, Any]) -> dict[str, Any]:
    """Put back what a v1 ``state`` records: every process in each away group (those forked there too)
    to the group it came from, each saved thread's affinity, and remove the away groups."""
    moved_back, masks, problems = 0, 0, []
    for entry in state["groups"]:
        away = Path(entry["away"])
        origin = away.parent
        returned: list[int] = []
        for _ in range(3):  # a process may fork while the group empties
            for pid in _procs(away):
                try:
                    (origin / "cgroup.procs").write_text(f"{pid}\n")
                    moved_back += 1
                    returned.append(pid)
                except ProcessLookupError:
                    continue
                except OSError as exc:
                    problems.append(f"pid {pid} could not go back to {origin}: {exc.strerror}")
        for pid, tid, mask in _saved_masks(entry["pids"], returned):
            try:
                if sorted(os.sched_getaffinity(tid)) != mask:
                    os.sched_setaffinity(tid, mask)
                    masks += 1
            except ProcessLookupError:
                continue
            except OSError as exc:
                problems.append(f"thread {tid} of pid {pid}: affinity {format_cpulist(tuple(mask))} "
                                f"not restored ({exc.strerror})")
        try:
            away.rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:
            problems.append(f"{away} not removed: {exc.strerror}")
    return {"moved_back": moved_back, "affinities_restored": masks, "problems": problems}


def _saved_threads(cpus: tuple[int, ...], exempt: set[int]) -> dict[str, Any]:
    """pid -> start, comm, its threads' affinity: every process but ``exempt`` and kernel threads
    with a thread allowed on ``cpus`` (whose masks a v2 partition changes)."""
    saved = {}
    for proc in Path("/proc").glob("[0-9]*"):
        pid = int(proc.name)
        if pid in exempt or _is_kernel_thread(pid):
            continue
        threads = _threads(pid)
        if any(set(mask) & set(cpus) for _, mask in threads.values()):
            saved[str(pid)] = {"start": process_start_time(pid), "comm": _comm(pid), "threads": threads}
    return saved


@contextlib.contextmanager
def others_away(settings: dict[str, Any] | None, cpus: tuple[int, ...] | None, in_slurm: bool,
                say: Callable[[str], None], launch_in_runner: bool = True) -> Iterator[dict[str, Any] | None]:
    """Keep other processes off ``cpus`` for the block, as ``settings`` (keep_others_away) asks, by
    cgroup v1 cpuset groups (this module) or a cgroup v2 partition (``keepaway_v2``); yields the
    record of what was done (None when not asked), completed with how it was undone. What a v2
    partition still holds of the platform's groups is removed by ``settle`` after its teardown."""
    if not settings or not settings.get("enabled"):
        yield None
        return
    why = why_not(settings, cpus, in_slurm, launch_in_runner)
    if why is not None:
        say(f"keep_others_away: not done: {why}")
        yield {"done": False, "why": why}
        return
    assert cpus is not None
    tag = process_tag()
    path = private.private_dir(STATE_DIR, STATE_WHAT) / f"{tag}.json"
    v2 = cgroups.v2_root()
    if v2 is not None:
        state = keepaway_v2.plan(v2, settings, cpus, tag, os.getpid())
    else:
        state = {"tag": tag, "mechanism": "cgroup v1 cpuset", "scope": str(settings.get("scope", "/")),
                 "launch_cpus": list(cpus), "groups": [], "left": [], "kernel_threads": 0}
    exempt = _descendants({os.getpid(), *_engine_pids()})
    record: dict[str, Any] = {"done": False}
    try:
        with held():  # the moves and their record are done whole, a stop signal is acted on after them
            try:
                if v2 is not None:
                    keepaway_v2.apply(state, _saved_threads(cpus, _descendants({os.getpid()}) - {os.getpid()}), path)
                else:
                    hierarchy = cgroups.v1_dir("cpuset")
                    assert hierarchy is not None
                    _move_away(hierarchy, hierarchy / str(settings.get("scope", "/")).lstrip("/"), cpus, exempt,
                               state, path)
            except OSError as exc:  # no rights after all (a container's read-only cgroups), a group gone
                record["why"] = f"the cpuset groups could not be changed ({exc})"
        if "why" in record:  # all back before the launch runs
            record["restored"] = _put_back(state, path, say)
            say(f"keep_others_away: not done: {record['why']}")
            yield record
            return
        record = {"done": True, "mechanism": state["mechanism"], "scope": state["scope"], "launch_cpus": list(cpus),
                  "state": str(path)}
        if v2 is not None:
            record.update(partition=state["partition"], affinities_saved=len(state["saved"]))
            say(f"keep_others_away: CPUs {format_cpulist(cpus)} are a cpuset partition of their own "
                f"({state['partition']}); every other process left them")
        else:
            record.update(moved={e["cgroup"]: sorted(int(p) for p in e["pids"]) for e in state["groups"]},
                          left=state["left"], kernel_threads_left=state["kernel_threads"])
            say(f"keep_others_away: moved {sum(len(p) for p in record['moved'].values())} processes off CPUs "
                f"{format_cpulist(cpus)}; left {len(state['left'])} and {state['kernel_threads']} kernel threads")
        yield record
    finally:
        if "restored" not in record:
            record["restored"] = _put_back(state, path, say)


def settle(record: dict[str, Any] | None, say: Callable[[str], None]) -> None:
    """After the platform's teardown: remove what ``others_away`` had to leave (a v2 partition that
    still held the platform's groups); its state file stays for the next cleanup while a problem is left."""
    if not record or not record.get("done") or not record.get("restored", {}).get("busy"):
        return
    path = Path(record["state"])
    with contextlib.suppress(FileNotFoundError):
        record["settled"] = _put_back(read_json(path), path, say)


def _put_back(state: dict[str, Any], path: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """``restore`` with stop signals held; its state file stays for the next cleanup (or ``settle``)
    while a problem, or a partition still busy, is left."""
    with held():  # a stop signal now would leave processes confined until the next cleanup
        undone = restore(state)
    for problem in undone["problems"]:
        say(f"keep_others_away: {problem}")
    if not undone["problems"] and not undone.get("busy"):
        path.unlink(missing_ok=True)
    return undone


def restore_stale() -> Iterator[str]:
    """Undo what a runner killed outright left moved (its state file names it; its maker is gone)."""
    if not STATE_DIR.is_dir():
        return
    private.check(STATE_DIR, STATE_WHAT)
    for path in sorted(STATE_DIR.iterdir()):
        if not re.fullmatch(STATE_NAME, path.name) or not is_stale(path.stem, TAG):
            continue
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            undone = restore(read_json(path))
            path.unlink()
            yield (f"put back {undone['moved_back']} processes a killed launch had kept away "
                   f"({len(undone['problems'])} problems: {'; '.join(undone['problems']) or 'none'})")
