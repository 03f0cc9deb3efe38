#!/usr/bin/env python
"""BM/N/PIN/GPU against BM/N/PIN/CPU for every app, side by side, on the same machine.

Each app runs through the real runner, harness and LoadGen Offline (``dlvirt.run.runner.run_job``),
first on the CPU, then on the GPU, with reduced workloads so the whole comparison takes minutes.
A GPU run counts only after the job verified it (weights on the GPU, utilisation sampled above
0 %: ``dlvirt.system.gpu``); otherwise the job fails and this script says why. SR has no GPU
scenario (MLPerf's RNN-T reference is CPU-only): its CPU row is printed alone. IC runs through the
PyTorch backend unless ``--ic-framework tensorflow`` (a GPU machine may have no TensorFlow).

Needs a GPU machine with the GPU stack (envs/requirements-gpu.txt, or at least torch with CUDA,
transformers, mlcommons-loadgen, pyyaml). Run on an NVIDIA H200 on 2026-12-04: README, "Measured here".

    python benchmarks/gpu_vs_cpu.py [--cores 8] [--reps 3] [--launches 2] [--apps ic,sr,nlp,rs] [--tool mlperf]
        [--ic-framework pytorch] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from dlvirt.analysis.aggregate import summarise_launches
from dlvirt.apps import app_class
from dlvirt.run.runner import run_job
from dlvirt.system.hostinfo import node_identity

from jobs import job_spec  # benchmarks/jobs.py: the spec every benchmark script builds

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
# Reduced workloads (the real architectures: BERT-large, ResNet50, RNN-T, DLRM), seconds per repetition.
REDUCED = {
    "ic": {"batch_size": 32, "dataset": {"count": 256}, "loadgen": {"min_query_count": 256}},
    "sr": {"batch_size": 1, "dataset": {"count": 4, "seconds": 15}, "loadgen": {"min_query_count": 4}},
    "nlp": {"batch_size": 4, "dataset": {"count": 12}, "loadgen": {"min_query_count": 12}},
    "rs": {"batch_size": 8, "dataset": {"count": 400}, "loadgen": {"min_query_count": 400}},
}


def defaults(node: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """The values the schema fills in below ``node`` (as snakemake.utils.validate does)."""
    if "$ref" in node:
        node = {**schema["$defs"][node["$ref"].split("/")[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
    value = copy.deepcopy(node.get("default"))
    if isinstance(value, dict):
        for key, sub in node.get("properties", {}).items():
            resolved = schema["$defs"][sub["$ref"].split("/")[-1]] if "$ref" in sub else sub
            if key not in value and ("default" in sub or "default" in resolved):
                value[key] = defaults(sub, schema)
    return value


def merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def app_settings(app: str, ic_framework: str) -> dict[str, Any]:
    schema = yaml.safe_load(SCHEMA.read_text())
    settings = merged(defaults(schema["properties"]["apps"]["properties"][app], schema), REDUCED[app])
    if app == "ic":
        settings["framework"] = ic_framework
    return settings


def run(app: str, settings: dict[str, Any], dataset: Path, work: Path, cores: int, processor: str,
        reps: int, launches: int, tool: str) -> dict[str, Any]:
    """``launches`` launches (fresh processes) of one job; the launch is the statistical unit."""
    results = []
    for launch in range(launches):
        spec = job_spec(app, settings, dataset, f"BM/{cores}/PIN/{processor}", reps, tool=tool)
        out = work / f"{tool}-{app}-{processor}-{launch}"
        results.append(run_job(spec, out / "run.json", out / "loadgen"))
    return summarise_launches(results)


def spread(row: dict[str, Any]) -> str:
    """Mean ± the 95 % interval over launches, or ± the repetitions' SD where one launch ran (labelled:
    repetitions of one launch are no independent units)."""
    if row["ci_n"] >= 2:
        return f"{row['mean_s']:.3f} ± {row['ci95_s']:.3f}"
    return f"{row['mean_s']:.3f} (sd {row['std_s']:.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cores", type=int, default=min(8, len(os.sched_getaffinity(0))))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--launches", type=int, default=2, help="launches per row (the interval's n)")
    parser.add_argument("--apps", default="ic,sr,nlp,rs")
    parser.add_argument("--ic-framework", choices=["pytorch", "tensorflow"], default="pytorch")
    parser.add_argument("--tool", choices=["mlperf", "dlbs"], default="mlperf",
                        help="mlperf: E2E under LoadGen Offline; dlbs: model-only batches")
    parser.add_argument("--keep", type=Path, help="keep datasets, run records and LoadGen logs here")
    args = parser.parse_args()
    rows, failures, gpu_label = [], [], ""
    with contextlib.ExitStack() as stack:
        tmp = args.keep or stack.enter_context(tempfile.TemporaryDirectory(prefix="dlvirt-gpu-bench-"))
        for app in args.apps.split(","):
            cls = app_class(app)
            settings = app_settings(app, args.ic_framework)
            dataset = Path(tmp) / "datasets" / app
            cls.prepare_dataset(dataset, settings)
            cpu = run(app, settings, dataset, Path(tmp), args.cores, "CPU", args.reps, args.launches, args.tool)
            gpu = None
            if "GPU" in cls.kind.processors:
                try:
                    gpu = run(app, settings, dataset, Path(tmp), args.cores, "GPU", args.reps, args.launches, args.tool)
                except Exception as err:  # noqa: BLE001 - a failed GPU job is reported, the others still run
                    failures.append(f"{app.upper()} GPU: {err}")
            rows.append((app, settings.get("framework", cls.kind.framework), cpu, gpu, cls.kind.why_no_gpu))
            print(f"[gpu_vs_cpu] {app}: CPU {spread(cpu)} s, GPU {spread(gpu) + ' s' if gpu else '-'}", flush=True)
            if gpu is not None and gpu["gpu"]:
                gpu_label = str(gpu["gpu"])
    node = node_identity()
    print(f"BM/{args.cores}/PIN: CPU {node['cpu_model']} ({node['logical_cpus_online']} CPUs), "
          f"GPU {gpu_label or 'none verified'}; {args.launches} launches x {args.reps} reps after 1 warm-up, "
          f"{'E2E under LoadGen Offline' if args.tool == 'mlperf' else 'model-only (DLBS)'}; "
          "mean ± 95 % interval over launches (sd: one launch's repetitions)")
    measure = "E2E" if args.tool == "mlperf" else "model"
    print(f"{'app':4s} {'framework':10s} {'CPU ' + measure + ' s':>18s} {'GPU ' + measure + ' s':>18s} {'CPU/GPU':>8s} "
          f"{'GPU util %':>10s} {'GPU MiB':>8s}")
    for app, framework, cpu, gpu, why in rows:
        if gpu is None:
            print(f"{app:4s} {framework:10s} {spread(cpu):>18s} {'-':>18s}   no GPU run{': ' + why if why else ''}")
            continue
        print(f"{app:4s} {framework:10s} {spread(cpu):>18s} {spread(gpu):>18s} "
              f"{cpu['mean_s'] / gpu['mean_s']:8.2f} {gpu['gpu_util_pct'] or float('nan'):10.1f} "
              f"{gpu['gpu_mem_mib'] or float('nan'):8.0f}")
    for line in failures:
        print(f"failed: {line}")


if __name__ == "__main__":
    main()
