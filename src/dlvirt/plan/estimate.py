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
from dlvirt.core.machinetime import launch_overhead_s
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


def _repetitions_text(setting: int | dict[str, Any]) -> str:
    adaptive = adaptive_setting(setting)
    rule = (f"{adaptive['min']} to {adaptive['max']} until the 95 % interval is within ±{adaptive['rel_ci95']:.0%} "
            "of the mean")
    return f"{setting} per launch (adaptive alternative: {rule})" if isinstance(setting, int) else f"adaptive, {rule}"


def report(config: dict[str, Any], estimates: list[JobEstimate], records: int) -> str:
    """Per scenario (tool × app × scenario, all its replicates, in numeric order) and the total, in
    hours of machine time; a total over only some scenarios says it is partial and how much it covers."""
    study = config["study"]
    rows: dict[tuple[str, str, str, int, str, str], list[JobEstimate]] = {}
    for e in estimates:
        s = e.job.scenario
        rows.setdefault((e.job.tool, e.job.app, s.platform, s.cores, s.pinning, s.processor), []).append(e)
    head = (f"repetitions: {_repetitions_text(study['repetitions'])}; {study.get('replicates', 1)} launch(es) per "
            f"scenario; {len(rows)} scenario(s) planned")
    if not records:
        return (f"{head}\nno run records to project from: nothing measured on this host yet. Run a study here first "
                "(the smoke study takes minutes: snakemake --cores 1 all --configfile config/smoke.yaml), then ask "
                "again; every scenario is then projected from its own or the nearest measured one.")
    lines = [head, f"{'tool':6} {'app':4} {'scenario':16} {'fixed h':>8} {'adapt. h':>8} {'n':>4}  basis"]
    for (tool, app, *_), group in sorted(rows.items()):
        name = group[0].job.scenario.name
        if group[0].adaptive_s is None:
            lines.append(f"{tool:6} {app:4} {name:16} {'?':>8} {'?':>8} {'?':>4}  {group[0].basis}")
            continue
        fixed = f"{sum(e.fixed_s or 0.0 for e in group) / 3600:.2f}" if group[0].fixed_s is not None else "-"
        adapt = sum(e.adaptive_s or 0.0 for e in group) / 3600
        lines.append(f"{tool:6} {app:4} {name:16} {fixed:>8} {adapt:>8.2f} {group[0].adaptive_n:>4}  {group[0].basis}")
    total = totals(config, estimates, records)
    unknown = sum(1 for group in rows.values() if group[0].adaptive_s is None)
    cover = (f"partial: {len(rows) - unknown} of {len(rows)} scenario(s) projected, the other {unknown} have nothing "
             "comparable measured" if unknown else f"all {len(rows)} scenario(s) projected")
    fixed_total = f"{total['fixed_s'] / 3600:.2f} h" if total["fixed_s"] is not None else "-"
    lines.append(f"total ({cover}): fixed {fixed_total}, adaptive {(total['adaptive_s'] or 0.0) / 3600:.2f} h")
    return "\n".join(lines)


def background_line(load: dict[str, Any], rule: dict[str, Any]) -> str:
    """The host's background load (``observe.background_load``) in words, beside what the rerun rule
    (``study.interference``) will do with it."""
    seen = ", ".join(f"{name} {seconds:g} s" for name, seconds in load["others_seen"].items())
    line = (f"host background load: other processes kept {load['others_cores']:.2f} of {load['cpus']} cores busy "
            f"over a {load['sample_s']:.1f} s sample" + (f" (busiest: {seen})" if seen else ""))
    # as a share of one core: a 1-core launch on a CPU the load reaches is disturbed above it
    if load["others_cores"] > rule["disturbed_above"]:
        return (f"{line}; above study.interference.disturbed_above ({rule['disturbed_above']:.0%} of a launch's cores' "
                f"time): launches that share their CPUs with it run again (at most {rule['reruns']} times each) "
                "and are marked if still disturbed; for a decision, run the study on a quiet host")
    return f"{line}: quiet enough (study.interference.disturbed_above {rule['disturbed_above']:.0%})"
