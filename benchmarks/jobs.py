"""What the benchmark scripts share: the IC settings they run and the job spec the real runner takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dlvirt.core.memory import parse_mib
from dlvirt.core.records import JobSpec

SCHEMA = Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml"
# study.memory's default, which the workflow gives every platform (memory_mib)
MEMORY_MIB = parse_mib(yaml.safe_load(SCHEMA.read_text())["properties"]["study"]["properties"]["memory"]["default"])


def settings(images: int, batch: int) -> dict[str, Any]:
    """IC settings for ``images`` generated JPEGs in batches of ``batch`` (random weights)."""
    return {"batch_size": batch, "seed": 0, "dataset": {"path": None, "count": images, "seed": 0},
            "weights": {"path": None, "sha256": None},
            "loadgen": {"min_query_count": images, "min_duration_ms": 0, "expected_qps": 1,
                        "performance_sample_count": None}}


def job_spec(app: str, cfg: dict[str, Any], dataset: Path, scenario: str, reps: int, *,
             threads: str = "granted", pipeline: str | None = None,
             platform_settings: dict[str, Any] | None = None) -> JobSpec:
    """One mlperf job of ``app`` on ``scenario`` (``BM/2/PIN/CPU``), one warm-up before ``reps``, with
    the default study.memory."""
    platform, cores, pinning, processor = scenario.split("/")
    return JobSpec.from_dict({
        "tool": "mlperf", "app": app, "repetitions": reps, "warmup_repetitions": 1, "threads": threads,
        "pipeline": pipeline, "timeout_s": 3600, "batch_size": cfg["batch_size"], "loadgen": cfg["loadgen"],
        "app_settings": cfg, "dataset_dir": str(dataset),
        "platform_settings": {"memory_mib": MEMORY_MIB, **(platform_settings or {})},
        "allow_emulation": False,
        "scenario": {"platform": platform, "cores": int(cores), "pinning": pinning, "processor": processor}})
