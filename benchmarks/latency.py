#!/usr/bin/env python
"""Tail latency on BM/1 under LoadGen SingleStream: p50 and p99 per thread plan and CPU mode, with
the CFS throttled share beside them.

One run through the real runner, harness and LoadGen (run tool ``mlperf-SingleStream``: one query
of one sample at a time, the next once the last completed): IC and NLP with the default study's
settings but ``--queries`` queries per repetition, on ``BM/1/VNL`` (a cgroup CFS quota of one core,
every host core visible: Docker's ``--cpus=1`` mechanism) and ``BM/1/PIN`` (one core by affinity, no
quota), each with ``harness.threads`` ``granted`` (one intra-op thread: what the quota grants) and
``framework-default`` (the framework's own thread count: one per *visible* core). Per
configuration: LoadGen's p50 and p99 (the median over the repetitions of each repetition's
percentile, ms), p99/p50, the achieved queries/s, the share of CFS periods throttled (VNL only:
PIN has no quota), the intra-op threads the framework ran and whether LoadGen's early stopping was
met. Configurations alternate round after round, so a shared machine's drift reaches all alike.

    python benchmarks/latency.py [--apps ic,nlp] [--queries ic=64,nlp=16] [--nlp-architecture bert-large]
                                 [--reps 2] [--rounds 1]
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
from dlvirt.core.loadgen import SINGLE_STREAM, run_tool
from dlvirt.run.runner import run_job
from dlvirt.system.hostinfo import node_identity

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs import job_spec, study_config  # noqa: E402 - the default study's settings, as the other benchmarks

CONFIGS = [(pinning, threads) for pinning in ("VNL", "PIN") for threads in ("granted", "framework-default")]


def row(records: list[dict[str, Any]]) -> dict[str, Any]:
    latency = [r["loadgen"]["latency_ns"] for r in records]
    periods = sum(r["telemetry"]["nr_periods"] or 0 for r in records)
    p50 = statistics.median(v["p50"] for v in latency) / 1e6
    p99 = statistics.median(v["p99"] for v in latency) / 1e6
    return {"p50": p50, "p99": p99, "tail": p99 / p50,
            "qps": statistics.median(r["loadgen"]["achieved_qps"] for r in records),
            "throttled": 100 * sum(r["telemetry"]["nr_throttled"] or 0 for r in records) / periods if periods else None,
            "intra_op": records[0]["threads"]["framework"]["intra_op"],
            "early": all(r["loadgen"]["early_stopping_met"] for r in records)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--apps", default="ic,nlp")
    parser.add_argument("--queries", default="ic=64,nlp=16",
                        help="queries per repetition per app (LoadGen min_query_count), app=N,...")
    parser.add_argument("--nlp-architecture", default=None,
                        help="NLP's BERT size (default: the study's, bert-large); a smaller one is said so")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    config = study_config()
    if args.nlp_architecture:
        config["apps"]["nlp"]["architecture"] = args.nlp_architecture
    queries = {app: int(n) for app, n in (item.split("=") for item in args.queries.split(","))}
    tool = run_tool("mlperf", SINGLE_STREAM)
    runs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="dlvirt-bench-") as tmp:
        datasets, settings = {}, {}
        for app in args.apps.split(","):
            datasets[app] = Path(tmp) / app
            app_class(app).prepare_dataset(datasets[app], config["apps"][app])
            settings[app] = {**config["apps"][app], "loadgen": {**config["apps"][app]["loadgen"],
                                                                "min_query_count": queries.get(app, 64)}}
        for _ in range(args.rounds):
            for app, dataset in datasets.items():
                for pinning, threads in CONFIGS:
                    spec = job_spec(app, settings[app], dataset, f"BM/1/{pinning}/CPU", args.reps, threads=threads,
                                    tool=tool)
                    result = run_job(spec, Path(tmp) / "run.json", Path(tmp) / "loadgen")
                    runs.setdefault((app, pinning, threads), []).extend(r.to_dict() for r in result.runs)
    models = {app: settings[app].get("architecture") or settings[app].get("framework") or "" for app in datasets}
    print(f"BM/1, LoadGen SingleStream, {args.queries} queries x {args.reps} reps after a warm-up, {args.rounds} "
          f"round(s); {node_identity()['cpu_model']} ({platform.node()}), {datetime.now(UTC):%Y-%m-%d}")
    print(f"{'app':4s} {'mode':4s} {'threads':18s} {'p50 ms':>8s} {'p99 ms':>8s} {'p99/p50':>7s} {'q/s':>7s} "
          f"{'thr. %':>6s} {'intra':>5s} {'early stop':>10s}")
    for app in datasets:
        for pinning, threads in CONFIGS:
            found = row(runs[(app, pinning, threads)])
            throttled = f"{found['throttled']:6.1f}" if found["throttled"] is not None else f"{'-':>6s}"
            early = "met" if found["early"] else "not met"
            print(f"{app:4s} {pinning:4s} {threads:18s} {found['p50']:8.2f} {found['p99']:8.2f} {found['tail']:7.2f} "
                  f"{found['qps']:7.2f} {throttled} {found['intra_op']!s:>5s} {early:>10s}")
    print("models: " + ", ".join(f"{app} {name}" for app, name in models.items() if name))


if __name__ == "__main__":
    main()
