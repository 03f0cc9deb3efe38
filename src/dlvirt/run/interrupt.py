"""Stop the workflow's running jobs when Snakemake alone is interrupted.

Ctrl-C signals the terminal's whole process group, so every job's runner gets SIGINT and tears its
platform down. A SIGINT sent to the Snakemake process alone (``kill -INT``, as a supervisor does)
reaches no job: Snakemake's local executor then only shuts its thread pool down, which waits for
the running jobs to end by themselves, so a guest job ran on for minutes with its QEMU. The handler
installed here first sends SIGTERM to each job's ``python -m dlvirt`` runner (which turns it into
the same teardown, ``dlvirt.core.signals.stop_on_signals``), then lets Snakemake's own handling go on.
A job Snakemake was just starting when the signal came (its shell not yet the runner) would be
missed by that one pass: from then on a thread of the Snakemake process looks again every
``SWEEP_S`` and stops such late runners too (not the workflow's own ``engines``/``cleanup`` steps,
which its end handlers run).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from dlvirt.core.owner import process_start_time
from dlvirt.core.signals import start_thread

SWEEP_S = 0.5
SWEEPER = "dlvirt-stop-late-jobs"
WORKFLOW_STEPS = ("engines", "cleanup")  # python -m dlvirt <step> of the workflow's own handlers


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


def _stop(runners: list[int], signalled: set[tuple[int, int | None]]) -> None:
    for pid in runners:
        key = (pid, process_start_time(pid))
        if key not in signalled:
            signalled.add(key)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def _late_runners() -> list[int]:
    """Job runners below this process, less the workflow's own steps."""
    table = _process_table()
    late = []
    for pid in job_runners(os.getpid()):
        step = table.get(pid, (0, []))[1][3:4]
        if step and step[0] not in WORKFLOW_STEPS:
            late.append(pid)
    return late


def stop_jobs_on_interrupt() -> None:
    """In the Snakemake process: on SIGINT, SIGTERM every job runner (and, from then on, any job
    started late), then Snakemake's handling."""
    previous = signal.getsignal(signal.SIGINT)
    signalled: set[tuple[int, int | None]] = set()

    def sweep() -> None:
        while True:
            time.sleep(SWEEP_S)
            _stop(_late_runners(), signalled)

    def forward(signum: int, frame: FrameType | None) -> Any:
        _stop(job_runners(os.getpid()), signalled)
        if not any(t.name == SWEEPER for t in threading.enumerate()):
            start_thread(sweep, SWEEPER)  # takes no SIGINT meant for Snakemake's main thread
        if callable(previous):
            return previous(signum, frame)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, forward)
