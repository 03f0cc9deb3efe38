"""What a study measured and what it left out, in the words figures, claims and the report use.

A left-out entry (``Gap``) is structured where it arises: what it concerns (a scenario, a tool/app in a
scenario, or a whole tool, app, platform or processor), a reason code, and its message:
- ``host``: this host cannot run the scenario (no GPU, too few cores, no KVM, ...);
- ``edge``: the platform does not run on edge hosts yet;
- ``unsupported``: the app (or the tool) cannot run in that scenario;
- ``not_configured``: the config does not ask for it (``dlvirt.plan.planner.study_gaps`` adds these, so
  that a figure can say why its rows are missing).
``results/plan.json`` holds the entries as documents (``Gap.document``) and analysis reads them back
(``Gap.from_document``), never parsing prose. Free of the registries: analysis never imports a platform.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, get_args

from dlvirt.core.scenario import Scenario

EVERY_SCENARIO = "(every scenario)"
Reason = Literal["host", "edge", "unsupported", "not_configured"]
REASONS: tuple[str, ...] = get_args(Reason)
_WHOLE = ("tool", "app", "platform", "processor")  # what a whole-axis entry may name


@dataclass(frozen=True)
class Gap:
    """One left-out entry: which tool/app/scenario it concerns (None = all of them), why (a reason
    code and its message). Iterating it gives ``(what, why)``, the line the workflow prints."""

    reason: Reason
    why: str
    tool: str | None = None
    app: str | None = None
    platform: str | None = None
    processor: str | None = None
    scenario: Scenario | None = None

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"left-out reason {self.reason!r}: not one of {', '.join(REASONS)}")
        whole = [name for name in _WHOLE if getattr(self, name) is not None]
        if self.scenario is None and len(whole) != 1:
            raise ValueError(f"left-out entry without a scenario names {whole or 'nothing'}: it must name "
                             "one tool, app, platform or processor")
        if self.scenario is not None and (self.platform or self.processor or bool(self.tool) != bool(self.app)):
            raise ValueError("left-out entry for a scenario names a tool and an app together, or neither")

    @property
    def what(self) -> str:
        """What it concerns, in words: ``VM/2/VNL/CPU``, ``mlperf ic VM/2/VNL/CPU``, ``app nlp (every scenario)``."""
        if self.scenario is not None:
            return f"{self.tool} {self.app} {self.scenario.name}" if self.tool else self.scenario.name
        name = next(n for n in _WHOLE if getattr(self, n) is not None)
        return f"{name} {getattr(self, name)} {EVERY_SCENARIO}"

    def __iter__(self) -> Iterator[str]:
        return iter((self.what, self.why))

    def document(self) -> dict[str, Any]:
        """The entry as plan.json holds it."""
        return {"scenario": self.scenario.name if self.scenario else None, "tool": self.tool, "app": self.app,
                "platform": self.platform, "processor": self.processor, "reason": self.reason,
                "message": self.why}

    @classmethod
    def from_document(cls, document: Any, where: str = "left_out") -> Gap:
        """The entry ``document`` (``Gap.document``); a malformed one is an error naming ``where``."""
        keys = {"scenario", "tool", "app", "platform", "processor", "reason", "message"}
        if not isinstance(document, dict) or set(document) != keys:
            raise ValueError(f"{where}: a left-out entry has exactly {', '.join(sorted(keys))}; got {document!r}"[:300])
        try:
            scenario = Scenario.parse(document["scenario"]) if document["scenario"] is not None else None
            return cls(document["reason"], str(document["message"]), document["tool"], document["app"],
                       document["platform"], document["processor"], scenario)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None

    def concerns(self, *, tool: str | None = None, app: str | None = None, processor: str | None = None,
                 platforms: tuple[str, ...] | None = None, cores: int | None = None) -> bool:
        """Whether rows matching the filter (None = any) may be missing because of this entry."""
        if tool is not None and self.tool not in (None, tool):
            return False
        if app is not None and self.app not in (None, app):
            return False
        if self.platform is not None:
            return platforms is None or self.platform in platforms
        if self.processor is not None:
            return processor is None or self.processor == processor
        s = self.scenario
        if s is None:
            return True
        return ((processor is None or s.processor == processor)
                and (platforms is None or s.platform in platforms)
                and (cores is None or s.cores == cores))


def from_documents(documents: Iterable[Any], where: str = "left_out") -> list[Gap]:
    return [Gap.from_document(d, f"{where}[{i}]") for i, d in enumerate(documents)]


def reasons(gaps: Iterable[Gap], *, detail: bool = False, **where: Any) -> list[str]:
    """Distinct reasons (in plan order) why rows matching ``where`` (see ``Gap.concerns``) are
    missing, each naming what it concerns. A whole tool or app left out hides the scenario lines,
    unless ``detail`` asks for both (scenario lines first)."""
    found = [g for g in gaps if g.concerns(**where)]
    whole = [_named(g) for g in found if g.scenario is None and (g.tool or g.app)]
    if whole and not detail:
        return whole
    grouped: dict[str, list[str]] = {}
    for gap in found:
        if gap.scenario is not None:
            grouped.setdefault(gap.why, []).append(gap.what)
    matrix = [g for g in found if g.platform or g.processor]
    if where.get("platforms") is not None:  # asked about platforms: theirs first
        matrix.sort(key=lambda g: g.platform is None)
    return [f"{_examples(whats)}: {why}" for why, whats in grouped.items()] + [_named(g) for g in matrix] + whole


def _named(gap: Gap) -> str:
    return f"{gap.what.removesuffix(EVERY_SCENARIO).strip()}: {gap.why}"


def _examples(whats: list[str], shown: int = 2) -> str:
    head = ", ".join(whats[:shown])
    return head if len(whats) <= shown else f"{head} and {len(whats) - shown} more"
