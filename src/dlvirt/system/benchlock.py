"""The host's benchmark lock: one launch at a time on a host, whichever study or checkout starts it.

The steps that load the whole machine (building the weights, a CN or guest image) hold it too, so
that no launch of another study runs beside them.

Snakemake's ``bench`` resource serialises the launches of one workflow only; two studies on one
server (two users, two checkouts) would time each other's launches. So every launch holds an
exclusive ``flock`` on ``RUN_ROOT/bench/lock`` (``/run/dlvirt``: private, root's, checked on every use,
``dlvirt.system.private``) from before its platform is provisioned until it is torn down. The kernel
releases a ``flock`` with the process that holds it, so a launch that ends, fails, is interrupted or
killed releases it; nothing is left to clean up.

The holder writes who it is beside the lock (``holder.json``: study directory, pid and its start
time, what it does (a launch's scenario, a build), start time), so that a waiter says whom it waits
for. The waiter asks in slices of ``POLL_S`` (never one long blocking call: a stop signal is acted on
at once) and says once whom it waits for, and again whenever the holder changes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dlvirt.core.atomic import read_json, write_json_atomic
from dlvirt.core.owner import process_start_time
from dlvirt.system import private
from dlvirt.system.engines import RUN_ROOT, EngineError

LOCK_DIR = RUN_ROOT / "bench"
LOCK_WHAT = "the host's benchmark lock directory"
HOLDER = "holder.json"
POLL_S = 0.25


def _holder(directory: Path) -> dict[str, Any] | None:
    """Who holds the lock, as its holder wrote it, if that process still runs."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        holder = read_json(directory / HOLDER)
        if process_start_time(int(holder["pid"])) == int(holder["pid_start"]):
            return dict(holder)
    return None


def describe(holder: dict[str, Any] | None) -> str:
    if holder is None:
        return "a launch that has not said who it is yet"
    return (f"{holder.get('what')} of the study in {holder.get('study')} "
            f"(pid {holder.get('pid')}, since {holder.get('since_utc')})")


@contextlib.contextmanager
def held(what: str, study: Path, say: Callable[[str], None],
         directory: Path = LOCK_DIR) -> Iterator[dict[str, Any]]:
    """Hold the host's benchmark lock for the block, doing ``what`` (a launch's scenario name, a
    build) for the study in ``study``; ``say`` is told whom a waiter waits for. Yields what the run
    record keeps: how long the launch waited and for whom."""
    try:
        private.private_dir(directory, LOCK_WHAT)
    except PermissionError:
        raise EngineError(f"the host's benchmark lock {directory / 'lock'} is root's: run dlvirt as root, as "
                          "its engines and cgroups need (docs/security.md)") from None
    fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        asked = time.monotonic()
        waited_for: list[str] = []
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                who = describe(_holder(directory))
                if not waited_for or waited_for[-1] != who:
                    waited_for.append(who)
                    say(f"waiting for the host's benchmark lock ({directory / 'lock'}), held by {who}")
                time.sleep(POLL_S)
        pid = os.getpid()
        write_json_atomic(directory / HOLDER, {
            "study": str(study), "pid": pid, "pid_start": process_start_time(pid), "what": what,
            "since_utc": datetime.now(UTC).isoformat()})
        try:
            yield {"lock": str(directory / "lock"), "waited_s": round(time.monotonic() - asked, 3),
                   "waited_for": waited_for}
        finally:
            # the next holder overwrites it; removed here so that nobody reads a finished launch as holder
            with contextlib.suppress(OSError):
                (directory / HOLDER).unlink()
    finally:
        os.close(fd)  # releases the flock
