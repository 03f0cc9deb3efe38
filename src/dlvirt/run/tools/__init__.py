"""Tool registry: one module per measurement tool, each declaring its ``ToolKind`` on its class.

Adding a tool = its module (a ``Tool`` subclass: how a repetition is timed, who holds the model, what
a job carries from its config section, samples per repetition), its entry in ``CLASSES``, its tests,
and its schema section (its name in ``study.tools``' enum, its own section if ``kind.section``).
The harness, the plan, the estimate, the CLI and the workflow ask the registry; none names a tool.
"""

from __future__ import annotations

from dlvirt.core.kinds import ToolKind, look_up, registry
from dlvirt.core.loadgen import split_tool
from dlvirt.run.tools.base import Tool
from dlvirt.run.tools.dlbs import Dlbs
from dlvirt.run.tools.mlperf import MLPerf

_IMPLEMENTED: list[type[Tool]] = [MLPerf, Dlbs]
CLASSES: dict[str, type[Tool]] = registry(_IMPLEMENTED)
KINDS: dict[str, ToolKind] = {name: cls.kind for name, cls in CLASSES.items()}


def tool_class(name: str) -> type[Tool]:
    """The tool of ``name``, a tool or a run tool (``mlperf-Server``: the tool in a LoadGen scenario)."""
    return look_up(CLASSES, split_tool(name)[0], "tool")


def primary(tools: list[str] | tuple[str, ...] | None = None) -> str:
    """The first tool in order (the paper's measurement, E2E) among ``tools`` (None: all registered)."""
    return next(name for name in CLASSES if tools is None or name in tools)
