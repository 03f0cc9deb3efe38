"""Private places for what dlvirt does as root: directories only it can write, checked on every use.

A directory in a shared place (``/var/tmp``, a world-writable parent) that someone else made first,
or swapped for a symbolic link, would let that user choose where root's ``mkfs``, QEMU or ``debugfs``
write. So every runtime directory dlvirt uses is checked with ``lstat`` (no symbolic link followed):
a directory, owned by the user dlvirt runs as (root), writable by nobody else; each of its ancestors
owned by root or that user and writable by nobody else unless sticky (``/tmp``'s rule keeps others
from renaming what is not theirs). dlvirt makes missing ones mode 0700 whatever the umask (parents
it makes as searchable as the place below needs: ``private_dir``); it never takes over or loosens one
that is there. Per-job folders come from ``mkdtemp`` (a fresh random name,
0700) and files in them are created without following symbolic links.
"""

from __future__ import annotations

import os
import pwd
import stat
import tempfile
from pathlib import Path

from dlvirt.core.errors import UnsafePlace


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _problem(path: Path, info: os.stat_result, *, leaf: bool) -> str | None:
    me = os.geteuid()
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if leaf and info.st_uid != me or info.st_uid not in (0, me):
        return f"is owned by {_owner(info.st_uid)}, not by {_owner(me)} that dlvirt runs as"
    if info.st_mode & 0o022 and (leaf or not info.st_mode & stat.S_ISVTX):
        return f"is writable by {'group and others' if info.st_mode & 0o002 else 'its group'} " \
               f"(mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def check(path: Path, what: str) -> Path:
    """Refuse (``UnsafePlace``) unless ``path`` and its ancestors are dlvirt's alone (see the module
    doc); ``what`` says in the message what the directory is for. Returns ``path``."""
    path = Path(os.path.abspath(path))
    parent = Path(os.path.realpath(path.parent))  # root's own links (/var/run -> /run) are fine above
    for directory in (*reversed(parent.parents), parent):
        problem = _problem(directory, os.lstat(directory), leaf=False)
        if problem:
            raise UnsafePlace(f"{what} {path}: its parent {directory} {problem}; dlvirt writes there as root "
                              "only when nobody else can change it")
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise UnsafePlace(f"{what} {path} does not exist") from None
    problem = _problem(path, info, leaf=True)
    if problem:
        raise UnsafePlace(f"{what} {path} {problem}; dlvirt refuses to use it (remove it, or fix its owner and "
                          "mode to root and 0700, if it is yours)")
    return path


def _chmod(directory: Path, mode: int) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def private_dir(path: Path, what: str, mode: int = 0o700) -> Path:
    """``path`` made (with its missing parents) or, when it is there, checked; then set to ``mode``
    (0700: nobody else may even look in; 0711 where another user dlvirt runs a process as must reach
    a path below it). The parents dlvirt makes get 0700 with the search bits of ``mode``, whatever the
    umask: on a fresh host, where dlvirt makes /var/lib/dlvirt for the guests' 0711 work directory,
    the VMM's user must pass through it too. ``what`` names it in a refusal."""
    path = Path(os.path.abspath(path))
    missing = [p for p in (path, *path.parents) if not os.path.lexists(p)]
    parent_mode = 0o700 | mode & 0o011
    for directory in reversed(missing):
        try:
            os.mkdir(directory, parent_mode)
        except FileExistsError:
            continue  # made by someone else meanwhile: check() judges it
        _chmod(directory, parent_mode)  # mkdir's mode is cut by the umask
    check(path, what)
    _chmod(path, mode)  # checked: ours, no symbolic link, nobody else may write it
    return path


def job_dir(root: Path, prefix: str, what: str, root_mode: int = 0o700) -> Path:
    """A fresh folder ``root/<prefix><random>`` (0700) in the private directory ``root`` (made or
    set to ``root_mode``, see ``private_dir``)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=private_dir(root, what, root_mode)))


def create_file(path: Path, data: bytes = b"") -> Path:
    """Create ``path`` afresh (refusing one that exists, a symbolic link included), mode 0600, holding
    ``data``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path
