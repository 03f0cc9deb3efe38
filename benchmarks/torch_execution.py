#!/usr/bin/env python
"""How the PyTorch apps' models run fastest on this CPU: the ways PyTorch offers, side by side.

Per app (the default study's workload, config/config.yaml, on its generated dataset; IC with
``framework: pytorch``), the app's own ``infer`` over its own pre-processed batches, with the model
it calls run

- ``eager``: eager PyTorch under ``torch.inference_mode()`` (what NLP and SR run);
- ``TorchScript, frozen``: traced on the first batch, ``torch.jit.freeze``d (parameters folded
  into constants) and ``torch.jit.optimize_for_inference``d (oneDNN fusions of convolutions and
  linear layers; what RS and IC on PyTorch run on CPU: ``torch_runtime.FrozenOnCpu``), where a
  trace generalises over the app's batches (NLP, RS, IC; not SR, whose encoder pads by its input's
  length in Python);
- ``torch.compile``: TorchInductor (default mode; C++ kernels built with this host's compiler),
  shapes dynamic from the first (SR: the encoder, its two LSTM stacks; the greedy decoder's
  per-symbol steps stay eager).

One process pinned to the first ``--cores`` CPUs of its affinity, the harness's granted thread plan
(one intra-op thread per core), one model per app; each way runs its batches once untimed (its
tracing, freezing or compiling, printed as set-up), then ``--rounds`` rounds of one pass over the
app's batches per way, the ways taking turns going first from round to round, so that drift of a
shared machine reaches all alike. Printed per app and way: the median over rounds of samples/s,
its ratio to eager's, its set-up seconds and its largest difference from eager's outputs.

    python benchmarks/torch_execution.py [--apps nlp,sr,rs,ic] [--cores 2] [--rounds 5] [--samples N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dlvirt.apps import app_class  # noqa: E402

from jobs import study_config  # noqa: E402 - benchmarks/jobs.py: the default study's settings


class QuestionAnswering:
    """A traced BERT (tuple outputs) called as the app calls BertForQuestionAnswering (an object
    with start_logits and end_logits)."""

    def __init__(self, traced: Any) -> None:
        self.traced = traced

    def __call__(self, input_ids: Any, token_type_ids: Any, attention_mask: Any) -> Any:
        start, end = self.traced(input_ids, attention_mask, token_type_ids)
        return types.SimpleNamespace(start_logits=start, end_logits=end)


def frozen(module: Any, example: tuple[Any, ...]) -> Any:
    import torch

    with torch.inference_mode(False), torch.no_grad():
        traced = torch.jit.trace(module, example, check_trace=False, strict=False)
        return torch.jit.optimize_for_inference(torch.jit.freeze(traced.eval()))


def ways(app_name: str, app: Any, first: Any) -> dict[str, Callable[[], None]]:
    """Per way, a function that puts that way's model where ``app.infer`` calls it (NLP: the app's
    model; RS, IC: its runner, frozen by default; SR: its model's encoder)."""
    import torch

    from dlvirt.apps import squad

    if app_name == "ic":
        eager, owner, attribute = app.backend.model, app.backend, "runner"
    elif app_name == "sr":
        eager, owner, attribute = app.model, app.model, "encoder"
    else:
        eager, owner, attribute = app.model, app, "runner" if app_name == "rs" else "model"
    models: dict[str, Any] = {"eager": eager.encoder if app_name == "sr" else eager}
    if app_name == "nlp":
        inputs = {k: torch.from_numpy(v) for k, v in squad.concatenate(first).items()}

        class Tuple(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.bert = eager

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
                out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                                return_dict=False)
                return out[0], out[1]

        models["TorchScript, frozen"] = QuestionAnswering(frozen(Tuple().eval(), (
            inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])))
    elif app_name == "rs":
        from dlvirt.apps.rs import collate

        batch = collate(first)
        models["TorchScript, frozen"] = frozen(eager, (torch.as_tensor(batch.dense), torch.as_tensor(batch.sparse)))
    elif app_name == "ic":
        nchw = torch.from_numpy(np.ascontiguousarray(np.stack(first), dtype=np.float32)).permute(0, 3, 1, 2)
        models["TorchScript, frozen"] = frozen(eager, (nchw,))
    models["torch.compile"] = torch.compile(models["eager"], dynamic=True)
    return {name: (lambda model=model: setattr(owner, attribute, model)) for name, model in models.items()}


