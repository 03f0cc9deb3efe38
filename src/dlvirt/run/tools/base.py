"""The tool interface: what a measurement tool (``mlperf``, ``dlbs``) declares for the rest of dlvirt.

A tool decides how one repetition is timed inside the platform (``timer``: a launch's ``Timer``, whose
default calls ``run_repetition``), who holds the
model while it is (``model_host``: the app in the harness's process, or the tool's own process), what
a job of it carries from the config (``job_settings``, its ``kind.section``), how many samples a
repetition processes (``samples_per_repetition``, for the estimate), which apps it times
(``unsupported_reason``) and what of its config section the check verifies (``check_config``).
The harness, the plan, the estimate, the CLI and the workflow ask the tool; none of them names one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Protocol

from dlvirt.apps.base import App
from dlvirt.core.kinds import ToolKind
from dlvirt.core.records import HarnessJob, Repetition


class ToolError(RuntimeError):
    """A tool could not time a job (each tool's own errors subclass it: the CLI's exit status knows them)."""


class ModelHost(Protocol):
    """Who holds the model during a launch: the app itself (in the harness's process, ``in_process``),
    or a stand-in for a tool that runs the model in a process of its own (nothing to load or ask)."""

    in_process: bool

    def import_framework(self) -> None: ...
    def load_model(self) -> None: ...
    def first_call(self) -> None: ...
    def gpu_state(self) -> dict[str, Any]: ...
    def framework_threads(self) -> dict[str, Any]: ...
    def model_provenance(self) -> dict[str, Any]: ...


class OutsideModel:
    """A ``ModelHost`` for a model that runs in a process of its own: nothing to import, load or ask in
    the harness's. A tool subclasses it for the provenance it can give."""

    in_process = False

    def import_framework(self) -> None:
        pass

    def load_model(self) -> None:
        pass

    def first_call(self) -> None:
        pass

    def gpu_state(self) -> dict[str, Any]:
        return {}

    def framework_threads(self) -> dict[str, Any]:
        return {}

    def model_provenance(self) -> dict[str, Any]:
        return {}


# check_config's helper: (path, the config key naming it, "file" or "dir") -> raises ConfigError
PathCheck = Callable[[Any, str, str], None]


class Timer:
    """Times the repetitions of one launch. A tool whose repetitions depend on the launch's earlier ones
    (LoadGen Server: its target rate from a calibrating Offline warm-up) keeps that state here."""

    def __init__(self, tool: type[Tool], app: App, job: HarnessJob) -> None:
        self.tool, self.app, self.job = tool, app, job

    def calibrating(self) -> bool:
        """Whether the next repetition is the tool's own warm-up (never counted)."""
        return False

    def time(self, rep: int, out_dir: Path, estimate_qps: float | None, warmups: list[Repetition],
             share: float = 1.0) -> Repetition:
        """Time repetition ``rep`` (``estimate_qps``: the previous one's rate; ``warmups``: so far;
        ``share``: of the workload, below 1 for a partial warm-up, ``run.repetitions.warmup_workload``)."""
        return self.tool.run_repetition(self.app, self.job, rep, out_dir, estimate_qps, share)


class Tool(ABC):
    """One measurement tool, declared by its module (``dlvirt.run.tools.<name>``)."""

    kind: ClassVar[ToolKind]

    # -- plan side: the config and the jobs ----------------------------------------------------
    @classmethod
    def unsupported_reason(cls, app: str) -> str | None:
        """Why this tool cannot time ``app`` (None: it can)."""
        return None

    @classmethod
    def job_settings(cls, config: dict[str, Any], app: str) -> dict[str, Any] | None:
        """What a job of ``app`` carries from the tool's config section (None: the tool has none)."""
        return None

    @classmethod
    def brings_own_model(cls, settings: dict[str, Any] | None, app: str) -> bool:
        """Whether the tool builds the model itself for these job settings, so the job loads none."""
        return False

    @classmethod
    @abstractmethod
    def samples_per_repetition(cls, config: dict[str, Any], app: str) -> int:
        """Samples one repetition of ``app`` processes."""

    @classmethod
    def check_config(cls, config: dict[str, Any], check_path: PathCheck) -> None:
        """Check what the tool's config section names on this host (paths), used by the study or not."""
        return None

    # -- harness side: inside the platform -------------------------------------------------------
    @classmethod
    def model_host(cls, app: App, job: HarnessJob) -> ModelHost:
        """Who holds the model in this job (the app itself, unless the tool runs a model of its own)."""
        return app

    @classmethod
    def timer(cls, app: App, job: HarnessJob) -> Timer:
        """What times this launch's repetitions."""
        return Timer(cls, app, job)

    @classmethod
    @abstractmethod
    def run_repetition(cls, app: App, job: HarnessJob, rep: int, out_dir: Path,
                       estimate_qps: float | None, share: float = 1.0) -> Repetition:
        """Time one repetition (``estimate_qps``: the previous repetition's rate, None for the first;
        ``share``: the part of the workload it processes, ``run.repetitions.warmup_workload``)."""
