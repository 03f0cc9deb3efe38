#!/usr/bin/env python
"""What the thread plan does to IC on BM/N: granted vs framework-default, PIN vs VNL, side by side.

``granted`` keeps the harness's compute threads within the N granted cores, either split (one
pre-processing worker beside N-1 intra-op threads, ``pipeline: overlapped``) or alternating (all N
cores pre-process a batch, then all N infer it, ``pipeline: sequential``). ``framework-default``
sets no thread count: TensorFlow starts one intra-op thread per *visible* core, which under VNL (a
CFS quota of N cores, every host core visible) is more threads than the quota lets run, so the
kernel throttles the cgroup. Prints the mean E2E of each, its ratio to granted PIN (split), and what
the kernel recorded: throttled CFS periods, throttled seconds, context switches. Configurations
alternate round after round, so drift of a shared machine reaches all alike.

    python benchmarks/thread_plans.py [--cores 2] [--images 64] [--batch 16] [--reps 2] [--rounds 1]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
from pathlib import Path

from dlvirt.apps.ic import ImageClassification
from dlvirt.run.runner import run_job
from dlvirt.system.hostinfo import node_identity

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs import job_spec, settings  # noqa: E402 - the same IC settings as the other benchmarks

CONFIGS = [  # (label, threads, pipeline, pinning)
    ("granted split PIN", "granted", "overlapped", "PIN"),
    ("granted alternate PIN", "granted", "sequential", "PIN"),
    ("granted split VNL", "granted", "overlapped", "VNL"),
    ("granted alternate VNL", "granted", "sequential", "VNL"),
    ("framework-default PIN", "framework-default", "overlapped", "PIN"),
    ("framework-default VNL", "framework-default", "overlapped", "VNL"),
]


def run(threads: str, pipeline: str, pinning: str, cores: int, cfg: dict, dataset: Path, work: Path,
        reps: int) -> list[dict]:
    spec = job_spec("ic", cfg, dataset, f"BM/{cores}/{pinning}/CPU", reps, threads=threads, pipeline=pipeline)
    return [r.to_dict() for r in run_job(spec, work / "run.json", work / "loadgen").runs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    cfg = settings(args.images, args.batch)
    runs: dict[str, list[dict]] = {label: [] for label, *_ in CONFIGS}
    with tempfile.TemporaryDirectory(prefix="dlvirt-bench-") as tmp:
        dataset = Path(tmp) / "ic"
        ImageClassification.prepare_dataset(dataset, cfg)
        for _ in range(args.rounds):
            for label, threads, pipeline, pinning in CONFIGS:
                runs[label] += run(threads, pipeline, pinning, args.cores, cfg, dataset, Path(tmp), args.reps)
    print(f"IC ResNet50 on BM/{args.cores}, {args.images} images, batch {args.batch}, "
          f"{args.rounds} rounds x {args.reps} reps; {node_identity()['cpu_model']} ({platform.node()})")
    print(f"{'':24s} {'E2E s':>8s} {'/ first':>8s} {'intra-op':>9s} {'throttled':>10s} {'thr. s':>7s} "
          f"{'ctx sw.':>8s}")
    base = statistics.mean(r["e2e_s"] for r in runs[CONFIGS[0][0]])
    for label, records in runs.items():
        e2e = statistics.mean(r["e2e_s"] for r in records)
        periods = sum(r["telemetry"]["nr_periods"] or 0 for r in records)
        throttled = sum(r["telemetry"]["nr_throttled"] or 0 for r in records)
        share = f"{100 * throttled / periods:8.1f} %" if periods else f"{'-':>10s}"
        throttled_s = statistics.mean(r["telemetry"]["throttled_s"] or 0 for r in records)
        ctx = statistics.mean(r["telemetry"]["voluntary_ctx"] + r["telemetry"]["involuntary_ctx"] for r in records)
        print(f"{label:24s} {e2e:8.3f} {e2e / base:8.3f} {records[0]['threads']['framework']['intra_op']:9d} "
              f"{share} {throttled_s:7.2f} {ctx:8.0f}")


if __name__ == "__main__":
    main()
