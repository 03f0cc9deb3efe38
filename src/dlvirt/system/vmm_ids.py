"""A uid of its own for each job's VMM, so that a guest that escapes into its QEMU cannot open the
disks and console of another job's guest.

libvirt runs a VM's QEMU under a static DAC label ``+uid:+gid``, which needs no user account: each
VM job leases a uid from a range no login, system or container user takes (above 2^31 - 2^24; the
usual subordinate-uid ranges of user namespaces stay far below it) for as long as its runner holds
the lease's lock, a file ``/run/dlvirt-vmm-uids/<uid>`` locked with ``flock`` (removed on release):
a killed runner's lease ends with it. The uid is drawn at random (1 in 65 536), so a killed job's
leftovers (its files, until cleanup removes them) do not go to the next job's QEMU. A uid still
owned by a running process (the QEMU of a killed runner, before cleanup stops it) or named in the
user or group database is skipped.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import pwd
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dlvirt.core.errors import UnsafePlace
from dlvirt.system import private

UID_BASE = 0x7F000000       # 2 130 706 432
UID_COUNT = 1 << 16
# beside /run/dlvirt, whose every subdirectory is a daemon's run directory (dlvirt.system.engines)
LEASE_DIR = Path("/run/dlvirt-vmm-uids")
LEASE_DIR_WHAT = "dlvirt's VMM uid leases"


class LeaseError(RuntimeError):
    """No uid of the range could be leased."""


@dataclass
class Lease:
    """A uid held for one job's VMM until ``release`` (or the holder's end)."""

    uid: int
    path: Path
    fd: int | None

    def release(self) -> None:
        """Remove the lease file while still holding its lock (a process that opened it meanwhile
        finds it unlinked and moves on), then unlock."""
        if self.fd is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            os.close(self.fd)
            self.fd = None


def _process_uids() -> set[int]:
    """The real uids of the running processes."""
    uids = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            line = next(x for x in status.read_text().splitlines() if x.startswith("Uid:"))
            uids.add(int(line.split()[1]))
    return uids


def _known_id(number: int) -> bool:
    """Whether a user or a group has ``number`` (MVM's QEMU takes it as its gid too)."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(number)
        except KeyError:
            continue
        return True
    return False


def lease(holder: str, lease_dir: Path = LEASE_DIR) -> Lease:
    """A free uid of the range, locked for this process (``holder`` is written into the lease for
    whoever looks)."""
    directory = private.private_dir(lease_dir, LEASE_DIR_WHAT)
    running = _process_uids()
    start = random.randrange(UID_COUNT)
    for step in range(UID_COUNT):
        uid = UID_BASE + (start + step) % UID_COUNT
        if uid in running or _known_id(uid):
            continue
        path = directory / str(uid)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.stat(path).st_ino != os.fstat(fd).st_ino:  # released and removed meanwhile
                raise BlockingIOError
        except (BlockingIOError, FileNotFoundError):
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.write(fd, f"{holder}\n".encode())
        return Lease(uid, path, fd)
    raise LeaseError(f"no free uid in {UID_BASE}..{UID_BASE + UID_COUNT - 1} for a VMM ({directory})")


def remove_stale(lease_dir: Path = LEASE_DIR) -> Iterator[str]:
    """Remove the lease files no live holder locks (a killed runner's, one never released), each
    under its own lock, as ``Lease.release`` does; a directory that is not private is left alone."""
    if not os.path.lexists(lease_dir):
        return
    try:
        private.check(lease_dir, LEASE_DIR_WHAT)
    except UnsafePlace as exc:
        yield f"left alone: {exc}"
        return
    for path in sorted(lease_dir.iterdir()):
        if not path.name.isdigit():
            continue
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            path.unlink()
        except (BlockingIOError, FileNotFoundError):
            continue  # held: a live job's
        finally:
            os.close(fd)
        yield f"removed stale VMM uid lease {path}"
