"""Whose a thing is: the tag dlvirt puts in the name of everything it creates, and whether its maker
still runs.

A tag is ``<pid>-<start time>`` of the process that made the thing: its PID and the kernel's start
time of that PID (clock ticks since boot, ``/proc/<pid>/stat`` field 22). A run id adds eight random
hex digits: ``<pid>-<start time>-<hex>``. The maker is alive only while a process with that PID *and*
that start time runs, so a PID the kernel has handed to someone else never keeps a leftover alive,
and a stranger's process is never taken for dlvirt's. Names that do not match the exact pattern are
not dlvirt's and are left alone.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

TAG = r"(?P<pid>[1-9][0-9]*)-(?P<start>[0-9]+)"
RUN_ID = rf"{TAG}-[0-9a-f]{{8}}"
# tempfile.mkstemp/mkdtemp's random suffix
TEMP_SUFFIX = r"[a-z0-9_]{8}"


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), None if no such live process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):  # exited, not yet reaped by its parent
        return None
    return int(fields[19])


def process_tag(pid: int | None = None) -> str:
    """``<pid>-<start time>`` of ``pid`` (default: this process)."""
    pid = os.getpid() if pid is None else pid
    start = process_start_time(pid)
    if start is None:
        raise ProcessLookupError(f"no running process {pid}")
    return f"{pid}-{start}"


def new_run_id() -> str:
    return f"{process_tag()}-{uuid.uuid4().hex[:8]}"


def maker(name: str, pattern: str) -> tuple[int, int] | None:
    """(pid, start time) of the maker named in ``name`` when the whole name matches ``pattern`` (a
    regular expression holding ``TAG``'s groups); None: not a name dlvirt gives."""
    match = re.fullmatch(pattern, name)
    if match is None:
        return None
    return int(match["pid"]), int(match["start"])


def is_stale(name: str, pattern: str) -> bool:
    """Whether ``name`` is dlvirt's (matches ``pattern``) and its maker no longer runs."""
    found = maker(name, pattern)
    return found is not None and process_start_time(found[0]) != found[1]
