"""Stop the workflow's running jobs when Snakemake alone is interrupted.

Ctrl-C signals the terminal's whole process group, so every job's runner gets SIGINT and tears its
platform down. A SIGINT sent to the Snakemake process alone (``kill -INT``, as a supervisor does)
reaches no job: Snakemake's local executor then only shuts its thread pool down, which waits for
the running jobs to end by themselves, so a guest job ran on for minutes with its QEMU. The handler
installed here first sends SIGTERM to each job's ``python -m dlvirt`` runner (which turns it into
the same teardown, ``dlvirt.core.signals.stop_on_signals``), then lets Snakemake's own handling go on.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from types import FrameType
from typing import Any


def _process_table() -> dict[int, tuple[int, list[str]]]:
    """pid -> (parent pid, command line) of every process we may read."""
    table: dict[int, tuple[int, list[str]]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (proc / "stat").read_text()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
            table[int(proc.name)] = (ppid, cmdline)
    return table


def _is_dlvirt(cmdline: list[str]) -> bool:
    return len(cmdline) > 2 and cmdline[1:3] == ["-m", "dlvirt"]


def job_runners(root: int) -> list[int]:
    """The outermost ``python -m dlvirt`` processes below ``root`` (one per running job; the
    dlvirt processes they start are theirs to stop)."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if _is_dlvirt(table[pid][1]):
            found.append(pid)
        else:
            todo.extend(children.get(pid, []))
    return sorted(found)


def stop_jobs_on_interrupt() -> None:
    """In the Snakemake process: on SIGINT, SIGTERM every job runner, then Snakemake's handling."""
    previous = signal.getsignal(signal.SIGINT)

    def forward(signum: int, frame: FrameType | None) -> Any:
        for pid in job_runners(os.getpid()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        if callable(previous):
            return previous(signum, frame)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, forward)
