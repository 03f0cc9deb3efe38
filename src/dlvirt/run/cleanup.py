"""Remove what a killed workflow left behind, recognised by dlvirt's naming, and nothing else.

Every name dlvirt gives carries its maker's tag, ``<pid>-<start time>`` (``dlvirt.core.owner``), and
cleanup matches the *whole* name against the exact pattern of that kind of thing, looks for it only
where dlvirt makes it, and removes it only when no process with that PID and that start time runs:

- cgroups ``dlvirt-<run id>``: children of each hierarchy's root and of the groups on the way from
  this process's own group up to it (a job's group is nested in its runner's where the kernel
  allows, ``dlvirt.system.cgroups``);
- containers ``dlvirt-<run id>`` carrying dlvirt's labels, in dlvirt's own Docker engine and the
  configured one;
- libvirt domains and QEMU/Firecracker processes named ``dlvirt-<run id>``, and guests' work folders
  ``dlvirt-<run id>-<random>`` in the guests' private work directory (refused, and said so, when that
  directory is not private);
- under the workflow's own trees (``results/``, ``resources/``): job work directories
  ``.work-<run id>-<random>``, image builds ``.build-<variant>-<tag>-<random>`` (anything still
  mounted inside unmounted first), fetched archives ``.fetch-<tag>-<random>`` and atomic writes'
  temporary files ``.<name>.<tag>.<random>``.

So a ``dlvirt-study`` cgroup, a container someone named ``dlvirt-test``, or a PID the kernel handed to
someone else is never touched.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import signal
import stat
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from dlvirt.core.credentials import redact
from dlvirt.core.errors import UnsafePlace
from dlvirt.core.owner import RUN_ID, TAG, TEMP_SUFFIX, is_stale, maker, process_start_time
from dlvirt.system import cgroups, engines, keepaway, private, vmm_ids

PREFIX = "dlvirt-"
RUN_NAME = rf"{PREFIX}{RUN_ID}"                                   # cgroups, containers, guests
GUEST_DIR = rf"{PREFIX}{RUN_ID}-{TEMP_SUFFIX}"                    # a guest's work folder
WORK_DIR = rf"\.work-{RUN_ID}-{TEMP_SUFFIX}"                      # dlvirt.run.runner.WORK_PREFIX
BUILD_DIR = rf"\.build-[a-z]+-{TAG}-{TEMP_SUFFIX}"                # dlvirt.platforms.guestimage.build
FETCH_DIR = rf"\.fetch-{TAG}-{TEMP_SUFFIX}"                       # dlvirt.run.remote
TEMP_FILE = rf"\..+\.{TAG}\.{TEMP_SUFFIX}(\.part)?"               # dlvirt.core.atomic, dlvirt.apps.download
TREES = {WORK_DIR: "job work directory", BUILD_DIR: "image build tree", FETCH_DIR: "fetched archive"}


def cgroup_places() -> list[Path]:
    """Where dlvirt makes cgroups: each hierarchy's root and the groups from this process's own up."""
    places: set[Path] = set()
    v2 = cgroups.v2_root()
    if v2 is not None:
        places.update(cgroups.walk_up(v2, cgroups.own_path(None)))
    for base in cgroups.v1_hierarchies():
        controller = next(c for c in ("cpu", "cpuset", "memory") if cgroups.v1_dir(c) == base)
        places.update(cgroups.walk_up(base, cgroups.own_path(controller)))
    return sorted(places)


def dlvirt_cgroups() -> list[Path]:
    """dlvirt's cgroups (whole names matching ``dlvirt-<run id>``) where dlvirt makes them."""
    found: set[Path] = set()
    for place in cgroup_places():
        with contextlib.suppress(OSError):
            found.update(p for p in place.iterdir() if re.fullmatch(RUN_NAME, p.name) and p.is_dir())
    return sorted(found)


def remove_stale_cgroups() -> Iterator[str]:
    for directory in dlvirt_cgroups():
        if is_stale(directory.name, RUN_NAME):
            with contextlib.suppress(cgroups.CgroupError):
                cgroups.Cgroup(dirs=[directory]).remove()
                yield f"removed stale cgroup {directory}"


def remove_stale_containers(settings: dict[str, Any]) -> Iterator[str]:
    """dlvirt-labelled containers named ``dlvirt-<run id>`` whose runner is gone, in dlvirt's own
    Docker engine and the one ``settings`` (platforms.CN: every container platform's engine) selects,
    when they answer; then what the container platforms' runtimes left in dlvirt's own engine beyond
    its containers (a runsc sandbox)."""
    import docker

    from dlvirt.platforms import CLASSES, container_platforms
    from dlvirt.platforms.cn import Container
    from dlvirt.system import docker_engine

    own = docker_engine.own_url(settings)
    for url in sorted({own, docker_engine.engine_url(settings)}):
        if not docker_engine.answers(url):
            continue
        with contextlib.closing(docker.DockerClient(base_url=url, timeout=docker_engine.API_TIMEOUT_S)) as client:
            for container in docker_engine.labelled_containers(client):
                if is_stale(container.name, RUN_NAME):
                    container.remove(force=True)
                    yield f"removed stale container {container.name} ({redact(url)})"
            if url == own:
                exec_root = engines.RUN_ROOT / docker_engine.daemon_name(settings) / "exec"
                for name in container_platforms():
                    cls = CLASSES[name]
                    assert issubclass(cls, Container)
                    yield from cls.leftovers(lambda: {c.id for c in client.containers.list(all=True)}, exec_root)


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
        if re.fullmatch(RUN_NAME, name):
            return name
    return None


