"""Format versions of the documents dlvirt writes, and the check every reader makes.

Every document carries ``format_version`` (a JSON document: a top-level key; a CSV: a column). A
reader accepts the version this code writes; a document without one was written before versions
were recorded and is read as version 1 where that is the format it still is (``VERSIONS``'s
``since``). Any other version is refused with a message naming the file, instead of guessing.
Changing a document's format: bump its version here; where this code still reads the older versions
(a record's renamed fields, ``Record.renamed``), set its ``oldest``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dlvirt.core.atomic import read_json

KEY = "format_version"

Document = Literal["run record", "harness output", "harness job", "plan", "host facts", "summary", "claims",
                   "compare", "table", "dataset info", "weights check", "calibration"]


@dataclass(frozen=True)
class Format:
    version: int      # the version this code writes and reads
    unversioned: bool  # a document without format_version is this format (written before versions were)
    oldest: int | None = None  # the oldest version this code still reads (None: ``version`` only)


VERSIONS: dict[str, Format] = {
    # run record, harness output: 2 spec.tool_settings and a repetition's tool_output (1: named dlbs, still read)
    "run record": Format(2, True, oldest=1),
    "harness output": Format(2, True, oldest=1),
    "harness job": Format(2, True, oldest=1),  # 2: tool_settings (1: dlbs)
    # plan: 2 structured left-out entries (1, unversioned: [what, why] prose pairs); 3 node_kind
    "plan": Format(3, False),
    "host facts": Format(1, True),
    "summary": Format(1, True),
    # claims: 2 per-part margin, ratio, interval, df, launches, outcome; p_holds, p_fails; 3 calibration
    "claims": Format(3, False),
    # compare: 2 added measure; 3 names its column format_version (was format); 4 others_cores_a/_b;
    # 5 the round as a variance component, day_sd and calibration
    "compare": Format(5, False),
    "table": Format(1, True),
    "dataset info": Format(1, True),  # a prepared dataset's dataset.json (the run record keeps it as dataset)
    "weights check": Format(1, False),  # <weights>.checked.json: the file's identity when its hash matched
    "calibration": Format(1, False),  # dlvirt calibrate's document (dlvirt.core.calibration)
}


class FormatError(ValueError):
    """A document in a format this dlvirt does not read; the message names the file."""


def version(document: Document) -> int:
    return VERSIONS[document].version


def stamped(document: Document, content: dict[str, Any]) -> dict[str, Any]:
    """``content`` with its format version first."""
    return {KEY: VERSIONS[document].version, **{k: v for k, v in content.items() if k != KEY}}


def check(document: Document, found: Any, where: str) -> None:
    """Refuse a ``document`` whose ``format_version`` is ``found`` (None: absent) unless this code reads it."""
    fmt = VERSIONS[document]
    if found is None and fmt.unversioned:
        return
    if isinstance(found, int) and not isinstance(found, bool) and (fmt.oldest or fmt.version) <= found <= fmt.version:
        return
    what = "no format_version" if found is None else f"format_version {found!r}"
    raise FormatError(f"{where}: a {document} with {what}; this dlvirt reads {document} format "
                      f"{fmt.version} only (written by another dlvirt version: rerun the step that writes it "
                      "with this one)")


def checked(document: Document, content: Any, where: str) -> Any:
    """``content`` (a JSON document) once its version is checked, without the ``format_version`` key."""
    if not isinstance(content, dict):
        return content
    check(document, content.get(KEY), where)
    return {k: v for k, v in content.items() if k != KEY}


def read_document(path: str | Path, document: Document) -> Any:
    """The JSON document at ``path`` once its version is checked (without the ``format_version`` key)."""
    return checked(document, read_json(Path(path)), str(path))


def check_column(document: Document, values: Iterable[Any], where: str) -> None:
    """A CSV document's ``format_version`` column: every row's must be one this code reads."""
    for found in {int(v) if isinstance(v, float) and v == int(v) else v for v in values}:
        check(document, found, where)
