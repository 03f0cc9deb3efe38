"""Host side of one benchmark job: provision the platform, run every repetition, verify, tear down.

The result file is written only after every repetition ran and every observation matched the
request, and atomically, so a failed or interrupted job leaves no result behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

from dlvirt.core.atomic import write_json_atomic
from dlvirt.system import gpu
from dlvirt.system.hostinfo import capabilities, node_identity, slurm_allocation
from dlvirt.platforms import platform_class
from dlvirt.platforms.base import Platform, PlatformError, VerificationError, verify
from dlvirt.core.scenario import Scenario
from dlvirt.run.repetitions import count_problem


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def stop_on_sigterm() -> None:
    """Snakemake and SLURM stop jobs with SIGTERM: make it a SystemExit so every teardown runs."""
    signal.signal(signal.SIGTERM, _terminate)


# A job's work directory, next to its run file: WORK_PREFIX + run id + random; removed when the job
# ends, by dlvirt.run.cleanup when its runner was killed.
WORK_PREFIX = ".work-"

# What a job spec (built by the workflow's benchmark_spec) holds; "dlbs" only in dlbs jobs' specs.
SPEC_KEYS = ("tool", "app", "scenario", "repetitions", "warmup_repetitions", "threads", "timeout_s", "batch_size",
             "loadgen", "app_settings", "dataset_dir", "platform_settings", "allow_emulation")


def spec_problem(spec: dict[str, Any]) -> str | None:
    """What makes ``spec`` no job spec (None: nothing), said before anything is provisioned."""
    missing = [key for key in SPEC_KEYS if key not in spec]
    if missing:
        return f"lacks {', '.join(missing)}"
    try:
        Scenario.from_dict(spec["scenario"])
    except KeyError as err:
        return f"scenario {spec['scenario']!r} lacks {err}"
    except (TypeError, ValueError) as err:
        return f"scenario {spec['scenario']!r}: {err}"
    return None


def new_run_id() -> str:
    return f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


def check_node(cls: type[Platform], scenario: Scenario, spec: dict[str, Any]) -> None:
    """The study was planned where Snakemake runs; a job may land elsewhere (a cluster node, an edge
    host). Refuse to run there what that machine cannot give, before provisioning anything."""
    settings = {"allow_emulation": spec["allow_emulation"],
                "platforms": {scenario.platform: spec["platform_settings"]}}
    why = cls.unavailable_reason(scenario, capabilities(), settings)
    slurm = slurm_allocation()
    usable = len(os.sched_getaffinity(0))
    if why is None and slurm is not None and slurm["cpus_on_node"] and usable < slurm["cpus_on_node"]:
        why = (f"this SLURM job step may use {usable} of the {slurm['cpus_on_node']} CPUs SLURM gave the job "
               "(give benchmark jobs the whole node: --exclusive and cpus_per_task = the node's CPUs)")
    if why is not None:
        raise PlatformError(f"{scenario.name} cannot run on {socket.gethostname()}: {why}")


def run_job(spec: dict[str, Any], output: Path, loadgen_dir: Path) -> dict[str, Any]:
    """Run one job described by ``spec`` (built by the workflow) and write ``output``."""
    stop_on_sigterm()
    scenario = Scenario.from_dict(spec["scenario"])
    run_id = new_run_id()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{run_id}-", dir=output.parent))
    job = {
        **{k: spec[k] for k in ("tool", "app", "repetitions", "warmup_repetitions", "threads", "batch_size",
                                 "loadgen", "app_settings")},
        "scenario": scenario.to_dict(),
        "scenario_name": scenario.name,
        "dataset_dir": str(Path(spec["dataset_dir"]).resolve()),
        "run_id": run_id,
        "dlbs": spec.get("dlbs"),  # the dlbs section, in dlbs jobs' specs only
    }
    try:
        cls = platform_class(scenario.platform)
        check_node(cls, scenario, spec)
        # allow_emulation rides along: a guest whose KVM boot probe fails may fall back to TCG
        settings = {**spec["platform_settings"], "allow_emulation": spec["allow_emulation"]}
        with cls(scenario, settings, workdir, run_id) as platform:
            harness = platform.run(job, timeout_s=float(spec["timeout_s"]))
            expected = platform.expected()
            described = platform.describe()
        uses_gpu = scenario.processor == "GPU"
        problems = {r["repetition"]: verify(expected, r["observed"]) + (gpu.usage_problems(r) if uses_gpu else [])
                    for r in harness["warmups"] + harness["runs"]}
        problems = {rep: p for rep, p in problems.items() if p}
        if problems:
            lines = "; ".join(f"rep {rep}: {', '.join(p)}" for rep, p in problems.items())
            raise VerificationError(f"{scenario.name}: the platform did not give what was asked: {lines}")
        stop = harness.get("repetitions", {}).get("stop")
        wrong_count = count_problem(spec["repetitions"], len(harness["runs"]), stop)
        if wrong_count:
            raise VerificationError(wrong_count)
        result = {
            "tool": spec["tool"],
            "app": spec["app"],
            "scenario": scenario.to_dict(),
            "scenario_name": scenario.name,
            "platform": described,
            "expected": {k: v for k, v in vars(expected).items()},
            "verified": True,
            "host": socket.gethostname(),
            "node": node_identity(),
            "slurm": slurm_allocation(),
            "run_id": run_id,
            "spec": spec,
            **{k: harness[k] for k in ("runs", "warmups", "repetitions", "dataset", "model", "versions",
                                       "model_load_s", "stack")},
        }
        if loadgen_dir.exists():
            shutil.rmtree(loadgen_dir)
        out_logs = workdir / "out"
        loadgen_dir.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(out_logs), str(loadgen_dir))
        write_json_atomic(output, result)
        return result
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
