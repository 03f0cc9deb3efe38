#!/usr/bin/env python
"""How each app and tool scales from 1 to N cores on BM/N/PIN, against the framework's own loop and
against what the CPU allows.

Per app and tool (the default study's settings, config/config.yaml; ``--reps`` counted repetitions
after one warm-up per launch, every job through the real runner and harness):

- E2E at 1 and N pinned cores (mlperf: LoadGen Offline, reading and pre-processing included;
  dlbs: the timed model-only batches) as samples/s, and for mlperf the inference stage alone
  (samples / its busy time);
- the framework's raw loop at 1 and N cores, in a fresh process pinned to the CPUs the harness got:
  the same model and batch size on the same samples pre-processed into memory beforehand, with
  the framework's default threads (dlvirt sets none), so it uses every core it sees;
- the CPU-bound limit, granted cores / (Σ phase CPU-seconds per sample), and E2E's efficiency
  against it (= Σ phase CPU / (cores × E2E));
- the 1→N speed-up of E2E and of the raw loop, and their ratio.

    python benchmarks/scaling.py [--cores N] [--apps ic,nlp,sr,rs] [--tools mlperf,dlbs] [--reps 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dlvirt.apps import app_class  # noqa: E402
from dlvirt.core.records import JobResult  # noqa: E402
from dlvirt.run.runner import run_job  # noqa: E402
from dlvirt.system.hostinfo import node_identity  # noqa: E402

from jobs import fresh_raw_loop, job_spec, study_config  # noqa: E402 - benchmarks/jobs.py: the default study's settings


def measured(result: JobResult, cores: int) -> dict:
    """The fastest counted repetition (on a shared machine the one other processes slowed least;
    ``others_cpu_s`` says how much they took): E2E rate, inference-stage rate, Σ phase CPU per
    sample, the CPU-bound limit and E2E's efficiency against it."""
    best = min(result.runs, key=lambda r: r.e2e_s)
    cpu = sum(best.phases.get(k) or 0.0 for k in ("pre_cpu_s", "infer_cpu_s", "post_cpu_s"))
    return {"e2e_s": best.e2e_s, "rate": best.samples / best.e2e_s,
            "infer_rate": best.samples / best.phases["infer_s"] if best.phases.get("infer_s") else None,
            "limit": cores / (cpu / best.samples), "efficiency": cpu / (cores * best.e2e_s),
            "others": best.telemetry.get("others_cpu_s"), "cpus": best.observed["affinity"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--apps", default="ic,nlp,sr,rs")
    parser.add_argument("--tools", default="mlperf,dlbs")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--passes", type=int, default=2, help="timed passes of the raw loop")
    args = parser.parse_args()
    config = study_config()
    levels = sorted({1, args.cores})
    rows: list[tuple[str, str, dict[int, dict], dict[int, dict]]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dlvirt-scaling-") as tmp:
        for app in args.apps.split(","):
            settings = config["apps"][app]
            dataset = Path(tmp) / "datasets" / app
            app_class(app).prepare_dataset(dataset, settings)
            raw: dict[int, dict] = {}
            for tool in args.tools.split(","):
                e2e: dict[int, dict] = {}
                for cores in levels:
                    spec = job_spec(app, settings, dataset, f"BM/{cores}/PIN/CPU", args.reps, tool=tool,
                                    dlbs=config["dlbs"])
                    out = Path(tmp) / f"{tool}-{app}-{cores}"
                    e2e[cores] = measured(run_job(spec, out / "run.json", out / "loadgen"), cores)
                    if cores not in raw:  # on the CPUs the harness got
                        raw[cores] = fresh_raw_loop(app, settings, dataset, e2e[cores]["cpus"], args.passes)
                rows.append((app, tool, e2e, raw))
    node = node_identity()
    low, high = levels[0], levels[-1]
    print(f"BM/N/PIN/CPU, N = {low} and {high}; {node['cpu_model']} ({node['logical_cpus_online']} CPUs); "
          f"{datetime.now(UTC):%Y-%m-%d}; default study's workloads, 1 warm-up + {args.reps} reps per launch, "
          f"raw loop {args.passes} passes after 1; {time.perf_counter() - started:.0f} s")
    print("rates in samples/s; limit = cores / (phase CPU-s per sample); eff = E2E rate / limit; "
          "speed-up = rate at N / rate at 1; oth = CPU-s other processes took during the repetition")
    print(f"{'app':4s} {'tool':6s} {'E2E 1':>7s} {'E2E N':>7s} {'inf 1':>7s} {'inf N':>7s} {'raw 1':>7s} "
          f"{'raw N':>7s} {'lim 1':>7s} {'lim N':>7s} {'eff 1':>6s} {'eff N':>6s} {'E2E x':>6s} {'raw x':>6s} "
          f"{'ratio':>6s} {'oth 1':>5s} {'oth N':>5s}")
    for app, tool, e2e, raw in rows:
        speed, raw_speed = e2e[high]["rate"] / e2e[low]["rate"], raw[high]["best"] / raw[low]["best"]
        inf = [f"{e2e[c]['infer_rate']:7.2f}" if tool == "mlperf" else f"{'-':>7s}" for c in (low, high)]
        print(f"{app:4s} {tool:6s} {e2e[low]['rate']:7.2f} {e2e[high]['rate']:7.2f} {inf[0]} {inf[1]} "
              f"{raw[low]['best']:7.2f} {raw[high]['best']:7.2f} {e2e[low]['limit']:7.2f} {e2e[high]['limit']:7.2f} "
              f"{e2e[low]['efficiency']:6.2f} {e2e[high]['efficiency']:6.2f} {speed:6.2f} {raw_speed:6.2f} "
              f"{speed / raw_speed:6.2f} {e2e[low]['others']:5.1f} {e2e[high]['others']:5.1f}")
    print("raw loop threads (framework default): "
          + ", ".join(f"{app} {c}c {raw[c]['intra_op']}" for app, tool, _, raw in rows if tool == rows[0][1]
                      for c in (low, high)))


if __name__ == "__main__":
    main()
