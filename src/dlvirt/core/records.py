"""The documents a benchmark job passes along, as typed records.

spec (``dlvirt.plan.jobspec.job_spec``) → ``JobSpec`` → the runner makes the ``HarnessJob``
(``job.json``, read inside the platform) → the harness writes a ``HarnessOutput`` (``harness.json``)
of ``Repetition`` records → the runner, after verifying, publishes the ``JobResult``
(``results/runs/...json``) that the summary reads.

Each record converts to and from the JSON document it is on disk (``to_dict`` / ``from_dict``);
``from_dict`` checks every field's presence and type and names the field of a malformed document.
A field is added with one line: ``name: type = default`` (give it a default, so that documents
written before it existed still read). A field whose default is None is left out of the document
while it is None (the documents written before these records did the same).
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Self

from dlvirt.core import formats
from dlvirt.core.atomic import read_json, write_json_atomic
from dlvirt.core.credentials import redacted
from dlvirt.core.scenario import Scenario
from dlvirt.core.vocabulary import Pipeline, ThreadSetting


class RecordError(ValueError):
    """A document does not have the shape of its record; the message names the document and field."""


def _kind(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp)


def _load(tp: Any, value: Any, where: str) -> Any:
    """``value`` read as type ``tp``; RecordError naming ``where`` when it is not one."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in (o for o in options if o is not type(None)):
            try:
                return _load(option, value, where)
            except RecordError as err:
                errors.append(err)
        raise errors[0]
    if origin is typing.Literal:  # a closed vocabulary (dlvirt.core.vocabulary)
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise RecordError(f"{where}: expected one of {', '.join(map(repr, allowed))}, got {value!r}"[:300])
        return value
    if isinstance(tp, type) and issubclass(tp, Record):
        return tp.from_dict(value, where)
    if tp is Scenario:
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected a scenario object, got {value!r}")
        try:
            return Scenario.from_dict(value)
        except KeyError as err:
            raise RecordError(f"{where}: lacks {err.args[0]}") from None
        except (TypeError, ValueError) as err:
            raise RecordError(f"{where}: not a scenario ({err})") from None
    if origin is list:
        if not isinstance(value, list):
            raise RecordError(f"{where}: expected a list, got {value!r}"[:300])
        (item,) = typing.get_args(tp)
        return [_load(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected an object, got {value!r}"[:300])
        _, item = typing.get_args(tp)
        return value if item is Any else {k: _load(item, v, f"{where}.{k}") for k, v in value.items()}
    # JSON has one kind of number: an integral float field may hold an int (kept as written)
    wanted: tuple[type, ...] = (int, float) if tp is float else (tp,)
    if not isinstance(value, wanted) or (isinstance(value, bool) and tp is not bool):
        raise RecordError(f"{where}: expected {_kind(tp)}, got {value!r}"[:300])
    return value


def _dump(value: Any) -> Any:
    if isinstance(value, Record | Scenario):
        return value.to_dict()
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Record:
    """Base of the records: conversion to and from their JSON documents."""

    _hints: ClassVar[dict[type, dict[str, Any]]] = {}
    # a record written as a file of its own names its document (dlvirt.core.formats): the file then
    # carries format_version, and reading one of another version is refused
    document: ClassVar[formats.Document | None] = None
    # fields renamed since: their old name -> the new one, read from documents written before
    renamed: ClassVar[dict[str, str]] = {}

    @classmethod
    def _types(cls) -> dict[str, Any]:
        if cls not in Record._hints:
            Record._hints[cls] = typing.get_type_hints(cls)
        return Record._hints[cls]

    def to_dict(self) -> dict[str, Any]:
        content = {f.name: _dump(getattr(self, f.name)) for f in fields(self)
                   if not (f.default is None and getattr(self, f.name) is None)}
        return formats.stamped(self.document, content) if self.document else content

    @classmethod
    def from_dict(cls, data: Any, where: str | None = None) -> Self:
        """The record of document ``data``; ``where`` names it in errors (a file, a field path)."""
        where = where or cls.__name__
        if not isinstance(data, dict):
            raise RecordError(f"{where}: expected a {cls.__name__} object, got {data!r}"[:300])
        if cls.document:
            try:
                data = formats.checked(cls.document, data, where)
            except formats.FormatError as err:
                raise RecordError(str(err)) from None
        data = {cls.renamed.get(key, key): value for key, value in data.items()}
        hints = cls._types()
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise RecordError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))} "
                              f"(a {cls.__name__} has {', '.join(known)})")
        missing = [name for name, spec in known.items() if name not in data
                   and spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING]
        if missing:
            raise RecordError(f"{where}: lacks {', '.join(missing)}")
        return cls(**{name: _load(hints[name], data[name], f"{where}.{name}") for name in known if name in data})

    @classmethod
    def read(cls, path: Path) -> Self:
        try:
            data = read_json(path)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise RecordError(f"{path}: not a JSON document ({err})") from None
        return cls.from_dict(data, str(path))

    def write(self, path: Path) -> None:
        """Write the document atomically (a reader never sees half of it), the userinfo of every URL
        in it as ``***`` (a mirror's or engine's credentials are not the record's)."""
        write_json_atomic(path, redacted(self.to_dict()))


