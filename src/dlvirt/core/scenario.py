"""A scenario in the paper's vocabulary: platform / cores / pinning / processor (``VM/32/PIN/GPU``).

Which platforms exist, and what each can never do, their modules declare (``dlvirt.platforms``);
the planner checks a config's scenarios against them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

PINNINGS = ("VNL", "PIN")
PROCESSORS = ("CPU", "GPU")
# Where a job runs: the host Snakemake runs on (or its cluster), else an edge host named under hosts:.
LOCAL_SITE = "local"


@dataclass(frozen=True, order=True)
class Scenario:
    platform: str
    cores: int
    pinning: str
    processor: str

    def __post_init__(self) -> None:
        if self.pinning not in PINNINGS:
            raise ValueError(f"unknown pinning {self.pinning!r} (VNL or PIN)")
        if self.processor not in PROCESSORS:
            raise ValueError(f"unknown processor {self.processor!r} (CPU or GPU)")
        if self.cores < 1:
            raise ValueError(f"cores must be >= 1, got {self.cores}")

    @property
    def name(self) -> str:
        """The paper's name, e.g. ``BM/2/PIN/CPU``."""
        return f"{self.platform}/{self.cores}/{self.pinning}/{self.processor}"

    @property
    def pinned(self) -> bool:
        return self.pinning == "PIN"

    @classmethod
    def parse(cls, name: str) -> Scenario:
        parts = name.split("/")
        if len(parts) != 4:
            raise ValueError(f"scenario {name!r} is not PLATFORM/CORES/PINNING/PROCESSOR")
        return cls(parts[0], int(parts[1]), parts[2], parts[3])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scenario:
        return cls(str(data["platform"]), int(data["cores"]), str(data["pinning"]), str(data["processor"]))
