"""What a study will cost in machine time, projected from the run records this host has written.

Per planned job: seconds per sample measured for the same tool × app × scenario (else the same tool ×
app × platform × processor at the nearest core count, scaled by the core ratio: ideal scale-up, so
optimistic; else bare metal's likewise, without the platform's overhead: more optimistic), times
the config's samples per repetition, times the repetitions of one launch (+ its warm-ups: as many
as the records' launches ran, within the config's warm-up bounds), plus the launch's measured
start-up, model load and boot; times the replicates. Fixed repetitions count as asked; adaptive
ones as the fewest n in [min, max] whose 95 % CI half-width, at the within-launch coefficient of
variation the records show (the variance component the stopping rule sees: ``core.variance``, not
the spread between launches), is within ``rel_ci95`` (their min and max bound it). A job with
nothing comparable measured (a GPU on a host without one) is counted as unknown.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlvirt.core import variance
from dlvirt.core.interval import t_half_width
from dlvirt.core.machinetime import hours, launch_overhead_s
from dlvirt.core.records import JobResult, read_run_records
from dlvirt.plan.planner import Job, Plan, kinds, warmups_for
from dlvirt.run.tools import tool_class

# a fixed count's adaptive alternative: stop a launch early once ±5 % is reached, at most the count
FIXED_ALTERNATIVE = {"min": 2, "rel_ci95": 0.05}


@dataclass(frozen=True)
class Measured:
    """What one scenario's run records show."""

    per_sample_s: float
    cv: float          # within-launch coefficient of variation of E2E (σ_w, log scale; NaN: unknown)
    overhead_s: float  # per launch: start-up, model load and boot
    components: variance.Components | None = None


def read_records(runs_dir: Path) -> list[JobResult]:
    """The run records under ``runs_dir``, not the work directories (``.work-*``) of jobs still running."""
    root = Path(runs_dir)
    return read_run_records(sorted(p for p in root.rglob("*.json")
                                   if not any(part.startswith(".") for part in p.relative_to(root).parts)))


def measured(records: list[JobResult]) -> dict[tuple[str, str, str, int, str, str], Measured]:
    """(tool, app, platform, cores, pinning, processor) → what these run records show."""
    found: dict[tuple[str, str, str, int, str, str], list[JobResult]] = {}
    for record in records:
        s = record.scenario
        found.setdefault((record.tool, record.app, s.platform, s.cores, s.pinning, s.processor), []).append(record)
    out = {}
    for key, records in found.items():
        reps = [r for record in records for r in record.runs]
        # machine time per sample over every repetition: an outlier costs time as much as any other
        per_sample = sum(r.e2e_s for r in reps) / max(1, sum(r.samples for r in reps))
        # the spread the stopping rule sees: the repetitions about their own launch's mean
        components = variance.of_launches([[r.e2e_s for r in record.runs] for record in records])
        overhead = sum(launch_overhead_s(r) for r in records) / len(records)
        out[key] = Measured(per_sample, components.within_sd, overhead, components)
    return out


def samples_per_repetition(config: dict[str, Any], job: Job) -> int:
    return tool_class(job.tool).samples_per_repetition(config, job.app)


def adaptive_setting(setting: int | dict[str, Any]) -> dict[str, Any]:
    """The config's adaptive repetitions, or a fixed count's adaptive alternative."""
    return setting if isinstance(setting, dict) else {**FIXED_ALTERNATIVE, "max": max(2, setting)}


def adaptive_count(setting: dict[str, Any], cv: float) -> int:
    """Fewest repetitions in [min, max] whose 95 % CI half-width is within rel_ci95 at this CV."""
    low, high = int(setting["min"]), int(setting["max"])
    if math.isnan(cv):
        return high
    for n in range(max(low, 2), high + 1):
        if t_half_width(cv, n) <= float(setting["rel_ci95"]):
            return n
    return high


def expected_warmups(study: dict[str, Any], job: Job) -> float:
    """The warm-ups a launch of ``job`` runs, in repetitions' worth: its fixed count
    (``warmups_for``), the first of them ``warmup_share`` of a repetition, the rest whole ones."""
    count = warmups_for(study, job.app, job.tool)
    return 0.0 if count == 0 else float(study.get("warmup_share", 1.0)) + count - 1


@dataclass(frozen=True)
class JobEstimate:
    job: Job
    basis: str
    fixed_s: float | None
    adaptive_s: float | None
    adaptive_n: int | None


