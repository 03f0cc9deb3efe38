"""What the benchmark scripts share: the IC settings they run and the job spec the real runner takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlvirt.core.records import JobSpec


def settings(images: int, batch: int) -> dict[str, Any]:
    """IC settings for ``images`` generated JPEGs in batches of ``batch`` (random weights)."""
    return {"batch_size": batch, "seed": 0, "dataset": {"path": None, "count": images, "seed": 0},
            "weights": {"path": None, "sha256": None},
            "loadgen": {"min_query_count": images, "min_duration_ms": 0, "expected_qps": 1,
                        "performance_sample_count": None}}


def job_spec(app: str, cfg: dict[str, Any], dataset: Path, scenario: str, reps: int, *,
             threads: str = "granted", pipeline: str | None = None,
             platform_settings: dict[str, Any] | None = None) -> JobSpec:
    """One mlperf job of ``app`` on ``scenario`` (``BM/2/PIN/CPU``), one warm-up before ``reps``."""
    platform, cores, pinning, processor = scenario.split("/")
    return JobSpec.from_dict({
        "tool": "mlperf", "app": app, "repetitions": reps, "warmup_repetitions": 1, "threads": threads,
        "pipeline": pipeline, "timeout_s": 3600, "batch_size": cfg["batch_size"], "loadgen": cfg["loadgen"],
        "app_settings": cfg, "dataset_dir": str(dataset), "platform_settings": platform_settings or {},
        "allow_emulation": False,
        "scenario": {"platform": platform, "cores": int(cores), "pinning": pinning, "processor": processor}})
