#!/usr/bin/env python
"""How much of study.memory each app's harness takes: its peak resident memory on BM/N/PIN, run
under the default study.memory as the workflow runs it (the cgroup memory limit, verified inside).

RS runs with the paper's full Kaggle embedding tables (``max_rows_per_table: null``: 33.8 M rows,
2.2 GB of fp32 embeddings), the reason study.memory is what it is; the other apps with the reduced
workloads of gpu_vs_cpu.py at their reference model sizes. Every job goes through the real
runner, harness and LoadGen Offline (``dlvirt.run.runner.run_job``), one warm-up and ``--reps``.

    python benchmarks/memory_peak.py [--cores 2] [--reps 1] [--apps rs,nlp,ic,sr]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from dlvirt.analysis.aggregate import summarise_launches
from dlvirt.apps import app_class
from dlvirt.run.runner import run_job
from dlvirt.system.hostinfo import node_identity

from gpu_vs_cpu import app_settings  # benchmarks/gpu_vs_cpu.py: reduced workloads, schema defaults
from jobs import MEMORY_MIB, job_spec

FULL_RS = {"max_rows_per_table": None, "dataset": {"count": 50}, "loadgen": {"min_query_count": 50}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cores", type=int, default=min(2, len(os.sched_getaffinity(0))))
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--apps", default="rs,nlp,ic,sr")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="dlvirt-memory-bench-") as tmp:
        for app in args.apps.split(","):
            settings = app_settings(app, "tensorflow")
            if app == "rs":
                settings = {**settings, **FULL_RS, "dataset": {**settings["dataset"], **FULL_RS["dataset"]},
                            "loadgen": {**settings["loadgen"], **FULL_RS["loadgen"]}}
            dataset = Path(tmp) / "datasets" / app
            app_class(app).prepare_dataset(dataset, settings)
            spec = job_spec(app, settings, dataset, f"BM/{args.cores}/PIN/CPU", args.reps)
            result = run_job(spec, Path(tmp) / app / "run.json", Path(tmp) / app / "loadgen")
            limit = result.runs[0].observed["memory_limit_bytes"] >> 20
            rows.append((app, str(result.model.get("model")), limit, summarise_launches([result])))
    node = node_identity()
    print(f"BM/{args.cores}/PIN/CPU under study.memory = {MEMORY_MIB} MiB; {node['cpu_model']} "
          f"({node['logical_cpus_online']} CPUs, {node['memory_bytes'] >> 20} MiB); 1 warm-up + {args.reps} rep(s)")
    print(f"{'app':4s} {'model':28s} {'limit MiB':>9s} {'peak RSS MiB':>12s} {'of limit':>8s} {'E2E s':>8s}")
    for app, model, limit, row in rows:
        print(f"{app:4s} {model[:28]:28s} {limit:9d} {row['max_rss_mib']:12.0f} {row['max_rss_mib'] / limit:8.0%} "
              f"{row['mean_s']:8.2f}")


if __name__ == "__main__":
    main()
