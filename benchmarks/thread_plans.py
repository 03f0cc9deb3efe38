#!/usr/bin/env python
"""What the thread plan does to each app on BM/1 and BM/N: the candidates side by side.

``granted`` (default) keeps the harness's runnable compute threads within the N granted cores by
alternating the stages, each on every core (N pre-processing workers, then N intra-op threads);
``granted split`` (``pipeline: overlapped``) gives one pre-processing worker its own core beside
N-1 intra-op threads (at N = 1 it is the same plan as granted, so it is left out there);
``framework-default`` sets no thread count: TensorFlow and PyTorch start one intra-op thread per
*visible* core, which under VNL (a CFS quota of N cores, every host core visible) is more threads
than the quota lets run, so the kernel throttles the cgroup. Per configuration: the best E2E (on a
shared machine the repetition other processes slowed least) and its ratio to granted's on the same
cores, the mean E2E, the intra-op threads the framework ran, Σ phase CPU / (cores × E2E)
(how busy the granted cores were), the share of /proc samples with more runnable threads than
cores, the CFS throttling, and the CPU-seconds other processes took meanwhile (a shared machine).
Configurations alternate round after round, so drift of a shared machine reaches all alike.

    python benchmarks/thread_plans.py [--apps ic,nlp,rs] [--cores 1,2] [--pinnings PIN] [--reps 2] [--rounds 1]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dlvirt.apps import app_class
from dlvirt.run.runner import run_job
from dlvirt.system.hostinfo import node_identity

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs import job_spec, study_config  # noqa: E402 - the default study's settings, as the other benchmarks

PLANS = [  # (label, threads, pipeline)
    ("granted", "granted", None),
    ("granted split", "granted", "overlapped"),
    ("framework-default", "framework-default", None),
]


def configs(cores: int, pinnings: list[str]) -> list[tuple[str, str, str | None, str]]:
    return [(f"{label} {pinning}", threads, pipeline, pinning) for pinning in pinnings
            for label, threads, pipeline in PLANS if not (pipeline == "overlapped" and cores == 1)]


def row(records: list[dict[str, Any]], cores: int) -> dict[str, float]:
    cpu = [sum(r["phases"][k] or 0.0 for k in ("pre_cpu_s", "infer_cpu_s", "post_cpu_s")) for r in records]
    counts = [r["telemetry"]["runnable_counts"] for r in records]
    periods = sum(r["telemetry"]["nr_periods"] or 0 for r in records)
    return {"e2e": min(r["e2e_s"] for r in records), "mean": statistics.mean(r["e2e_s"] for r in records),
            "intra_op": records[0]["threads"]["framework"]["intra_op"],
            "busy": statistics.mean(c / (cores * r["e2e_s"]) for c, r in zip(cpu, records, strict=True)),
            "over": sum(sum(c[cores + 1:]) for c in counts) / max(1, sum(sum(c) for c in counts)),
            "throttled": (100 * sum(r["telemetry"]["nr_throttled"] or 0 for r in records) / periods
                          if periods else None),
            "others": statistics.mean(r["telemetry"].get("others_cpu_s") or 0.0 for r in records)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--apps", default="ic,nlp,rs")
    parser.add_argument("--cores", default="1,2")
    parser.add_argument("--pinnings", default="PIN")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    config = study_config()
    levels = [int(c) for c in args.cores.split(",")]
    pinnings = args.pinnings.split(",")
    runs: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="dlvirt-bench-") as tmp:
        datasets = {}
        for app in args.apps.split(","):
            datasets[app] = Path(tmp) / app
            app_class(app).prepare_dataset(datasets[app], config["apps"][app])
        for _ in range(args.rounds):
            for app, dataset in datasets.items():
                for cores in levels:
                    for label, threads, pipeline, pinning in configs(cores, pinnings):
                        spec = job_spec(app, config["apps"][app], dataset, f"BM/{cores}/{pinning}/CPU", args.reps,
                                        threads=threads, pipeline=pipeline)
                        result = run_job(spec, Path(tmp) / "run.json", Path(tmp) / "loadgen")
                        runs.setdefault((app, cores, label), []).extend(r.to_dict() for r in result.runs)
    print(f"BM/N, default study's workloads, {args.rounds} round(s) x {args.reps} reps after a warm-up; "
          f"{node_identity()['cpu_model']} ({platform.node()}), {datetime.now(UTC):%Y-%m-%d}")
    print(f"{'app':4s} {'N':>2s} {'plan':24s} {'best s':>7s} {'/ gr.':>6s} {'mean s':>7s} {'intra':>5s} {'busy':>5s} "
          f"{'R>N':>5s} {'thr. %':>6s} {'others s':>8s}")
    for app in datasets:
        for cores in levels:
            base = row(runs[(app, cores, f"granted {pinnings[0]}")], cores)["e2e"]
            for label, *_ in configs(cores, pinnings):
                found = row(runs[(app, cores, label)], cores)
                throttled = f"{found['throttled']:6.1f}" if found["throttled"] is not None else f"{'-':>6s}"
                print(f"{app:4s} {cores:2d} {label:24s} {found['e2e']:7.3f} {found['e2e'] / base:6.2f} "
                      f"{found['mean']:7.3f} {found['intra_op']:5d} {found['busy']:5.2f} {found['over']:5.2f} "
                      f"{throttled} {found['others']:8.2f}")


if __name__ == "__main__":
    main()
