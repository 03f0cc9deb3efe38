"""A scenario in the paper's vocabulary: platform / cores / pinning / processor (``VM/32/PIN/GPU``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

PLATFORMS = ("BM", "CN", "VM", "MVM", "VMCN")
PINNINGS = ("VNL", "PIN")
PROCESSORS = ("CPU", "GPU")

# What a platform can never do, whatever the host (paper §III: MVM is evaluated VNL/CPU only).
CANNOT_PIN = {"MVM": "Firecracker (and QEMU's microvm machine) offer no vCPU pinning"}
CANNOT_USE_GPU = {"MVM": "Firecracker (and QEMU's microvm machine) have no PCI passthrough"}


@dataclass(frozen=True, order=True)
class Scenario:
    platform: str
    cores: int
    pinning: str
    processor: str

    def __post_init__(self) -> None:
        if self.platform not in PLATFORMS:
            raise ValueError(f"unknown platform {self.platform!r} (one of {', '.join(PLATFORMS)})")
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