@dataclass(frozen=True)
class JobSpec(Record):
    """What the workflow asks of one job (``dlvirt.plan.jobspec.job_spec``)."""

    renamed: ClassVar[dict[str, str]] = {"dlbs": "tool_settings"}  # run record format 1

    tool: str
    app: str
    scenario: Scenario
    repetitions: int | dict[str, Any]  # a fixed count, or adaptive {min, max, rel_ci95} (run.repetitions)
    warmup_repetitions: int
    threads: ThreadSetting          # thread plan: granted | framework-default (naive: its older name)
    timeout_s: float
    batch_size: int
    loadgen: dict[str, Any]
    app_settings: dict[str, Any]    # the app's config section
    dataset_dir: str
    platform_settings: dict[str, Any]
    allow_emulation: bool
    # its tool's own config section, merged for its app (Tool.job_settings); None: the tool has none
    tool_settings: dict[str, Any] | None = None
    replicate: int = 1                  # the launch's round in the study's interleaved order
    pipeline: Pipeline | None = None  # harness.pipeline: overlapped | sequential (None: the plan's choice)
    # steadiness (run.repetitions.steady), reported only: do the first two counted repetitions agree
    # within this share? (None: not judged). Records of older specs may carry warmup_max, the
    # steady-state warm-up that is gone (a repetition is never set aside for what it measured).
    warmup_tolerance: float | None = None
    # the share of a counted repetition's workload the first warm-up runs
    # (run.repetitions.warmup_workload); the later warm-ups are whole repetitions
    warmup_share: float = 1.0
    # the weights resource (the weights rule): the seeded random initialisation the launch loads;
    # None where weights are configured (apps.<app>.weights.path) or a DLBS experimenter brings its model
    weights_file: str | None = None
    # a Unix socket where the launch takes turns with another process on its CPUs before each
    # repetition (dlvirt.run.turns; benchmarks/scaling.py); bare metal only. None: it does not
    turns: str | None = None
    # the rerun rule (run.interference, study.interference): {disturbed_above, reruns}; None: older specs,
    # neither marked nor run again
    interference: dict[str, Any] | None = None
    # keep_others_away (dlvirt.system.keepaway): enabled, min_cpus_left, scope; None: others stay
    keep_others_away: dict[str, Any] | None = None


