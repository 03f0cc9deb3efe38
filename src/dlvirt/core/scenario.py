"""A scenario in the paper's vocabulary: platform / cores / pinning / processor (``VM/32/PIN/GPU``).

Which platforms exist, and what each can never do, their modules declare (``dlvirt.platforms``);
the planner checks a config's scenarios against them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, cast, get_args

Pinning = Literal["VNL", "PIN"]    # vanilla (any cores) or pinned to cores
Processor = Literal["CPU", "GPU"]
PINNINGS: tuple[Pinning, ...] = get_args(Pinning)
PROCESSORS: tuple[Processor, ...] = get_args(Processor)
# Where a job runs: the host Snakemake runs on (or its cluster), else an edge host named under hosts:.
LOCAL_SITE = "local"


@dataclass(frozen=True, order=True)
class Scenario:
    platform: str
    cores: int
    pinning: Pinning
    processor: Processor

    def __post_init__(self) -> None:
        pinning_of(self.pinning)
        processor_of(self.processor)
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
        return cls(parts[0], int(parts[1]), pinning_of(parts[2]), processor_of(parts[3]))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scenario:
        return cls(str(data["platform"]), int(data["cores"]), pinning_of(data["pinning"]),
                   processor_of(data["processor"]))


def pinning_of(value: Any) -> Pinning:
    """``value`` as a pinning, or the error naming it."""
    if value not in PINNINGS:
        raise ValueError(f"unknown pinning {value!r} (VNL or PIN)")
    return cast(Pinning, value)


def processor_of(value: Any) -> Processor:
    """``value`` as a processor, or the error naming it."""
    if value not in PROCESSORS:
        raise ValueError(f"unknown processor {value!r} (CPU or GPU)")
    return cast(Processor, value)
