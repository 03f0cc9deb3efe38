"""Engines (dockerd, libvirtd, virtlogd, ...) started by hand, shared, and stopped only by their owner.

Hosts without systemd (this one, many HPC nodes) have no service manager, so dlvirt starts the
daemons a study needs itself. Rules of the game:

- A daemon that already answers and that dlvirt did not start is used but never stopped.
- A daemon dlvirt starts gets a run directory ``RUN_ROOT/<name>`` holding ``daemon.json`` (its PID
  and the kernel's start time of that PID, so a recycled PID is never signalled) and its log.
- Everyone using it (a workflow, a test session) holds a *lease*: ``leases/<holder pid>``. Releasing
  the last live lease stops the daemon (SIGTERM, then SIGKILL after its stop timeout). Concurrent
  workflows therefore share one daemon without stopping it under each other's feet, and a killed
  workflow's lease dies with its process, so the next cleanup stops the orphaned daemon.
- Each workflow also records what it acquired in a state file under its own ``resources/engines/``
  so its end handler releases exactly that.

The run directories live at one fixed machine-wide place because they are the meeting point of
every workflow on the host. That place is private: ``RUN_ROOT`` and each run directory are made
root's and mode 0700 whatever the umask, and checked on every use (``dlvirt.system.private``: one
that another user made first, a symbolic link, or one others may write is refused).

A daemon's log (its stdout and stderr, appended) is bounded: whenever a holder acquires or releases
the daemon and the log is over ``LOG_CAP_BYTES``, its last ``LOG_KEEP_BYTES`` go to ``daemon.log.1``
(replacing the one before) and the log starts again empty (the daemon appends, so it writes on at
the start). A daemon is therefore bounded by the cap plus what it writes between two such moments.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dlvirt.core.atomic import read_json, write_json_atomic
from dlvirt.core.owner import process_start_time
from dlvirt.system import private

RUN_ROOT = Path("/run/dlvirt")
DAEMON_STATE = "daemon.json"
LEASES = "leases"
RUN_DIR_WHAT = "dlvirt's engine run directory"
LOG_CAP_BYTES = 8 << 20
LOG_KEEP_BYTES = 1 << 20


class EngineError(RuntimeError):
    pass


@dataclass(frozen=True)
class Daemon:
    """How to start one daemon and tell that it answers."""

    name: str                                   # also its run directory's name, e.g. "dockerd"
    command: tuple[str, ...]                    # runs in the foreground unless ``pidfile`` is set
    probe: Callable[[], bool]                   # True once the daemon serves requests
    pidfile: Path | None = None                 # where a self-daemonising daemon writes its PID
    ready_timeout_s: float = 60.0
    stop_timeout_s: float = 30.0
    env: Mapping[str, str] = field(default_factory=dict)  # added to our environment
    # what this daemon serves, e.g. dockerd's data root: one running under the same name that serves
    # something else is refused, never used in its place
    serves: str | None = None
    # files (name in its run directory, content) written afresh, under the run directory's lock, just
    # before it starts (dockerd's config file): never rewritten under a daemon that runs, nor by two
    # holders at once
    files: tuple[tuple[str, bytes], ...] = ()

    @property
    def run_dir(self) -> Path:
        return RUN_ROOT / self.name

    @property
    def log(self) -> Path:
        return self.run_dir / "daemon.log"


@dataclass(frozen=True)
class Lease:
    """What one holder acquired: a daemon dlvirt manages (started now or earlier)."""

    name: str
    holder: int
    pid: int
    started_now: bool


def _alive(pid: int, start_time: int) -> bool:
    return process_start_time(pid) == start_time


@contextlib.contextmanager
def locked(directory: Path, what: str = RUN_DIR_WHAT) -> Iterator[None]:
    """Hold the exclusive lock of ``directory`` (made private if missing, checked if not; ``what``
    names it in a refusal) for the block."""
    private.private_dir(directory, what)
    fd = os.open(directory / "lock", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _live_leases(run_dir: Path) -> list[int]:
    """Holders whose process still runs; leases of dead holders are deleted."""
    holders = []
    for path in sorted((run_dir / LEASES).glob("*")):
        with contextlib.suppress(ValueError, OSError):
            holder, start_time = (int(x) for x in path.read_text().split())
            if _alive(holder, start_time):
                holders.append(holder)
                continue
        path.unlink(missing_ok=True)
    return holders


def _add_lease(run_dir: Path, holder: int) -> None:
    start_time = process_start_time(holder)
    if start_time is None:
        raise EngineError(f"lease holder {holder} is not a running process")
    (run_dir / LEASES).mkdir(parents=True, exist_ok=True)
    (run_dir / LEASES / str(holder)).write_text(f"{holder} {start_time}\n")


def _managed(run_dir: Path) -> dict[str, Any] | None:
    """daemon.json of the daemon dlvirt started in ``run_dir`` if that process still runs."""
    path = run_dir / DAEMON_STATE
    if not path.exists():
        return None
    state = read_json(path)
    if _alive(int(state["pid"]), int(state["start_time"])):
        return state  # type: ignore[no-any-return]
    path.unlink(missing_ok=True)
    return None


def _exited(pid: int) -> bool:
    """Whether ``pid`` and all its threads are gone. A multi-threaded daemon's main thread turns
    zombie first while its other threads (and its open sockets) live on for a moment."""
    if process_start_time(pid) is not None:
        return False
    try:
        return os.listdir(f"/proc/{pid}/task") in ([], [str(pid)])
    except OSError:
        return True


def _wait_exit(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it when it is our own child
        if _exited(pid):
            return True
        time.sleep(0.1)
    return False


def _terminate(pid: int, start_time: int, timeout_s: float) -> None:
    if not _alive(pid, start_time):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not _wait_exit(pid, timeout_s):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_exit(pid, 10.0)


def cap_log(path: Path, cap: int = LOG_CAP_BYTES, keep: int = LOG_KEEP_BYTES) -> bool:
    """When ``path`` is over ``cap`` bytes: its last ``keep`` bytes to ``<path>.1``, ``path`` emptied
    in place (its writer appends). Returns whether it was cut."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    with os.fdopen(fd, "r+b") as log:
        size = os.fstat(log.fileno()).st_size
        if size <= cap:
            return False
        log.seek(size - keep)
        tail = log.read(keep)
        old = path.with_name(path.name + ".1")
        old.unlink(missing_ok=True)
        private.create_file(old, tail)
        log.truncate(0)
    return True


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _start(daemon: Daemon) -> tuple[int, int]:
    """Start ``daemon`` (its run directory's lock held) and wait until it answers; return (pid,
    start_time)."""
    if daemon.pidfile is not None:
        daemon.pidfile.unlink(missing_ok=True)
    for name, content in daemon.files:
        (daemon.run_dir / name).unlink(missing_ok=True)
        private.create_file(daemon.run_dir / name, content)
    fd = os.open(daemon.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "ab") as log:
        # A session of its own: Ctrl-C in the workflow's terminal must not stop the engine while
        # the platform is still removing its containers or guests through it.
        proc = subprocess.Popen(
            list(daemon.command), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, env={**os.environ, **daemon.env})
    deadline = time.monotonic() + daemon.ready_timeout_s
    while not daemon.probe():
        if daemon.pidfile is None and proc.poll() is not None:
            raise EngineError(f"{daemon.name} exited with status {proc.returncode} before answering; "
                              f"last lines of {daemon.log}:\n{_log_tail(daemon.log)}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            with contextlib.suppress(OSError, ValueError, IndexError):  # a self-daemonised child
                os.kill(int(daemon.pidfile.read_text().split()[0]) if daemon.pidfile else proc.pid, signal.SIGKILL)
            raise EngineError(f"{daemon.name} did not answer within {daemon.ready_timeout_s:.0f} s; "
                              f"last lines of {daemon.log}:\n{_log_tail(daemon.log)}")
        time.sleep(0.2)
    pid = proc.pid if daemon.pidfile is None else int(daemon.pidfile.read_text().split()[0])
    start_time = process_start_time(pid)
    if start_time is None:
        raise EngineError(f"{daemon.name} answered but its process {pid} is gone")
    return pid, start_time


def acquire(daemon: Daemon, holder: int) -> Lease | None:
    """Make ``daemon`` answer for ``holder``. None: a daemon dlvirt did not start already answers
    (it is used as it is and never stopped by dlvirt)."""
    run_dir = daemon.run_dir
    with locked(run_dir):
        cap_log(daemon.log)
        _live_leases(run_dir)
        state = _managed(run_dir)
        if state is not None and state.get("serves", daemon.serves) != daemon.serves:
            raise EngineError(f"dlvirt's {daemon.name} (pid {state['pid']}) serves {state['serves']}, not "
                              f"{daemon.serves} as this study asks: stop it or ask for what it serves")
        if daemon.probe():
            if state is None:
                return None
            _add_lease(run_dir, holder)
            return Lease(daemon.name, holder, int(state["pid"]), started_now=False)
        if state is not None:  # ours, alive, but not answering: restart it rather than wait forever
            _terminate(int(state["pid"]), int(state["start_time"]), daemon.stop_timeout_s)
            (run_dir / DAEMON_STATE).unlink(missing_ok=True)
        pid, start_time = _start(daemon)
        write_json_atomic(run_dir / DAEMON_STATE, {
            "name": daemon.name, "pid": pid, "start_time": start_time, "command": list(daemon.command),
            "stop_timeout_s": daemon.stop_timeout_s, "started_unix": time.time(), "started_for": holder,
            "serves": daemon.serves})
        _add_lease(run_dir, holder)
        return Lease(daemon.name, holder, pid, started_now=True)


def release(name: str, holder: int | None) -> str | None:
    """Drop ``holder``'s lease on daemon ``name`` (None: only drop dead holders' leases); stop the
    daemon when dlvirt started it and no live lease is left. Returns what was stopped."""
    run_dir = RUN_ROOT / name
    if not run_dir.is_dir():
        return None
    with locked(run_dir):
        cap_log(run_dir / "daemon.log")
        if holder is not None:
            (run_dir / LEASES / str(holder)).unlink(missing_ok=True)
        if _live_leases(run_dir):
            return None
        state = _managed(run_dir)
        if state is None:
            return None
        _terminate(int(state["pid"]), int(state["start_time"]), float(state["stop_timeout_s"]))
        (run_dir / DAEMON_STATE).unlink(missing_ok=True)
        return f"stopped {name} (pid {state['pid']}), started by dlvirt, no user left"


def release_orphans() -> list[str]:
    """Stop every daemon dlvirt started whose users are all gone (a killed workflow's)."""
    if not os.path.lexists(RUN_ROOT):
        return []
    private.check(RUN_ROOT, RUN_DIR_WHAT)
    # a daemon's run directory holds its state or leases (RUN_ROOT also holds other things of dlvirt's)
    daemons = [d for d in sorted(RUN_ROOT.iterdir()) if (d / DAEMON_STATE).exists() or (d / LEASES).is_dir()]
    return [msg for run_dir in daemons if (msg := release(run_dir.name, None)) is not None]


def record(state_dir: Path, lease: Lease) -> None:
    """Remember in the workflow's own state directory what it acquired."""
    write_json_atomic(Path(state_dir) / f"{lease.name}.json", asdict(lease))


def release_recorded(state_dir: Path, holder: int) -> list[str]:
    """Release every lease ``holder`` recorded under ``state_dir``."""
    messages = []
    for path in sorted(Path(state_dir).glob("*.json")) if Path(state_dir).is_dir() else []:
        lease = Lease(**read_json(path))
        if lease.holder != holder:
            continue
        stopped = release(lease.name, holder)
        path.unlink(missing_ok=True)
        messages.append(stopped or f"released {lease.name} (pid {lease.pid}): still used or not started by dlvirt")
    return messages
