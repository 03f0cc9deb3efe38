#!/usr/bin/env python
"""BM IC throughput through the LoadGen harness vs the raw in-memory model loop, side by side.

The harness number includes reading and pre-processing every JPEG (overlapped with inference) and
LoadGen's bookkeeping; the raw loop times only ``model(batch)`` over the same images pre-processed
in memory beforehand, with the same cores and thread plan. Their ratio is what the harness costs.

    python benchmarks/harness_overhead.py [--images 256] [--batch 32] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from dlvirt.system import observe
from dlvirt.apps.ic import ImageClassification
from dlvirt.run.harness import plan_threads
from dlvirt.run.runner import run_job
from jobs import job_spec, settings


def harness_throughput(dataset: Path, work: Path, cfg: dict, cores: int, reps: int) -> list[float]:
    spec = job_spec("ic", cfg, dataset, f"BM/{cores}/PIN/CPU", reps)
    result = run_job(spec, work / "run.json", work / "loadgen")
    return [r.samples_per_s for r in result.runs]


def raw_throughput(dataset: Path, cfg: dict, cpus: list[int], reps: int) -> list[float]:
    os.sched_setaffinity(0, cpus)
    plan = plan_threads("granted", observe.observe())
    app = ImageClassification(cfg, dataset, "CPU", plan)
    app.load_model()
    inputs = [app.preprocess(i) for i in range(app.sample_count())]
    batches = [inputs[i:i + cfg["batch_size"]] for i in range(0, len(inputs), cfg["batch_size"])]
    rates = []
    for rep in range(reps + 1):  # the first pass is a warm-up, as in the harness run
        start = time.perf_counter()
        for batch in batches:
            app.infer(batch)
        elapsed = time.perf_counter() - start
        if rep:
            rates.append(len(inputs) / elapsed)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    cfg = settings(args.images, args.batch)
    with tempfile.TemporaryDirectory(prefix="dlvirt-bench-") as tmp:
        dataset = Path(tmp) / "ic"
        ImageClassification.prepare_dataset(dataset, cfg)
        through_harness = harness_throughput(dataset, Path(tmp), cfg, len(cpus), args.reps)
        raw = raw_throughput(dataset, cfg, cpus, args.reps)
    h, r = statistics.mean(through_harness), statistics.mean(raw)
    print(f"BM/{len(cpus)}/PIN/CPU IC ResNet50, {args.images} images, batch {args.batch}, {args.reps} reps")
    print(f"{'harness (E2E, LoadGen Offline)':34s} {h:8.2f} samples/s   per rep: {[round(x, 2) for x in through_harness]}")
    print(f"{'raw in-memory model loop':34s} {r:8.2f} samples/s   per rep: {[round(x, 2) for x in raw]}")
    print(f"{'ratio harness / raw':34s} {h / r:8.3f}")


if __name__ == "__main__":
    main()
