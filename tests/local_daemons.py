"""Daemons a test starts by hand (this machine has no service manager): each runs in the
foreground as our child, with its own config, state and log files, and is stopped by its PID when
the test ends, passed or failed."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def stop(proc: subprocess.Popen, grace_s: float = 20) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def daemon(argv: list[str], log: Path, ready: Callable[[], bool], timeout_s: float = 30,
           env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """Run ``argv`` (a foreground daemon) until the block ends; ``ready`` says when it serves."""
    with open(log, "ab") as out:
        # own session: a Ctrl-C at the terminal reaches pytest, whose teardown then stops it
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited ({proc.returncode}): {log.read_text(errors='replace')[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{argv[0]} not ready after {timeout_s} s: {log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield proc
    finally:
        stop(proc)