def basis_for(job: Job, found: dict[tuple[str, str, str, int, str, str], Measured],
              baseline: str) -> tuple[Measured, str] | None:
    """The measurement a job is projected from: its own scenario's; else the same platform's at the
    nearest core count, scaled by the core ratio; else the baseline platform's (bare metal) likewise,
    without the platform's overhead. Never another processor's."""
    s = job.scenario
    exact = found.get((job.tool, job.app, s.platform, s.cores, s.pinning, s.processor))
    if exact:
        return exact, "measured"
    for platform, caveat in ((s.platform, ""), (baseline, f"; {s.platform}'s own overhead not counted")):
        near = [(abs(math.log(k[3] / s.cores)), k, m) for k, m in found.items()
                if k[:3] == (job.tool, job.app, platform) and k[5] == s.processor]
        if near:
            _, key, m = min(near)
            scaled = dataclasses.replace(m, per_sample_s=m.per_sample_s * key[3] / s.cores)
            return scaled, f"from {key[2]}/{key[3]}/{key[4]}/{key[5]}, scaled by cores{caveat}"
    return None


def estimate(config: dict[str, Any], plan: Plan, records: list[JobResult]) -> list[JobEstimate]:
    study = config["study"]
    setting = study["repetitions"]
    fixed = setting if isinstance(setting, int) else None
    adaptive = adaptive_setting(setting)
    found = measured(records)
    baseline = kinds().baseline
    out = []
    for job in plan.jobs:
        basis = basis_for(job, found, baseline)
        if basis is None:
            out.append(JobEstimate(job, "nothing comparable measured", None, None, None))
            continue
        m, how = basis
        per_rep = m.per_sample_s * samples_per_repetition(config, job)
        warmups = expected_warmups(study, job)
        n = adaptive_count(adaptive, m.cv)
        out.append(JobEstimate(job, how, None if fixed is None else m.overhead_s + per_rep * (warmups + fixed),
                               m.overhead_s + per_rep * (warmups + n), n))
    return out


def totals(config: dict[str, Any], estimates: list[JobEstimate], records: int) -> dict[str, Any]:
    """The study's projected machine time, as plan.json keeps it: total seconds for fixed repetitions
    (None where the config's are adaptive) and for adaptive ones, over the jobs with a basis."""
    known = [e for e in estimates if e.adaptive_s is not None]
    return {"records": records, "jobs": len(estimates), "unknown_jobs": len(estimates) - len(known),
            "fixed_s": (sum(e.fixed_s or 0.0 for e in known)
                        if known and isinstance(config["study"]["repetitions"], int) else None),
            "adaptive_s": sum(e.adaptive_s or 0.0 for e in known) if known else None}


def report(config: dict[str, Any], estimates: list[JobEstimate], records: int) -> str:
    """Per scenario (tool × app × scenario, all its replicates) and the total."""
    setting = config["study"]["repetitions"]
    adaptive = adaptive_setting(setting)
    lines = [(f"repetitions: fixed = {setting if isinstance(setting, int) else '-'}, adaptive = {adaptive} "
              f"(n: its expected count); {config['study'].get('replicates', 1)} replicate(s) per scenario"),
             f"{'tool':6} {'app':4} {'scenario':16} {'fixed':>10} {'adaptive':>10} {'n':>5}  basis"]
    rows: dict[tuple[str, str, str], list[JobEstimate]] = {}
    for e in estimates:
        rows.setdefault((e.job.tool, e.job.app, e.job.scenario.name), []).append(e)
    for (tool, app, scenario), group in sorted(rows.items()):
        if group[0].adaptive_s is None:
            lines.append(f"{tool:6} {app:4} {scenario:16} {'?':>10} {'?':>10} {'?':>5}  {group[0].basis}")
            continue
        fixed = sum(e.fixed_s or 0.0 for e in group) if group[0].fixed_s is not None else None
        adapt = sum(e.adaptive_s or 0.0 for e in group)
        lines.append(f"{tool:6} {app:4} {scenario:16} {hours(fixed) if fixed is not None else '-':>10} "
                     f"{hours(adapt):>10} {group[0].adaptive_n:>5}  {group[0].basis}")
    total = totals(config, estimates, records)
    unknown = len({(e.job.tool, e.job.app, e.job.scenario.name) for e in estimates if e.adaptive_s is None})
    lines.append(f"total: fixed {hours(total['fixed_s']) if total['fixed_s'] is not None else '-'}, "
                 f"adaptive {hours(total['adaptive_s'] or 0.0)}"
                 f"{f'; {unknown} scenario(s) unknown (nothing comparable measured)' if unknown else ''}")
    return "\n".join(lines)