def outputs(result: Any) -> np.ndarray:
    """The numbers an app's ``infer`` returned, flat (NLP: logits; RS: CTRs; SR: symbols; IC: probabilities)."""
    if isinstance(result, np.ndarray):
        return result.ravel()
    found: list[np.ndarray] = []
    for item in result if isinstance(result, (list, tuple)) else [result]:
        if isinstance(item, np.ndarray):
            found.append(item.ravel().astype(np.float64))
        elif isinstance(item, (list, tuple)):
            found.append(outputs(item))
        elif hasattr(item, "labels"):  # SR's Decoded
            found.append(np.asarray(item.labels, dtype=np.float64))
    return np.concatenate(found) if found else np.zeros(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--apps", default="nlp,sr,rs,ic")
    parser.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=None,
                        help="each app's dataset.count instead of the default study's (NLP's is one question)")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))[:args.cores]
    os.sched_setaffinity(0, cpus)  # before PyTorch sizes its pools from the affinity

    from dlvirt.run.harness import plan_threads
    from dlvirt.system import observe
    from dlvirt.system.hostinfo import node_identity

    plan = plan_threads("granted", observe.observe())
    plan.apply()  # OpenMP's spin count and the allocator, before torch loads
    import torch

    config = study_config()
    print(f"PyTorch apps' execution, CPUs {cpus}, {args.rounds} rounds of one pass each; torch {torch.__version__}; "
          f"{node_identity()['cpu_model']}, {datetime.now(UTC):%Y-%m-%d}")
    print(f"{'app':4s} {'way':22s} {'samples/s':>9s} {'/ eager':>7s} {'set-up s':>8s} {'max |diff|':>10s}  per round")
    with tempfile.TemporaryDirectory(prefix="torch-execution-") as scratch:
        for app_name in args.apps.split(","):
            settings = dict(config["apps"][app_name])
            if app_name == "ic":
                settings["framework"] = "pytorch"
            if args.samples is not None:
                settings["dataset"] = {**settings["dataset"], "count": args.samples}
            dataset = Path(scratch) / app_name
            dataset.mkdir()
            cls = app_class(app_name)
            cls.prepare_dataset(dataset, settings)
            app = cls(settings, dataset, "CPU", plan)
            app.load_model()
            inputs = [app.preprocess(i) for i in range(app.sample_count())]
            size = settings["batch_size"]
            batches = [inputs[i:i + size] for i in range(0, len(inputs), size)]
            set_up: dict[str, float] = {}
            got: dict[str, list[np.ndarray]] = {}
            build_start = time.perf_counter()
            chosen = ways(app_name, app, batches[0])  # eager first: the others are held against its outputs
            build_s = time.perf_counter() - build_start
            for name, use in chosen.items():
                use()
                start = time.perf_counter()
                got[name] = [outputs(app.infer(b)) for b in batches]
                set_up[name] = time.perf_counter() - start + (build_s if name == "TorchScript, frozen" else 0.0)
            differs = {name: max(float(np.abs(g - e).max()) if g.shape == e.shape and g.size else float("nan")
                                 for g, e in zip(out, got["eager"], strict=True)) for name, out in got.items()}
            rates: dict[str, list[float]] = {name: [] for name in chosen}
            names = list(chosen)
            for round_ in range(args.rounds):
                for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                    chosen[name]()
                    start = time.perf_counter()
                    for batch in batches:
                        app.infer(batch)
                    rates[name].append(len(inputs) / (time.perf_counter() - start))
            base = statistics.median(rates["eager"])
            for name in names:
                median = statistics.median(rates[name])
                print(f"{app_name:4s} {name:22s} {median:9.3f} {median / base:7.3f} {set_up[name]:8.2f} "
                      f"{differs[name]:10.2e}  {[round(r, 3) for r in rates[name]]}", flush=True)
            del app, chosen


if __name__ == "__main__":
    main()
