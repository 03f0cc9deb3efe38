#!/usr/bin/env python
"""BM IC throughput through the LoadGen harness vs the framework's raw in-memory model loop, side by side.

The harness number includes reading and pre-processing every JPEG and LoadGen's bookkeeping, under
the harness's thread plan; the raw loop times only ``model(batch)`` over the same images
pre-processed in memory beforehand, in a fresh process pinned to the same CPUs with the framework's
default threads (dlvirt sets none), so it uses every granted core as a plain loop would. Their ratio
is what the harness costs; the harness's inference stage alone (samples / its busy time) is printed
beside it.

    python benchmarks/harness_overhead.py [--cores 2] [--images 256] [--batch 32] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dlvirt.apps.ic import ImageClassification  # noqa: E402
from dlvirt.run.runner import run_job  # noqa: E402
from dlvirt.system.hostinfo import node_identity  # noqa: E402

from jobs import fresh_raw_loop, job_spec, settings  # noqa: E402 - benchmarks/jobs.py


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    cfg = settings(args.images, args.batch)
    with tempfile.TemporaryDirectory(prefix="dlvirt-bench-") as tmp:
        dataset = Path(tmp) / "ic"
        ImageClassification.prepare_dataset(dataset, cfg)
        spec = job_spec("ic", cfg, dataset, f"BM/{args.cores}/PIN/CPU", args.reps)
        result = run_job(spec, Path(tmp) / "run.json", Path(tmp) / "loadgen")
        cpus = result.runs[0].observed["affinity"]
        raw = fresh_raw_loop("ic", cfg, dataset, cpus, args.reps)
    e2e = [r.samples / r.e2e_s for r in result.runs]
    infer = [r.samples / r.phases["infer_s"] for r in result.runs]
    h, i, r = statistics.mean(e2e), statistics.mean(infer), raw["rate"]
    print(f"BM/{args.cores}/PIN/CPU (CPUs {cpus}) IC ResNet50, {args.images} images, batch {args.batch}, "
          f"{args.reps} reps after a warm-up; {node_identity()['cpu_model']}, {datetime.now(UTC):%Y-%m-%d}")
    print(f"{'harness E2E (LoadGen Offline)':34s} {h:8.2f} samples/s   per rep: {[round(x, 2) for x in e2e]}")
    print(f"{'harness inference stage':34s} {i:8.2f} samples/s   per rep: {[round(x, 2) for x in infer]}")
    print(f"{'raw loop, framework default threads':34s} {r:8.2f} samples/s   per rep: "
          f"{[round(x, 2) for x in raw['rates']]} ({raw['intra_op']} intra-op threads)")
    print(f"{'ratio E2E / raw':34s} {h / r:8.3f}   best rep / best pass: {max(e2e) / max(raw['rates']):.3f}")
    print(f"{'ratio inference / raw':34s} {i / r:8.3f}   best rep / best pass: {max(infer) / max(raw['rates']):.3f}")
    others = [round(x.telemetry.get("others_cpu_s") or 0.0, 2) for x in result.runs]
    print(f"CPU-s other processes took per rep: {others}")


if __name__ == "__main__":
    main()