@dataclass(frozen=True)
class HarnessJob(Record):
    """What the harness inside the platform is told (``job.json``): the spec's app side, paths as
    the platform sees them."""

    document: ClassVar[formats.Document | None] = "harness job"
    renamed: ClassVar[dict[str, str]] = {"dlbs": "tool_settings"}  # harness job format 1

    tool: str
    app: str
    scenario: Scenario
    scenario_name: str
    repetitions: int | dict[str, Any]
    warmup_repetitions: int
    threads: ThreadSetting
    batch_size: int
    loadgen: dict[str, Any]
    app_settings: dict[str, Any]
    dataset_dir: str
    run_id: str
    tool_settings: dict[str, Any] | None = None  # JobSpec.tool_settings
    pipeline: Pipeline | None = None
    warmup_tolerance: float | None = None
    warmup_share: float = 1.0
    weights: dict[str, Any] | None = None  # the weights resource as the runner verified it: path, sha256
    turns: str | None = None  # JobSpec.turns

    @classmethod
    def of(cls, spec: JobSpec, dataset_dir: str, run_id: str, weights: dict[str, Any] | None = None) -> HarnessJob:
        return cls(tool=spec.tool, app=spec.app, scenario=spec.scenario, scenario_name=spec.scenario.name,
                   repetitions=spec.repetitions, warmup_repetitions=spec.warmup_repetitions,
                   threads=spec.threads, batch_size=spec.batch_size, loadgen=spec.loadgen,
                   app_settings=spec.app_settings, dataset_dir=dataset_dir, run_id=run_id,
                   tool_settings=spec.tool_settings,
                   pipeline=spec.pipeline, warmup_tolerance=spec.warmup_tolerance,
                   warmup_share=spec.warmup_share, weights=weights, turns=spec.turns)


@dataclass(frozen=True)
class Repetition(Record):
    """One measured (or warm-up) repetition, as the harness recorded it inside the platform."""

    renamed: ClassVar[dict[str, str]] = {"dlbs": "tool_output"}  # run record, harness output format 1

    repetition: int
    e2e_s: float                    # E2E wall time (tool dlbs: the timed batches only)
    # busy wall time pre_s, infer_s, post_s (tool dlbs: infer_s only), CPU time pre_cpu_s,
    # infer_cpu_s (None: not ours to read), post_cpu_s, and stall_s (harness.OfflinePipeline)
    phases: dict[str, float | None]
    samples: int
    batches: int
    samples_per_s: float | None
    observed: dict[str, Any]        # what the harness saw of its platform (dlvirt.system.observe)
    threads: dict[str, Any]
    quality: dict[str, Any]
    started_utc: str
    finished_utc: str
    warmup: bool = False
    loadgen: dict[str, Any] | None = None  # tool mlperf: LoadGen's verdict and settings
    tool_output: dict[str, Any] | None = None  # a tool's own parameters and results (dlbs: DLBS's, its log)
    gpu: dict[str, Any] | None = None      # GPU scenarios: devices, framework state, sampled use (system.gpu)
    telemetry: dict[str, Any] | None = None  # CFS throttling, steal, context switches (system.observe)

    @classmethod
    def measured(cls, repetition: int, e2e_s: float, phases: dict[str, float | None], samples: int, batches: int,
                 observed: dict[str, Any], threads: dict[str, Any], quality: dict[str, Any],
                 started: datetime, finished: datetime, *, loadgen: dict[str, Any] | None = None,
                 tool_output: dict[str, Any] | None = None) -> Repetition:
        """The record of one repetition of either tool (its rate derived from ``samples`` and ``e2e_s``)."""
        return cls(repetition=repetition, e2e_s=e2e_s, phases=phases, samples=samples, batches=batches,
                   samples_per_s=samples / e2e_s if e2e_s > 0 else None, observed=observed, threads=threads,
                   quality=quality, started_utc=started.isoformat(), finished_utc=finished.isoformat(),
                   loadgen=loadgen, tool_output=tool_output)


@dataclass(frozen=True)
class HarnessOutput(Record):
    """What the harness hands back out of the platform (``harness.json``)."""

    document: ClassVar[formats.Document | None] = "harness output"

    app: str
    entered_unix: float             # wall clock when the harness was up (start-up overhead)
    runs: list[Repetition]
    warmups: list[Repetition]
    model_load_s: float
    dataset: dict[str, Any]         # the dataset's provenance (DATASET_INFO)
    # the model's provenance; "load": how its load went in this process (CPU time, page faults, the
    # weights asked into the page cache: dlvirt.run.launch)
    model: dict[str, Any]
    versions: dict[str, Any]
    # asked, ran, why it stopped, rel_ci95; warm-ups run and whether steady (run.repetitions)
    repetitions: dict[str, Any] | None = None
    stack: dict[str, Any] | None = None  # the Python stack the harness ran on (hostinfo.python_stack)
    code: dict[str, Any] | None = None   # the code that measured (core.codeversion)
    # framework_import_s; ready_unix and ready_uptime_s (wall clock, kernel uptime) when the framework
    # was imported and the model load began; first_call_s (App.first_call); warmup_s (first_call_s
    # and the warm-up repetitions), counted_s: wall time
    timeline: dict[str, float] | None = None


