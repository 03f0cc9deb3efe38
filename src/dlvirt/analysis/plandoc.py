"""What analysis knows of the study plan: ``results/plan.json`` as the workflow wrote it from the
plan it runs (``dlvirt.plan.planner.plan_document``): the left-out reasons, and the platforms' and
apps' display facts (order, colour, titles). Analysis reads them here and never imports a platform
or app module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlvirt.core.formats import read_document
from dlvirt.core.kinds import Kinds
from dlvirt.plan.leftout import Gap, from_documents


@dataclass(frozen=True)
class PlanDocument:
    left_out: list[Gap]        # the left-out entries (dlvirt.plan.leftout)
    kinds: Kinds
    document: dict[str, Any]   # all of plan.json (study name, jobs, provenance)

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> PlanDocument:
        return cls(from_documents(document["left_out"]), Kinds.from_document(document["kinds"]), document)

    @classmethod
    def load(cls, path: str | Path) -> PlanDocument:
        return cls.from_document(read_document(path, "plan"))
