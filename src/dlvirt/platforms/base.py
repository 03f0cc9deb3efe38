"""The platform interface: provision → run the harness inside → verify what it saw → teardown.

A platform is a context manager, so teardown runs on success, on failure and on Ctrl-C (SIGINT);
``runner`` turns SIGTERM into the same path.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar

from dlvirt.hostinfo import Capabilities
from dlvirt.scenario import Scenario


class PlatformError(RuntimeError):
    pass


class VerificationError(PlatformError):
    """What the harness observed inside the platform is not what the scenario asked for."""


@dataclass(frozen=True)
class Expected:
    """What the harness must observe inside the platform. ``None`` fields are not checked."""

    affinity: tuple[int, ...] | None = None
    nproc: int | None = None
    cpu_count: int | None = None
    quota_cores: float | None = None
    check_quota: bool = True
    container: str | None = None
    vm: str | None = None


def verify(expected: Expected, observed: dict[str, Any]) -> list[str]:
    """Mismatches between ``expected`` and one run's ``observed`` record (empty when all agree)."""
    problems = []
    if expected.affinity is not None and tuple(observed["affinity"]) != tuple(expected.affinity):
        problems.append(f"affinity {observed['affinity']} != requested {list(expected.affinity)}")
    if expected.nproc is not None and observed["nproc"] != expected.nproc:
        problems.append(f"nproc {observed['nproc']} != requested {expected.nproc}")
    if expected.cpu_count is not None and observed["cpu_count"] != expected.cpu_count:
        problems.append(f"cpu_count {observed['cpu_count']} != requested {expected.cpu_count}")
    if expected.check_quota:
        got = observed["quota_cores"]
        want = expected.quota_cores
        if (got is None) != (want is None) or (got is not None and want is not None
                                                and not math.isclose(got, want, rel_tol=1e-3)):
            problems.append(f"CFS quota {got} cores != requested {want}")
    virt = observed["virtualization"]
    if expected.container is not None and virt["container"] != expected.container:
        problems.append(f"container type {virt['container']!r} != expected {expected.container!r}")
    if expected.vm is not None and virt["vm"] != expected.vm:
        problems.append(f"virtualization {virt['vm']!r} != expected {expected.vm!r}")
    return problems


class Platform(ABC):
    name: ClassVar[str]

    def __init__(self, scenario: Scenario, config: dict[str, Any], workdir: Path, run_id: str) -> None:
        self.scenario = scenario
        self.config = config
        self.workdir = Path(workdir)
        self.run_id = run_id

    @classmethod
    def unavailable_reason(cls, scenario: Scenario, caps: Capabilities, config: dict[str, Any]) -> str | None:
        """Why this host cannot run ``scenario`` (None when it can). Subclasses add engine checks."""
        if scenario.cores > caps.cores:
            return f"{scenario.cores} cores requested, host has {caps.cores}"
        if scenario.processor == "GPU" and not caps.gpus:
            return "no GPU on this host (nvidia-smi lists none)"
        return None

    @staticmethod
    def pinned_cpus(caps_cpus: tuple[int, ...], cores: int) -> tuple[int, ...]:
        """The host CPUs a pinned scenario gets: the first ``cores`` the runner may use, so that
        small instances stay on one socket/NUMA node as on the paper's server."""
        if cores > len(caps_cpus):
            raise PlatformError(f"{cores} pinned cores requested, only {len(caps_cpus)} available")
        return tuple(caps_cpus[:cores])

    @abstractmethod
    def provision(self) -> None:
        """Create the platform (cgroup, container engine state, VM) before any run."""

    @abstractmethod
    def run(self, job: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Run the harness with ``job`` inside the platform; return the harness's output document."""

    @abstractmethod
    def expected(self) -> Expected:
        """What the harness must observe inside for this scenario."""

    @abstractmethod
    def teardown(self) -> None:
        """Remove everything provision/run created. Must be safe to call twice and after a failure."""

    def describe(self) -> dict[str, Any]:
        """Facts about the platform as measured (engine, versions, accelerator) for result files."""
        return {"platform": self.name}

    def __enter__(self) -> Platform:
        try:
            self.provision()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.teardown()
