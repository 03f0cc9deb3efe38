"""Host side of one benchmark job: provision the platform, run every repetition, verify, tear down.

The result file is written only after every repetition ran and every observation matched the
request, and atomically, so a failed or interrupted job leaves no result behind. A launch that
shared its CPUs with other processes runs again first, by the rule of ``dlvirt.run.interference``.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dlvirt.apps.base import verified_weights
from dlvirt.core.codeversion import code_version
from dlvirt.core.owner import new_run_id
from dlvirt.core.records import HarnessJob, HarnessOutput, JobResult, JobSpec, Repetition
from dlvirt.core.signals import stop_on_signals
from dlvirt.platforms import platform_class
from dlvirt.platforms.base import Expected, Platform, PlatformError, VerificationError, require_verified
from dlvirt.run import interference
from dlvirt.run.cleanup import remove_stale_local
from dlvirt.run.repetitions import count_problem, warmup_problem
from dlvirt.system import benchlock, keepaway, whose
from dlvirt.system.hostinfo import capabilities, memory_bytes, node_identity, slurm_allocation

# A job's work directory, next to its run file: WORK_PREFIX + run id + random; removed when the job
# ends, by dlvirt.run.cleanup when its runner was killed.
WORK_PREFIX = ".work-"


def placement_record(described: dict[str, Any], runs: list[Repetition]) -> dict[str, Any]:
    """PIN: the placement the platform made; VNL: the nodes the threads ran on, over all repetitions."""
    if described.get("placement"):
        return dict(described["placement"])
    seen = [r.observed.get("placement", {}).get("ran_on_nodes") for r in runs]
    return {"ran_on_nodes": sorted({n for nodes in seen if nodes for n in nodes})}


def check_node(cls: type[Platform], spec: JobSpec) -> None:
    """The study was planned where Snakemake runs; a job may land elsewhere (a cluster node, an edge
    host). Refuse to run there what that machine cannot give, before provisioning anything."""
    scenario = spec.scenario
    settings = {"allow_emulation": spec.allow_emulation, "platforms": {scenario.platform: spec.platform_settings}}
    why = cls.unavailable_reason(scenario, capabilities(), settings)
    if spec.turns is not None and cls.kind.virtualised:
        why = f"turns are taken at a socket on the host ({spec.turns}), which only bare metal's harness reaches"
    slurm = slurm_allocation()
    usable = len(os.sched_getaffinity(0))
    if why is None and slurm is not None and slurm["cpus_on_node"] and usable < slurm["cpus_on_node"]:
        why = (f"this SLURM job step may use {usable} of the {slurm['cpus_on_node']} CPUs SLURM gave the job "
               "(give benchmark jobs the whole node: --exclusive and cpus_per_task = the node's CPUs)")
    memory_mib = spec.platform_settings.get("memory_mib")
    if why is None and memory_mib is not None and cls.host_memory_mib(memory_mib) << 20 > memory_bytes():
        why = (f"study.memory of {memory_mib} MiB ({cls.host_memory_mib(memory_mib)} MiB for {scenario.platform}) "
               f"is more than this machine's {memory_bytes() >> 20} MiB")
    if why is not None:
        raise PlatformError(f"{scenario.name} cannot run on {socket.gethostname()}: {why}")


def publish_result(result: JobResult, output: Path, logs: Path, loadgen_dir: Path) -> None:
    """Move the job's logs to ``loadgen_dir`` and write ``output``, last and atomically: a result file
    exists only for a job that completed."""
    if loadgen_dir.exists():
        shutil.rmtree(loadgen_dir)
    loadgen_dir.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(logs), str(loadgen_dir))
    result.write(output)


def launch_split(harness: HarnessOutput, startup_s: float | None, total_s: float,
                 weights_check_s: float) -> dict[str, float] | None:
    """What the launch cost (``JobResult.launch_s``): start-up, model load, warm-ups, counted
    repetitions and the rest of ``total_s`` (None where the platform could not time its start-up).

    The harness times its parts one after another on its own clock, inside the host's total; only
    the start-up is pieced together across clocks (a guest's: the host's boot time, which ends
    when the host sees the start marker on the console, up to a polling interval late, plus the
    guest's own uptime from there). What of it overlaps the harness's parts (``startup_overlap_s``)
    is taken off the start-up, so that the parts fit inside the total and ``other_s`` is >= 0."""
    timeline = harness.timeline
    if timeline is None or startup_s is None:
        return None
    parts = {"startup_s": startup_s, "model_load_s": harness.model_load_s, "warmup_s": timeline["warmup_s"],
             "counted_s": timeline["counted_s"]}
    overlap = min(max(0.0, sum(parts.values()) - total_s), max(0.0, startup_s))
    parts["startup_s"] -= overlap
    return {**{k: round(v, 4) for k, v in parts.items()}, "other_s": round(total_s - sum(parts.values()), 4),
            "total_s": round(total_s, 4), "startup_overlap_s": round(overlap, 4),
            "framework_import_s": round(timeline["framework_import_s"], 4),
            "weights_check_s": round(weights_check_s, 4), "first_call_s": round(timeline["first_call_s"], 4)}


def say(line: str) -> None:
    print(f"dlvirt: {line}", flush=True)


def _attempt(cls: type[Platform], spec: JobSpec, job: HarnessJob, workdir: Path, run_id: str, started: float,
             weights_check_s: float) -> tuple[HarnessOutput, Expected, dict[str, Any], dict[str, float] | None,
                                              dict[str, Any] | None]:
    """One launch of ``job`` on a platform of its own in ``workdir``, verified: its harness output,
    what it was verified against, the platform's description, the launch's split (``launch_split``
    from ``started``) and what keep_others_away did."""
    scenario = spec.scenario
    # allow_emulation rides along: a guest whose KVM boot probe fails may fall back to TCG
    settings = {**spec.platform_settings, "allow_emulation": spec.allow_emulation}
    print(f"[dlvirt] {scenario.name} job {run_id}: provisioning", flush=True)
    kept: list[dict[str, Any] | None] = []
    try:
        with cls(scenario, settings, workdir, run_id) as platform:
            # the launch's CPUs are known once provisioned; others go back before the teardown
            cpus = None if platform.placement is None else tuple(platform.placement.cpus)
            with keepaway.others_away(spec.keep_others_away, cpus, slurm_allocation() is not None, say,
                                      cls.launch_in_runner_cgroup) as kept_away:
                kept.append(kept_away)
                run_started = time.time()
                # whose time the launch's host CPUs gave meanwhile, read from the host (dlvirt.system.whose)
                with whose.Sampler(cpus or tuple(sorted(os.sched_getaffinity(0))), platform.launch_tasks) as sampler:
                    harness = platform.run(job, timeout_s=float(spec.timeout_s))
            in_run = platform.startup_s(harness, run_started)
            expected = platform.expected()
            # a vanilla launch floats on every CPU but may use only its quota's time of them (its cores,
            # or fewer where the platform was slowed on purpose)
            cores = min(float(scenario.cores), expected.quota_cores or float(scenario.cores))
            harness = interference.accounted(harness, sampler, None if in_run is None else run_started + in_run, cores)
            # analysis tells bare metal from the rest by this, without importing a platform
            described = {**platform.describe(), "virtualised": cls.kind.virtualised}
    finally:  # a v2 partition held the platform's groups until their teardown, just done
        keepaway.settle(kept[0] if kept else None, say)
    # start-up: the weights check and provisioning, then what the platform timed of its run
    startup = None if in_run is None else run_started - started + in_run
    launch = launch_split(harness, startup, time.time() - started, weights_check_s)
    require_verified(scenario.name, expected, harness, uses_gpu=scenario.processor == "GPU")
    stop = (harness.repetitions or {}).get("stop")
    wrong_count = (count_problem(spec.repetitions, len(harness.runs), stop)
                   or warmup_problem(spec.warmup_repetitions, len(harness.warmups)))
    if wrong_count:
        raise VerificationError(wrong_count)
    return harness, expected, described, launch, kept_away


def _launch(cls: type[Platform], spec: JobSpec, run_id: str, workdir: Path,
            lock: dict[str, Any]) -> tuple[JobResult, Path]:
    """One launch, run again by the rerun rule (``study.interference``) while it is disturbed: its
    result, not yet published, and the kept attempt's output directory."""
    scenario = spec.scenario
    started = time.time()
    # the weights resource, checked against its checksum file here, before any platform exists
    weights = None if spec.weights_file is None else verified_weights(Path(spec.weights_file).resolve())
    weights_check_s = time.time() - started
    job = HarnessJob.of(spec, dataset_dir=str(Path(spec.dataset_dir).resolve()), run_id=run_id, weights=weights)
    rule = spec.interference
    attempts: list[dict[str, Any]] = []  # the rerun rule's account (run.interference)
    while True:
        # each attempt in a directory of its own: a discarded one's outputs are never published
        attempt_dir = workdir / f"attempt-{len(attempts) + 1}"
        harness, expected, described, launch, kept_away = _attempt(cls, spec, job, attempt_dir, run_id, started,
                                                                    weights_check_s if not attempts else 0.0)
        runs = harness.runs
        if rule is None or not interference.judged(runs):
            break
        runs = interference.marked(runs, rule["disturbed_above"])
        attempts.append(interference.attempt(len(attempts) + 1, runs, time.time() - started))
        if not interference.run_again(attempts[-1], rule):
            if attempts[-1]["disturbed"]:
                print(f"[dlvirt] {scenario.name} job {run_id}: attempt {len(attempts)}: "
                      f"{interference.why(attempts[-1], rule)}; kept, marked disturbed (no rerun left of "
                      f"{rule['reruns']}, study.interference)", flush=True)
            break
        print(f"[dlvirt] {scenario.name} job {run_id}: attempt {len(attempts)}: "
              f"{interference.why(attempts[-1], rule)}; running it again (at most {rule['reruns']} rerun(s), "
              "study.interference)", flush=True)
        shutil.rmtree(attempt_dir, ignore_errors=True)  # a guest's disk, a container's outputs: gone now
        started = time.time()
    result = JobResult(
        tool=spec.tool, app=spec.app, scenario=scenario, scenario_name=scenario.name, platform=described,
        replicate=spec.replicate,
        expected=vars(expected), verified=True, host=socket.gethostname(), node=node_identity(),
        slurm=slurm_allocation(), run_id=run_id, spec=spec, runs=runs, warmups=harness.warmups,
        repetitions=harness.repetitions, dataset=harness.dataset, model=harness.model,
        versions=harness.versions, model_load_s=harness.model_load_s, stack=harness.stack,
        placement=placement_record(described, harness.runs),
        # the harness's code measured; the runner's provisioned and verified (normally the same)
        code=harness.code, runner_code=code_version(), launch_s=launch,
        interference=interference.account(rule, attempts) if rule is not None and attempts else None,
        bench_lock=lock, others_kept_away=kept_away)
    return result, attempt_dir / "out"


def run_job(spec: JobSpec, output: Path, loadgen_dir: Path) -> JobResult:
    """Run one job described by ``spec`` (built by the workflow) and write ``output``."""
    stop_on_signals()
    scenario = spec.scenario
    run_id = new_run_id()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{run_id}-", dir=output.parent))
    try:
        if slurm_allocation() is not None:  # a cluster node: the workflow's start cleaned only its own machine
            for line in remove_stale_local({scenario.platform: spec.platform_settings}):
                print(f"dlvirt: {line}", file=sys.stderr)
        cls = platform_class(scenario.platform)
        check_node(cls, spec)
        # one launch at a time on this host, whichever study starts it (dlvirt.system.benchlock)
        with benchlock.held(scenario.name, Path.cwd(), say) as lock:
            result, out_dir = _launch(cls, spec, run_id, workdir, lock)
            publish_result(result, output, out_dir, loadgen_dir)
        return result
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
