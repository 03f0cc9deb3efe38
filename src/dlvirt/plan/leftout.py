"""What a study measured and what it left out, in the words figures, claims and the report use.

The plan's left-out entries are ``(what, why)`` pairs as ``dlvirt.plan.planner`` writes them; ``what`` is
one of
- a scenario name, ``VM/2/VNL/CPU``: the host cannot run that scenario;
- ``<tool> <app> <scenario>``: the app cannot run in that scenario;
Apps, tools and platforms the config does not ask for are not in the plan at all;
``dlvirt.plan.planner.study_gaps`` adds them (``platform X (every scenario)``, ``processor X (every
scenario)`` too) so that a figure can say why its rows are missing. Free of the registries: analysis
reads the entries from plan.json and never imports a platform.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlvirt.core.scenario import Scenario

EVERY_SCENARIO = "(every scenario)"


@dataclass(frozen=True)
class Gap:
    """One left-out entry, parsed: which tool/app/scenario it concerns (None = all of them)."""

    what: str
    why: str
    tool: str | None = None
    app: str | None = None
    platform: str | None = None
    processor: str | None = None
    scenario: Scenario | None = None

    @classmethod
    def parse(cls, what: str, why: str) -> Gap:
        parts = what.split()
        if what.endswith(EVERY_SCENARIO) and parts[0] in ("app", "tool", "platform", "processor"):
            field: dict[str, Any] = {parts[0]: parts[1]}  # one of the str fields just named
            return cls(what, why, **field)
        if len(parts) == 3:
            return cls(what, why, tool=parts[0], app=parts[1], scenario=Scenario.parse(parts[2]))
        if len(parts) == 1:
            return cls(what, why, scenario=Scenario.parse(parts[0]))
        raise ValueError(f"left-out entry {what!r} is in no known form")

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


def reasons(gaps: list[tuple[str, str]] | list[list[str]], *, detail: bool = False, **where: Any) -> list[str]:
    """Distinct reasons (in plan order) why rows matching ``where`` (see ``Gap.concerns``) are
    missing, each naming what it concerns. A whole tool or app left out hides the scenario lines,
    unless ``detail`` asks for both (scenario lines first)."""
    found = [g for g in (Gap.parse(what, why) for what, why in gaps) if g.concerns(**where)]
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
