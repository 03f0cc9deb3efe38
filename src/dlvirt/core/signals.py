"""Stopping on SIGINT and SIGTERM, and the few steps a stop must not cut in half.

A job's runner stops on SIGINT (Ctrl-C) and SIGTERM (Snakemake, SLURM, ``dlvirt.run.interrupt``):
both become an exception, so every platform's teardown runs. Three things could lose or spoil that:

- a process started with SIGINT *ignored* (anything a non-interactive shell starts in the
  background, e.g. ``./setup.sh test &`` or a workflow run from a script) keeps ignoring it: Python
  installs its KeyboardInterrupt handler only where SIGINT was not ignored. ``stop_on_signals``
  installs both handlers whatever the process inherited.
- a signal landing inside the step that creates something (a container, a VMM) before its handle
  is stored, or inside the teardown itself (Ctrl-C in a terminal delivers SIGINT and Snakemake's
  forwarded SIGTERM at once), would leave the thing behind. ``held`` defers such signals until the
  step is done and then delivers the first; the same signal a second time is not held (someone
  insists: a stuck teardown can still be stopped, and the next start's cleanup removes what is left).
- a signal sent to the process is taken by whichever of its threads the kernel picks (with two sent at
  once, the second wakes another thread, which may take the first off the queue), but Python runs
  handlers only in the main thread and does not wake it: a main thread blocked in a system call with
  no timeout (CN's wait for its container) slept on, and Ctrl-C was lost (CN's interrupt test hung
  about every other time with SIGINT + SIGTERM). So the threads a runner starts take no stop signal
  (``start_thread``: they block them), and the main thread waits in slices (``wait_thread``), never
  in one long call: a stop signal taken by a thread that is not dlvirt's (a C library's pool, e.g.
  OpenBLAS's, started when numpy loads) is acted on within a slice.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
SLICE_S = 0.25  # the longest the main thread waits in one call for a thread (wait_thread)


_stopping: list[int] = []  # the stop signal this process is acting on, once one has landed


def _stop(signum: int, frame: FrameType | None) -> None:
    # Ctrl-C under Snakemake delivers SIGINT and the forwarded SIGTERM at once. The second, different
    # signal is the same stop: raising it would cut the teardown the first one started at whatever
    # line it has reached (before its steps are held, or inside a library's locked section). The same
    # signal again is someone insisting, and is raised again.
    if _stopping and signum != _stopping[0]:
        return
    _stopping[:] = [signum]
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def stop_on_signals() -> None:
    """SIGINT raises KeyboardInterrupt and SIGTERM SystemExit(143), even where they were ignored;
    a different stop signal after the first is the same stop and raises nothing."""
    _stopping.clear()
    for stop in STOP_SIGNALS:
        signal.signal(stop, _stop)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Defer SIGINT/SIGTERM during the block (see the module doc); no-op outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    pending: list[int] = []

    def restore() -> None:
        for number, handler in previous.items():
            signal.signal(number, handler)

    def hold(signum: int, frame: FrameType | None) -> None:
        if signum in pending:  # sent again: deliver it now, through the handler the process had
            restore()
            signal.raise_signal(signum)
            return
        pending.append(signum)

    for stop in STOP_SIGNALS:
        signal.signal(stop, hold)
    try:
        yield
    finally:
        restore()
        if pending:
            signal.raise_signal(pending[0])


def start_thread(target: Callable[[], Any], name: str) -> threading.Thread:
    """Start ``target`` in a daemon thread that never takes a stop signal (see the module doc):
    it is created with SIGINT and SIGTERM blocked, so the kernel hands them to another thread."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        thread.start()  # the new thread inherits the blocked mask
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # one that came meanwhile is delivered here
    return thread


def wait_thread(thread: threading.Thread, timeout_s: float | None = None) -> bool:
    """Wait for ``thread`` to end, in slices of ``SLICE_S``, so that a stop signal lands in the main
    thread within a slice whichever thread took it; False if it still runs after ``timeout_s``."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while thread.is_alive():
        left = SLICE_S if deadline is None else min(SLICE_S, deadline - time.monotonic())
        if left <= 0:
            return False
        thread.join(left)
    return True
