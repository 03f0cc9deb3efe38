"""Which code produced a result: a hash of the dlvirt package's source, plus the git commit and
dirty flag where the package lives in a git checkout.

The source hash is what the harness can compute anywhere (a container image or a guest carries a
copy of the package, never the repository), so results compare by it; the commit tells a reader
where to find that code.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parents[1]
# (.c: RS's compiled parser, built from it on install; .pyi: its interface)
SOURCE_SUFFIXES = (".py", ".pyi", ".c", ".j2", ".yaml", ".json", ".txt")


def source_hash(package: Path = PACKAGE) -> str:
    """sha256 over the package's source files (relative path and content, in path order)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES
                       and "__pycache__" not in p.parts):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(PACKAGE), *args], capture_output=True, text=True, timeout=10,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code_version() -> dict[str, Any]:
    """``{"source": hash, "commit": sha or None, "dirty": bool or None}``: the package's source is
    dirty when git reports changes under it (uncommitted work produced the result)."""
    commit = _git("rev-parse", "HEAD")
    dirty = None
    if commit is not None:
        status = _git("status", "--porcelain", "--", str(PACKAGE))
        dirty = bool(status) if status is not None else None
    return {"source": source_hash(), "commit": commit, "dirty": dirty}


def label(version: dict[str, Any] | None) -> str:
    """A short name for a code version: the source hash, with the commit where known."""
    if not version:
        return "not recorded"
    commit = version.get("commit")
    suffix = f" ({commit[:10]}{'+dirty' if version.get('dirty') else ''})" if commit else ""
    return f"{version['source']}{suffix}"
