"""Download a public file and verify its checksum, for users whose machines have network access.

The offline default never calls this: apps generate synthetic inputs in the real formats. A file is
written under its final name only after its SHA-256 matched, so a partial or corrupted download never
passes for the real dataset; a file already present with the right checksum is not fetched again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path

from dlvirt.apps.base import AppError, sha256_file
from dlvirt.core.owner import process_tag


def fetch_verified(url: str, dest: Path, sha256: str, timeout_s: float = 120.0) -> Path:
    """``dest`` holding the file at ``url`` whose SHA-256 is ``sha256``; raise AppError otherwise."""
    dest = Path(dest)
    if dest.is_file() and sha256_file(dest) == sha256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.{process_tag()}.", suffix=".part", dir=dest.parent)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout_s) as response:
            while block := response.read(1 << 20):
                digest.update(block)
                out.write(block)
        got = digest.hexdigest()
        if got != sha256:
            raise AppError(f"{url}: downloaded sha256 {got} != expected {sha256}; not using it")
        shutil.move(tmp, dest)
    except OSError as err:
        raise AppError(f"{url}: download failed ({err}); without network, leave dataset.path unset "
                       f"to use the synthetic dataset") from err
    finally:
        Path(tmp).unlink(missing_ok=True)
    return dest
