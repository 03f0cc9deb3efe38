"""Stopping on SIGINT and SIGTERM, and the few steps a stop must not cut in half.

A job's runner stops on SIGINT (Ctrl-C) and SIGTERM (Snakemake, SLURM, ``dlvirt.run.interrupt``):
both become an exception, so every platform's teardown runs. Two things could lose or spoil that:

- a process started with SIGINT *ignored* (anything a non-interactive shell starts in the
  background, e.g. ``./setup.sh test &`` or a workflow run from a script) keeps ignoring it: Python
  installs its KeyboardInterrupt handler only where SIGINT was not ignored. ``stop_on_signals``
  installs both handlers whatever the process inherited.
- a signal landing inside the step that creates something (a container, a VMM) before its handle
  is stored, or inside the teardown itself (Ctrl-C in a terminal delivers SIGINT and Snakemake's
  forwarded SIGTERM at once), would leave the thing behind. ``held`` defers such signals until the
  step is done and then delivers the first; the same signal a second time is not held (someone
  insists: a stuck teardown can still be stopped, and the next start's cleanup removes what is left).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


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
