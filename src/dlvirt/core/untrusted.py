"""Bounds on what an untrusted writer hands back: an edge host's archive, a guest's out-disk, a
container's out folder. The records need only directories and regular files with plain names, so
that is all that is read back, within one budget of entries, bytes and depth; anything else is
refused whole (``OutputRefused``), before the first byte past a bound is written."""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_BYTES = 1 << 30       # all files together
MAX_ENTRIES = 10_000      # files and directories together
MAX_DEPTH = 8             # directories below the top (the records use two)
SAFE_NAME = re.compile(r"[A-Za-z0-9_.+,=@-]{1,255}")


class OutputRefused(RuntimeError):
    """What an untrusted writer left breaks a bound or holds something dlvirt does not read back."""


def check_name(name: str, where: str) -> str:
    """``name`` when it is a plain file name (no ``/``, not ``.`` or ``..``, no control or quote
    characters); OutputRefused naming ``where`` otherwise."""
    if not SAFE_NAME.fullmatch(name) or name in (".", ".."):
        raise OutputRefused(f"{where} holds an entry named {name[:80]!r}; dlvirt reads back only plain names")
    return name


@dataclass
class Budget:
    """Counts what is read back of one untrusted tree (``what`` names it in a refusal)."""

    what: str
    max_bytes: int = MAX_BYTES
    max_entries: int = MAX_ENTRIES
    max_depth: int = MAX_DEPTH
    bytes: int = 0
    entries: int = 0

    def take(self, depth: int, size: int = 0) -> None:
        """Count one entry ``depth`` directories below the top, of ``size`` bytes (0 for a directory)."""
        self.entries += 1
        self.bytes += max(size, 0)
        if depth > self.max_depth:
            raise OutputRefused(f"{self.what} nests deeper than dlvirt reads back (more than {self.max_depth} "
                                "directories)")
        if self.entries > self.max_entries or self.bytes > self.max_bytes:
            raise OutputRefused(f"{self.what} holds more than dlvirt reads back (at least {self.entries} entries, "
                                f"{self.bytes} bytes; at most {self.max_entries} entries of {self.max_bytes} "
                                "bytes in all)")


# Control characters but line feed and tab: what a guest or container prints reaches the job's log
# and a terminal that shows it, where ESC sequences could retitle, recolour or rewrite what is seen.
CONTROL_CHARS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
CONTROL_BYTES = bytes([*range(0, 9), *range(11, 32), 127])  # C1 bytes are UTF-8 continuation bytes: kept


def printable(text: str) -> str:
    """``text`` without control characters (line feeds and tabs kept)."""
    return CONTROL_CHARS.sub("", text)


def printable_bytes(data: bytes) -> bytes:
    """``data`` without ASCII control bytes (line feeds and tabs kept)."""
    return data.translate(None, CONTROL_BYTES)
