"""Remove what a killed workflow left behind, recognised by dlvirt's naming, and nothing else.

Names carry the run id ``<runner pid>-<random>``; a thing whose runner is still alive belongs to a
job that is running now and is left alone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from dlvirt.system import cgroups, engines

PREFIX = "dlvirt-"


def stale_cgroups() -> list[Path]:
    """dlvirt's cgroups in every hierarchy, at its root or (a v1 memory group) inside its runner's."""
    return sorted(p for p in cgroups.ROOT.rglob(f"{PREFIX}*") if p.is_dir() and PREFIX not in p.parent.name)


def owner_alive(name: str, prefix: str = PREFIX) -> bool:
    """Whether the runner that created ``<prefix><pid>-<hex>...`` still runs."""
    try:
        pid = int(name[len(prefix):].split("-", 1)[0])
    except ValueError:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_containers(settings: dict[str, Any]) -> Iterator[str]:
    """dlvirt-labelled containers (named ``dlvirt-<run id>``) whose runner is gone, in dlvirt's own
    Docker engine and the one ``settings`` (platforms.CN) selects, when they answer."""
    import docker

    from dlvirt.system import docker_engine

    for url in sorted({docker_engine.OWN_URL, docker_engine.engine_url(settings)}):
        if not docker_engine.answers(url):
            continue
        with contextlib.closing(docker.DockerClient(base_url=url, timeout=docker_engine.API_TIMEOUT_S)) as client:
            for container in docker_engine.labelled_containers(client):
                if not owner_alive(container.name):
                    container.remove(force=True)
                    yield f"removed stale container {container.name} ({url})"


def _guest_owner(cmdline: list[str]) -> str | None:
    """The dlvirt guest name a QEMU (``-name guest=dlvirt-...``) or Firecracker (``--id dlvirt-...``)
    process runs, None for anyone else's."""
    for i, arg in enumerate(cmdline[:-1]):
        value = cmdline[i + 1]
        if arg == "-name":
            name = dict(p.split("=", 1) for p in value.split(",") if "=" in p).get("guest", value.split(",")[0])
        elif arg == "--id":
            name = value
        else:
            continue
        if name.startswith(PREFIX):
            return name
    return None


def remove_stale_guests() -> Iterator[str]:
    """Guests (libvirt domains, QEMU/Firecracker processes) and their disk folders named
    ``dlvirt-<run id>`` whose runner is gone. libvirtd is asked only when it answers already."""
    from dlvirt.platforms import guest
    from dlvirt.platforms.vm import URI, libvirtd_answers, quiet_libvirt

    if libvirtd_answers():
        libvirt = quiet_libvirt()
        conn = libvirt.open(URI)
        try:
            for domain in conn.listAllDomains():
                if domain.name().startswith(PREFIX) and not owner_alive(domain.name()):
                    with contextlib.suppress(libvirt.libvirtError):
                        domain.destroy()
                        yield f"destroyed stale libvirt domain {domain.name()}"
        finally:
            conn.close()
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if not Path(cmdline[0]).name.startswith(("qemu-system", "firecracker")):
                continue
            name = _guest_owner(cmdline)
            if name is not None and not owner_alive(name):
                os.kill(int(proc.name), signal.SIGKILL)
                yield f"killed stale guest process {proc.name} ({name})"
    if guest.RUN_ROOT.is_dir():
        for directory in sorted(guest.RUN_ROOT.glob(f"{PREFIX}*")):
            if not owner_alive(directory.name):
                shutil.rmtree(directory, ignore_errors=True)
                yield f"removed stale guest disks {directory}"


def remove_stale_work_dirs(roots: Iterable[Path]) -> Iterator[str]:
    """Benchmark jobs' work directories (``.work-<run id>-*`` next to their run file, holding the
    job and a partial harness result) under ``roots`` whose runner is gone: a hard-killed job's."""
    from dlvirt.run.runner import WORK_PREFIX

    for root in roots:
        for directory in sorted(Path(root).rglob(f"{WORK_PREFIX}*")) if Path(root).is_dir() else []:
            if directory.is_dir() and not owner_alive(directory.name, WORK_PREFIX):
                shutil.rmtree(directory, ignore_errors=True)
                yield f"removed stale job work directory {directory}"


def remove_stale(platform_settings: dict[str, Any] | None = None, work_roots: Iterable[Path] = ()) -> Iterator[str]:
    """Everything a killed run left: cgroups, containers, guests, job work directories under
    ``work_roots``, then engines dlvirt started that nobody uses any more. ``platform_settings``:
    the config's platforms section."""
    for directory in stale_cgroups():
        if owner_alive(directory.name):
            continue
        group = cgroups.Cgroup(dirs=[directory])
        with contextlib.suppress(cgroups.CgroupError):
            group.remove()
            yield f"removed stale cgroup {directory}"
    from dlvirt.platforms import container_platform

    yield from remove_stale_containers((platform_settings or {}).get(container_platform(), {}))
    yield from remove_stale_guests()
    yield from remove_stale_work_dirs(work_roots)
    yield from engines.release_orphans()
