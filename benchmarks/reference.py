#!/usr/bin/env python
"""IC against MLPerf's reference vision harness on the same machine, side by side.

MLPerf's reference (``vision/classification_and_detection/python/main.py`` of a checkout of
mlcommons/inference, given as ``--inference DIR``; never vendored, never downloaded here; Apache-2.0)
runs with profile ``resnet50-tf``, scenario Offline: its TensorFlow backend loads a frozen GraphDef,
passes it through ``optimize_for_inference`` and runs it in a session; its dataset pre-processes
every JPEG with OpenCV into a cache beforehand and loads them into memory before LoadGen starts,
so its samples/s (LoadGen's, ``mlperf_log_summary.txt``) is inference alone. It is given:

- the same model: dlvirt's IC model (Keras ResNet50, random weights, seed 0, as a launch without a
  weights file builds it), frozen into the GraphDef the profile expects (input ``input_tensor:0``,
  output ``ArgMax:0``: the top class, as the reference's post-processing takes it);
- the same JPEGs (dlvirt's generated ImageNet-style dataset, with MLPerf's ``val_map.txt``), the same
  batch (``--max-batchsize``) and sample count (``--count``: one Offline query of them all, and
  ``min_duration = 0`` in its user.conf, as dlvirt's launch sets LoadGen);
- the same CPUs: the ones dlvirt's BM/N/PIN launch got (``taskset``), with the reference's own
  defaults for an N-CPU host: N worker threads (``--threads``) and N intra- and inter-op threads
  (``TF_INTRA_OP_PARALLELISM_THREADS``, ``TF_INTER_OP_PARALLELISM_THREADS``).

dlvirt's side is a real BM/N/PIN/CPU launch (the runner and LoadGen harness, one warm-up, then
``--reps`` counted repetitions): its inference stage (samples / the stage's busy time, the figure
comparable to the reference's) and its E2E (reading and pre-processing included). The two take turns
going first from round to round; printed per core count, the median over ``--rounds`` rounds, as
one Markdown table, then each round's ratios.

The reference's extra Python dependencies (OpenCV, pycocotools: its dataset modules import them)
must be importable by this Python; the script names any that are missing.

    python benchmarks/reference.py --inference DIR [--cores 1,all] [--images 48] [--batch 16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dlvirt.apps.ic import ImageClassification  # noqa: E402
from dlvirt.run.runner import run_job  # noqa: E402
from dlvirt.system.hostinfo import node_identity  # noqa: E402

from jobs import job_spec, settings  # noqa: E402 - benchmarks/jobs.py

HARNESS = Path("vision/classification_and_detection/python")
REFERENCE_MODULES = ("cv2", "pycocotools", "mlperf_loadgen", "tensorflow")  # what its main.py needs here
PROFILE = "resnet50-tf"
MODEL_NAME = "resnet50"  # the profile's model name: the user.conf keys
SAMPLES_PER_S = re.compile(r"^Samples per second\s*:\s*([0-9.eE+-]+)", re.MULTILINE)


def export_frozen_graph(path: str, seed: int) -> None:
    """(In a fresh process.) dlvirt's IC model as a launch without weights builds it, frozen into a
    GraphDef with the reference profile's input and output names, written to ``path``."""
    from dlvirt.apps.base import ThreadPlan
    from dlvirt.apps.ic import FROZEN_INPUT, KerasResNet50, frozen_graph

    KerasResNet50.import_framework()
    import tensorflow as tf

    plan = ThreadPlan(policy="framework-default", cores=1, intra_op=None, inter_op=None, pre_workers=1,
                      sharing="unmanaged")
    backend = KerasResNet50(plan, "CPU", seed, weights=None)
    top_class = tf.function(lambda x: tf.argmax(backend.model(x, training=False), axis=1, name="ArgMax"),
                            input_signature=backend.forward.input_signature)
    graph_def, _ = frozen_graph(top_class)
    names = {node.name for node in graph_def.node}
    assert {FROZEN_INPUT, "ArgMax"} <= names, f"the frozen graph lacks {FROZEN_INPUT} or ArgMax"
    Path(path).write_bytes(graph_def.SerializeToString())


def missing_modules() -> list[str]:
    """The reference's modules this Python cannot import (checked in a child: TensorFlow loads there)."""
    probe = "import importlib.util as u, sys; print(' '.join(m for m in sys.argv[1:] if u.find_spec(m) is None))"
    found = subprocess.run([sys.executable, "-c", probe, *REFERENCE_MODULES], capture_output=True, text=True,
                           check=True)
    return found.stdout.split()