@dataclass(frozen=True)
class JobResult(Record):
    """One job's verified result (``results/runs/<tool>/<app>/<scenario>.json``)."""

    document: ClassVar[formats.Document | None] = "run record"

    tool: str
    app: str
    scenario: Scenario
    scenario_name: str
    platform: dict[str, Any]        # the platform's own description (Platform.describe)
    expected: dict[str, Any]        # what every repetition was verified against
    verified: bool
    host: str
    run_id: str
    spec: JobSpec
    runs: list[Repetition]
    warmups: list[Repetition]
    dataset: dict[str, Any]
    model: dict[str, Any]
    versions: dict[str, Any]
    model_load_s: float
    repetitions: dict[str, Any] | None = None  # as the harness reported them; absent in older results
    stack: dict[str, Any] | None = None
    node: dict[str, Any] | None = None   # absent in results written before nodes were recorded
    slurm: dict[str, Any] | None = None  # the SLURM allocation the job ran in, if any
    site: str | None = None              # an edge host's site; absent for this host
    transport: dict[str, Any] | None = None  # how an edge job reached its host
    replicate: int = 1                   # the launch's round (study.replicates); 1 in older results
    # where the job ran: PIN its placement (cpus, mems, sockets, nodes, policy); VNL the NUMA nodes
    # its threads were seen on (ran_on_nodes); absent in results written before placement existed
    placement: dict[str, Any] | None = None
    code: dict[str, Any] | None = None   # the harness's code version (core.codeversion); absent in older results
    runner_code: dict[str, Any] | None = None  # the runner's: the two must agree to be summarised
    # What the launch cost, split (run.runner.launch_split): startup_s (weights check, provisioning,
    # process, container or boot, imports, up to the model load), model_load_s, warmup_s, counted_s
    # (the counted repetitions) and other_s (writing results, teardown), which add up to total_s;
    # of the start-up: framework_import_s, weights_check_s; of the warm-up: first_call_s (the
    # framework's one-time set-up, App.first_call); startup_overlap_s: what the start-up, timed across
    # clocks, overlapped the harness's parts and was taken off it. Absent in older results.
    launch_s: dict[str, float] | None = None
    # The rerun rule's account (run.interference.account): the threshold and reruns allowed, each
    # attempt's disturbed repetitions and others' CPU, which attempt is this record's and why the
    # others were run again; absent in older results and where the spec had no rule
    interference: dict[str, Any] | None = None
    # The host's benchmark lock (dlvirt.system.benchlock) the launch held: lock, waited_s (from asking
    # to holding it), waited_for (the launches of any study it waited for). Absent in older results.
    bench_lock: dict[str, Any] | None = None
    # What keep_others_away did for the launch (dlvirt.system.keepaway): done, and why not; or the
    # processes moved per cgroup, those left and why, and how they were put back (restored).
    others_kept_away: dict[str, Any] | None = None


# A run record's place: <runs>/<tool>/<app>/<platform>/<cores>/<pinning>/<processor>/<replicate>.json
# (an edge host's under results/sites/<site>/runs/), as workflow/rules/common.smk names it.
RUN_LAYOUT = ("tool", "app", "platform", "cores", "pinning", "processor", "replicate")
# The nested fields the readers of run records (summary, estimate, report) rely on.
NESTED_FIELDS = {"dataset": ("source",), "model": ("weights",)}
REPETITION_FIELDS = {"threads": ("policy",)}


def _time_problem(where: str, value: Any, positive: bool = True) -> str | None:
    if value is None:
        return None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        return f"{where} is {value!r}, not a {'positive' if positive else 'non-negative'} finite time"
    return None


