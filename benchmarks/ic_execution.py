#!/usr/bin/env python
"""How IC's Keras ResNet50 runs fastest on this CPU: the ways TensorFlow offers, side by side.

- ``frozen graph, session`` (what the app runs on CPU, ``KerasResNet50``): the variables frozen into
  constants and the GraphDef run in a session, as MLPerf's reference runs resnet50-tf; the graph
  optimiser folds batch-norm into the convolutions;
- ``frozen graph, tf.function``: the same GraphDef imported into a tf.function, run by the eager
  runtime (its graph optimiser folds the same constants);
- ``tf.function over variables``: the model traced over its variables (the app's GPU path);
- ``XLA over variables``: the same tf.function compiled by XLA (``jit_compile=True``).

One process pinned to the first ``--cores`` CPUs of its affinity, TensorFlow's default threads (one
intra-op thread per CPU there), one model; each way runs once untimed (its freezing, constant folding
or compiling, printed as set-up; the tf.function over variables is traced before, to freeze it for
the tf.function of the frozen graph, so its set-up is its first run alone), then ``--rounds``
rounds of ``--batches`` timed batches of random inputs, the ways taking turns going first from
round to round, so that drift of a shared machine reaches all alike. Printed per way: the median
over rounds of samples/s, its ratio to the frozen graph's, its set-up seconds and its largest
difference from the tf.function's probabilities.

    python benchmarks/ic_execution.py [--cores 2] [--batch 16] [--batches 3] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))[:args.cores]
    os.sched_setaffinity(0, cpus)  # before TensorFlow sizes its pools from the affinity

    from dlvirt.apps.base import ThreadPlan
    from dlvirt.apps.ic import FROZEN_INPUT, IMAGE_SIZE, KerasResNet50, frozen_graph
    from dlvirt.system.hostinfo import node_identity

    KerasResNet50.import_framework()
    import tensorflow as tf

    plan = ThreadPlan(policy="framework-default", cores=len(cpus), intra_op=None, inter_op=None, pre_workers=1,
                      sharing="unmanaged")
    backend = KerasResNet50(plan, "CPU", seed=0, weights=None)
    xla = tf.function(lambda x: backend.model(x, training=False), input_signature=backend.forward.input_signature,
                      jit_compile=True)
    graph_def, output = frozen_graph(backend.forward)
    imported = tf.function(lambda x: tf.graph_util.import_graph_def(
        graph_def, input_map={f"{FROZEN_INPUT}:0": x}, return_elements=[output], name="")[0],
        input_signature=backend.forward.input_signature)
    batch = np.random.default_rng(0).normal(0, 60, size=(args.batch, IMAGE_SIZE, IMAGE_SIZE, 3)).astype(np.float32)
    ways: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "frozen graph, session": backend,
        "frozen graph, tf.function": lambda b: imported(tf.constant(b)).numpy(),
        "tf.function over variables": lambda b: backend.forward(tf.constant(b)).numpy(),
        "XLA over variables": lambda b: xla(tf.constant(b)).numpy(),
    }
    set_up = {}
    for name, run in ways.items():
        start = time.perf_counter()
        run(batch[:1])
        set_up[name] = time.perf_counter() - start
    reference = ways["tf.function over variables"](batch)
    differs = {name: float(np.abs(run(batch) - reference).max()) for name, run in ways.items()}
    rates: dict[str, list[float]] = {name: [] for name in ways}
    names = list(ways)
    for round_ in range(args.rounds):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            start = time.perf_counter()
            for _ in range(args.batches):
                ways[name](batch)
            rates[name].append(args.batch * args.batches / (time.perf_counter() - start))
    base = statistics.median(rates["frozen graph, session"])
    print(f"IC Keras ResNet50 (random weights), batch {args.batch}, CPUs {cpus}, {args.rounds} rounds x "
          f"{args.batches} batches; TensorFlow {tf.__version__}; {node_identity()['cpu_model']}, "
          f"{datetime.now(UTC):%Y-%m-%d}")
    print(f"{'way':28s} {'samples/s':>9s} {'/ frozen':>8s} {'set-up s':>8s} {'max |diff|':>10s}  per round")
    for name in ways:
        median = statistics.median(rates[name])
        print(f"{name:28s} {median:9.2f} {median / base:8.3f} {set_up[name]:8.2f} {differs[name]:10.2e}  "
              f"{[round(r, 2) for r in rates[name]]}")


if __name__ == "__main__":
    main()