def reference_rate(inference: Path, model: Path, dataset: Path, work: Path, cpus: list[int], images: int,
                   batch: int) -> float:
    """One run of MLPerf's reference (Offline, performance only) on ``cpus``: LoadGen's samples/s."""
    output = work / f"reference-{len(cpus)}"
    user_conf = work / "user.conf"
    user_conf.write_text(f"{MODEL_NAME}.Offline.min_duration = 0\n{MODEL_NAME}.Offline.target_qps = 1\n")
    threads = str(len(cpus))
    env = {**os.environ, "TF_INTRA_OP_PARALLELISM_THREADS": threads, "TF_INTER_OP_PARALLELISM_THREADS": threads}
    command = ["taskset", "-c", ",".join(map(str, cpus)), sys.executable, "main.py", "--profile", PROFILE,
               "--scenario", "Offline", "--model", str(model), "--dataset-path", str(dataset),
               "--cache_dir", str(work / "cache"), "--output", str(output), "--user_conf", str(user_conf),
               "--max-batchsize", str(batch), "--count", str(images), "--threads", threads]
    done = subprocess.run(command, cwd=inference / HARNESS, env=env, capture_output=True, text=True)
    summary = output / "mlperf_log_summary.txt"
    if done.returncode != 0 or not summary.is_file():
        raise SystemExit(f"MLPerf's reference failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    found = SAMPLES_PER_S.search(summary.read_text())
    if not found:
        raise SystemExit(f"{summary}: no 'Samples per second' line")
    return float(found.group(1))


def dlvirt_rates(cfg: dict, dataset: Path, work: Path, cores: int, reps: int) -> tuple[float, float, list[int]]:
    """One BM/N/PIN/CPU launch: its inference-stage and E2E samples/s (means over the counted
    repetitions) and the CPUs it got."""
    spec = job_spec("ic", cfg, dataset, f"BM/{cores}/PIN/CPU", reps)
    result = run_job(spec, work / "run.json", work / "loadgen")
    infer = statistics.mean(r.samples / r.phases["infer_s"] for r in result.runs)
    e2e = statistics.mean(r.samples / r.e2e_s for r in result.runs)
    return infer, e2e, result.runs[0].observed["affinity"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inference", type=Path, required=True, help="a checkout of mlcommons/inference")
    parser.add_argument("--cores", default="1,all", help="core counts, 'all': every CPU of this process's affinity")
    parser.add_argument("--images", type=int, default=48)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=1, help="dlvirt's counted repetitions per launch")
    args = parser.parse_args()
    if not (args.inference / HARNESS / "main.py").is_file():
        raise SystemExit(f"--inference {args.inference}: no {HARNESS / 'main.py'} (a checkout of mlcommons/inference)")
    missing = missing_modules()
    if missing:
        raise SystemExit(f"MLPerf's reference needs {', '.join(missing)}, which {sys.executable} cannot import "
                         "(cv2: pip install opencv-python-headless; pycocotools: pip install pycocotools)")
    every = len(os.sched_getaffinity(0))
    levels = [every if c == "all" else int(c) for c in args.cores.split(",")]
    cfg = settings(args.images, args.batch)
    rows: dict[int, list[tuple[float, float, float]]] = {n: [] for n in levels}
    with tempfile.TemporaryDirectory(prefix="dlvirt-reference-") as tmp:
        work = Path(tmp)
        dataset = work / "ic"
        ImageClassification.prepare_dataset(dataset, cfg)
        model = work / "resnet50_v1.pb"
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            pool.submit(export_frozen_graph, str(model), int(cfg["seed"])).result()
        cpus: dict[int, list[int]] = {}
        for round_ in range(args.rounds):
            for cores in levels:
                # dlvirt goes first in the first round: the reference then takes the CPUs its launch got
                if round_ % 2 == 0 or cores not in cpus:
                    infer, e2e, cpus[cores] = dlvirt_rates(cfg, dataset, work, cores, args.reps)
                    reference = reference_rate(args.inference, model, dataset, work, cpus[cores], args.images,
                                               args.batch)
                else:
                    reference = reference_rate(args.inference, model, dataset, work, cpus[cores], args.images,
                                               args.batch)
                    infer, e2e, _ = dlvirt_rates(cfg, dataset, work, cores, args.reps)
                rows[cores].append((reference, infer, e2e))
    print(f"IC ResNet50 (Keras, random weights), {args.images} JPEGs, batch {args.batch}, median of "
          f"{args.rounds} interleaved rounds; MLPerf reference {PROFILE} Offline vs dlvirt BM/N/PIN/CPU; "
          f"{node_identity()['cpu_model']}, {every} CPUs, {datetime.now(UTC):%Y-%m-%d}")
    print()
    print("| app | cores | reference samples/s | inference samples/s | E2E samples/s | inference / reference "
          "| E2E / reference |")
    print("|---|---|---|---|---|---|---|")
    for cores, found in rows.items():
        reference, infer, e2e = (statistics.median(x[i] for x in found) for i in range(3))
        inf_ratio = statistics.median(i / r for r, i, _ in found)
        e2e_ratio = statistics.median(e / r for r, _, e in found)
        print(f"| ic | {cores} | {reference:.2f} | {infer:.2f} | {e2e:.2f} | {inf_ratio:.3f} | {e2e_ratio:.3f} |")
    print()
    for cores, found in rows.items():
        print(f"{cores} core(s), CPUs {cpus[cores]}, per round (reference, inference, E2E samples/s): "
              f"{[tuple(round(v, 2) for v in x) for x in found]}")


if __name__ == "__main__":
    main()
