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

from dlvirt.atomic import write_json_atomic
from dlvirt.platforms import platform_class
from dlvirt.platforms.base import VerificationError, verify
from dlvirt.scenario import Scenario


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def new_run_id() -> str:
    return f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


def run_job(spec: dict[str, Any], output: Path, loadgen_dir: Path) -> dict[str, Any]:
    """Run one job described by ``spec`` (built by the workflow) and write ``output``."""
    signal.signal(signal.SIGTERM, _terminate)  # Snakemake and SLURM stop jobs with SIGTERM
    scenario = Scenario.from_dict(spec["scenario"])
    run_id = new_run_id()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f".work-{run_id}-", dir=output.parent))
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
        with cls(scenario, spec["platform_settings"], workdir, run_id) as platform:
            harness = platform.run(job, timeout_s=float(spec["timeout_s"]))
            expected = platform.expected()
            described = platform.describe()
        problems = {r["repetition"]: verify(expected, r["observed"]) for r in harness["warmups"] + harness["runs"]}
        problems = {rep: p for rep, p in problems.items() if p}
        if problems:
            lines = "; ".join(f"rep {rep}: {', '.join(p)}" for rep, p in problems.items())
            raise VerificationError(f"{scenario.name}: the platform did not give what was asked: {lines}")
        if len(harness["runs"]) != int(spec["repetitions"]):
            raise VerificationError(f"{len(harness['runs'])} repetitions ran, {spec['repetitions']} asked")
        result = {
            "tool": spec["tool"],
            "app": spec["app"],
            "scenario": scenario.to_dict(),
            "scenario_name": scenario.name,
            "platform": described,
            "expected": {k: v for k, v in vars(expected).items()},
            "verified": True,
            "host": socket.gethostname(),
            "run_id": run_id,
            "spec": spec,
            **{k: harness[k] for k in ("runs", "warmups", "dataset", "model", "versions", "model_load_s")},
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
