"""A launch taking turns with another process on its CPUs (``JobSpec.turns``, bare metal only).

Before each repetition, warm-ups included, and once after the last, the harness tells a listener
on a Unix socket which repetition comes next (None: none) and on which CPUs it runs, then waits,
blocked and outside every timed window, until the listener answers ``go``. What the listener does
meanwhile is its business: benchmarks/scaling.py times a pass of the framework's own loop on the
same CPUs, so that every repetition is bracketed by passes run just before and just after it, at
the same minute's host speed (on a cloud guest that speed wanders by tens of percent within
seconds; docs/measurement.md, "The host's speed").
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Generator
from pathlib import Path
from types import TracebackType
from typing import Any, Self

GO = "go"


class TurnError(RuntimeError):
    """The other side of a turn broke the protocol or went away."""


class Turns:
    """The harness's side: ``take(next_rep)`` hands the CPUs over and returns when they are back."""

    def __init__(self, path: Path) -> None:
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._socket.connect(str(path))
        except OSError as error:
            self._socket.close()
            raise TurnError(f"nobody takes turns at {path}: {error}") from error
        self._stream = self._socket.makefile("rw", encoding="utf-8")

    def take(self, next_rep: int | None) -> None:
        self._stream.write(json.dumps({"next": next_rep, "cpus": sorted(os.sched_getaffinity(0))}) + "\n")
        self._stream.flush()
        answer = self._stream.readline().strip()
        if answer != GO:
            raise TurnError(f"the other side of the turns answered {answer!r}, not {GO!r}")

    def close(self) -> None:
        self._stream.close()
        self._socket.close()


class TurnListener:
    """The other side: listens at ``path``; ``turns()`` yields each turn the launch hands over (its
    message: ``next`` and ``cpus``) and answers go when the caller asks for the next one; it ends
    when the launch closes its end. ``launch_alive`` is asked while waiting for the launch to
    connect, so that a launch failing before it does is not waited for forever."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        self._server.listen(1)
        self._server.settimeout(0.5)

    def turns(self, launch_alive: Callable[[], bool]) -> Generator[dict[str, Any], None, None]:
        while True:
            try:
                connection, _ = self._server.accept()
                break
            except TimeoutError:
                if not launch_alive():
                    return
        connection.settimeout(None)
        with connection, connection.makefile("rw", encoding="utf-8") as stream:
            for line in stream:
                yield json.loads(line)
                stream.write(GO + "\n")
                stream.flush()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._server.close()
        self.path.unlink(missing_ok=True)
