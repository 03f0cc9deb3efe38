"""Remove what a killed workflow left behind, recognised by dlvirt's naming, and nothing else.

Names carry the run id ``<runner pid>-<random>``; a thing whose runner is still alive belongs to a
job that is running now and is left alone.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from dlvirt import cgroups

PREFIX = "dlvirt-"


def stale_cgroups() -> list[Path]:
    found: list[Path] = []
    for base in {cgroups.ROOT / "cpu", cgroups.ROOT / "cpuset", cgroups.ROOT / "cpu,cpuacct", cgroups.ROOT}:
        if base.is_dir():
            found.extend(p for p in base.glob(f"{PREFIX}*") if p.is_dir())
    return sorted(set(found))


def owner_alive(name: str) -> bool:
    """Whether the runner that created ``dlvirt-<pid>-<hex>...`` still runs."""
    try:
        pid = int(name[len(PREFIX):].split("-", 1)[0])
    except ValueError:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> Iterator[str]:
    for directory in stale_cgroups():
        if owner_alive(directory.name):
            continue
        group = cgroups.Cgroup(dirs=[directory])
        with contextlib.suppress(cgroups.CgroupError):
            group.remove()
            yield f"removed stale cgroup {directory}"