def _repetition_problems(rep: Repetition, where: str) -> list[str]:
    problems = [_time_problem(f"{where}.e2e_s", rep.e2e_s)]
    problems += [_time_problem(f"{where}.phases.{name}", value, positive=False) for name, value in rep.phases.items()]
    for name, keys in REPETITION_FIELDS.items():
        problems += [f"{where}.{name} lacks {key!r}" for key in keys if key not in getattr(rep, name)]
    if "intra_op" not in (rep.threads.get("framework") or rep.threads):
        problems.append(f"{where}.threads lacks 'intra_op'")
    if rep.telemetry:
        problems += [f"{where}.telemetry lacks {key!r}" for key in ("voluntary_ctx", "involuntary_ctx")
                     if key not in rep.telemetry]
    for stamp in ("started_utc", "finished_utc"):
        try:
            datetime.fromisoformat(getattr(rep, stamp))
        except ValueError:
            problems.append(f"{where}.{stamp} {getattr(rep, stamp)!r} is not an ISO time")
    return [p for p in problems if p]


def _path_problems(result: JobResult, path: Path) -> list[str]:
    """How ``result`` differs from what its place in the run layout says it is (nothing for a
    file outside the layout, e.g. one given by hand)."""
    parts = path.with_suffix("").parts
    if len(parts) < len(RUN_LAYOUT) + 1 or parts[-len(RUN_LAYOUT) - 1] != "runs" or path.suffix != ".json":
        return []
    named = dict(zip(RUN_LAYOUT, parts[-len(RUN_LAYOUT):], strict=True))
    s = result.scenario
    found = {"tool": result.tool, "app": result.app, "platform": s.platform, "cores": str(s.cores),
             "pinning": s.pinning, "processor": s.processor, "replicate": str(result.replicate)}
    problems = [f"{key} is {found[key]!r} but its path says {named[key]!r}" for key in RUN_LAYOUT
                if found[key] != named[key]]
    above = parts[:-len(RUN_LAYOUT) - 1]
    site = above[-1] if len(above) >= 2 and above[-2] == "sites" else None
    if (result.site or None) != site:
        problems.append(f"site is {result.site!r} but its path says {site!r}")
    return problems


def run_record_problems(result: JobResult, path: Path | None = None) -> list[str]:
    """Why run record ``result`` (read from ``path``) must not count: not verified, a time that is
    not a positive finite number, a missing nested field, a path that says it is another job."""
    problems = [] if result.verified is True else ["it is not verified"]
    problems += [p for p in [_time_problem("model_load_s", result.model_load_s, positive=False),
                             _time_problem("platform.boot_s", result.platform.get("boot_s"))] if p]
    for name, keys in NESTED_FIELDS.items():
        problems += [f"{name} lacks {key!r}" for key in keys if key not in getattr(result, name)]
    for kind in ("runs", "warmups"):
        for i, rep in enumerate(getattr(result, kind)):
            problems += _repetition_problems(rep, f"{kind}[{i}]")
    if not result.runs:
        problems.append("it has no repetitions")
    if result.scenario_name != result.scenario.name:
        problems.append(f"scenario_name {result.scenario_name!r} is not its scenario {result.scenario.name!r}")
    if path is not None:
        problems += _path_problems(result, Path(path))
    return problems


def read_run_records(paths: list[Path]) -> list[JobResult]:
    """The run records at ``paths``, each checked before it counts (``run_record_problems``) and no
    two with one ``run_id``; RecordError naming the file otherwise."""
    records: list[JobResult] = []
    seen: dict[str, Path] = {}
    for path in map(Path, paths):
        result = JobResult.read(path)
        problems = run_record_problems(result, path)
        if problems:
            raise RecordError(f"{path}: refused as a run record: {'; '.join(problems)}")
        if result.run_id in seen:
            raise RecordError(f"{path}: refused as a run record: its run_id {result.run_id!r} is also "
                              f"{seen[result.run_id]}'s (one launch counted twice)")
        seen[result.run_id] = path
        records.append(result)
    return records