def _kill_stale_guest_process(pid: int) -> str | None:
    """SIGKILL ``pid`` when it is a QEMU/Firecracker running a stale dlvirt guest. Through a pidfd,
    the process checked is the one signalled; a kernel without pidfds (before 5.3) gets the
    process's start time checked again just before the signal."""
    try:
        fd: int | None = os.pidfd_open(pid)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            return None
        fd = None
    try:
        started = process_start_time(pid)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        if not Path(cmdline[0]).name.startswith(("qemu-system", "firecracker")):
            return None
        name = _guest_owner(cmdline)
        if name is None or not is_stale(name, RUN_NAME):
            return None
        if fd is not None:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        elif started is not None and process_start_time(pid) == started:
            os.kill(pid, signal.SIGKILL)
        else:
            return None
        return name
    except OSError:
        return None
    finally:
        if fd is not None:
            os.close(fd)


def guest_work_roots(platform_settings: dict[str, Any]) -> list[Path]:
    """The guests' work directories: the default and any a guest platform's work_dir names."""
    from dlvirt.platforms import guest

    roots = {guest.DEFAULT_WORK_DIR}
    roots.update(guest.work_root(s) for s in platform_settings.values() if isinstance(s, dict) and s.get("work_dir"))
    return sorted(roots)


def remove_stale_guests(platform_settings: dict[str, Any] | None = None) -> Iterator[str]:
    """Guests (libvirt domains, QEMU/Firecracker processes) named ``dlvirt-<run id>``, their work
    folders and VMM uid leases whose runner is gone. libvirtd is asked only when it answers already."""
    from dlvirt.platforms import guest
    from dlvirt.platforms.vm import URI, libvirtd_answers, quiet_libvirt

    if libvirtd_answers():
        libvirt = quiet_libvirt()
        conn = libvirt.open(URI)
        try:
            for domain in conn.listAllDomains():
                if is_stale(domain.name(), RUN_NAME):
                    with contextlib.suppress(libvirt.libvirtError):
                        domain.destroy()
                        yield f"destroyed stale libvirt domain {domain.name()}"
        finally:
            conn.close()
    for proc in Path("/proc").glob("[0-9]*"):
        name = _kill_stale_guest_process(int(proc.name))
        if name is not None:
            yield f"killed stale guest process {proc.name} ({name})"
    for root in guest_work_roots(platform_settings or {}):
        if not os.path.lexists(root):
            continue
        try:
            private.check(root, guest.WORK_DIR_WHAT)
        except UnsafePlace as exc:
            yield f"left alone: {exc}"
            continue
        for directory in sorted(root.iterdir()):
            if is_stale(directory.name, GUEST_DIR) and stat.S_ISDIR(os.lstat(directory).st_mode):
                shutil.rmtree(directory, ignore_errors=True)
                yield f"removed stale guest work folder {directory}"
    yield from vmm_ids.remove_stale()  # the guests and their files gone, their uids' leases go too


def _mounts_under(tree: Path) -> list[Path]:
    """Mount points at or below ``tree`` (deepest first)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = Path(line.split()[4].encode().decode("unicode_escape"))
        if point == tree or tree in point.parents:
            found.append(point)
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _remove_tree(tree: Path, what: str) -> str:
    for point in _mounts_under(tree):
        subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)
    still = _mounts_under(tree)
    if still:
        return f"left alone: stale {what} {tree} still has {still[0]} mounted"
    shutil.rmtree(tree, ignore_errors=True)
    return f"removed stale {what} {tree}"


def remove_stale_work_dirs(roots: Iterable[Path]) -> Iterator[str]:
    """Under ``roots`` (the workflow's own trees): job work directories, image build trees, fetched
    archives and atomic writes' temporary files whose maker is gone (a hard-killed job's)."""
    for root in roots:
        root = Path(root).absolute()
        if not root.is_dir():
            continue
        for parent, dirs, files in os.walk(root):  # never follows a symbolic link
            for name in sorted(dirs):
                tree = Path(parent) / name
                if os.path.ismount(tree):  # a build's /proc, say: never walked
                    dirs.remove(name)
                    continue
                for pattern, what in TREES.items():
                    if maker(name, pattern) is not None:  # dlvirt's tree: never walked, stale or not
                        dirs.remove(name)
                        if is_stale(name, pattern):
                            yield (_remove_tree(tree, what) if stat.S_ISDIR(os.lstat(tree).st_mode)
                                   else f"left alone: {tree} is named like a stale {what} but is a symbolic link")
                        break
            for name in sorted(files):
                if is_stale(name, TEMP_FILE):
                    (Path(parent) / name).unlink(missing_ok=True)
                    yield f"removed stale temporary file {Path(parent) / name}"


def remove_stale_local(platform_settings: dict[str, Any] | None = None) -> Iterator[str]:
    """What a killed job left on this machine alone (cgroups, containers, guests): the cleanup a job
    runs when it starts on a cluster node, where the workflow's own start never ran."""
    from dlvirt.platforms import container_platform

    yield from keepaway.restore_stale()  # before the cgroups: the processes a killed launch kept away
    yield from remove_stale_cgroups()
    yield from remove_stale_containers((platform_settings or {}).get(container_platform(), {}))
    yield from remove_stale_guests(platform_settings)


def remove_stale(platform_settings: dict[str, Any] | None = None, work_roots: Iterable[Path] = ()) -> Iterator[str]:
    """Everything a killed run left: cgroups, containers, guests, what lies under ``work_roots``,
    then engines dlvirt started that nobody uses any more. ``platform_settings``: the config's
    platforms section."""
    yield from remove_stale_local(platform_settings)
    yield from remove_stale_work_dirs(work_roots)
    yield from engines.release_orphans()
