#!/usr/bin/env python
"""Every app against MLPerf's reference implementation on the same machine, side by side.

Given a checkout of mlcommons/inference (``--inference DIR``; never vendored, never downloaded here;
Apache-2.0), each app's reference SUT runs Offline, performance only, as a subprocess on the CPUs
that dlvirt's BM/N/PIN/CPU launch of the same app got (``taskset``), on dlvirt's own model exported
into the reference's format (random weights, as a launch without a weights file builds them) and
dlvirt's own generated inputs, with the reference's own thread defaults for that many CPUs:

- **ic**: ``vision/classification_and_detection/python/main.py``, profile ``resnet50-tf``: its
  TensorFlow backend loads a frozen GraphDef, passes it through ``optimize_for_inference`` and runs
  it in a session; its dataset pre-processes every JPEG with OpenCV into a cache and loads them into
  memory before LoadGen starts. Given dlvirt's Keras ResNet50 frozen into the GraphDef the profile
  expects (input ``input_tensor:0``, output ``ArgMax:0``), the same JPEGs (with MLPerf's
  ``val_map.txt``), batch (``--max-batchsize``) and count; N worker, intra- and inter-op threads.
- **nlp**: ``language/bert/run.py --backend pytorch``: transformers' ``BertForQuestionAnswering``
  from the reference's ``bert_config.json`` (BERT-large), loaded from dlvirt's state dict
  (``ML_MODEL_FILE_WITH_PATH``), the same SQuAD file (``DATASET_FILE``) and vocab (``VOCAB_FILE``);
  its QSL featurises every question into 384-token windows beforehand (its
  ``create_squad_data``, which imports NVIDIA's ``tokenization`` from the
  ``DeepLearningExamples`` submodule: ``git submodule update --init language/bert/DeepLearningExamples``)
  and runs one window at a time under ``torch.no_grad``. Its sample is a window, dlvirt's a question:
  its rate is converted to questions/s (× questions / windows, the QSL's count in its detail log).
  dlvirt's launch computes a window only as far as the batch's longest window reaches (its
  default ``apps.nlp.padding: longest``); the reference computes all 384 positions.
- **sr**: ``retired_benchmarks/speech_recognition/rnnt/run.py --backend pytorch``: its RNN-T
  (``model_separable_rnnt``) loaded strictly from dlvirt's state dict (dlvirt's names are the
  reference checkpoint's), every WAV in memory beforehand (``AudioQSLInMemory``), its feature
  extractor and the encoder, prediction and joint networks frozen TorchScript, greedy decoding one
  utterance at a time. Random weights never emit blank, so greedy decoding runs to the 30-symbols cap
  at every step in both; dlvirt's launch is therefore given ``decoding: greedy`` here (its default,
  ``scheduled``, emits as many symbols as the transcript has characters), so both do the same work.
- **rs**: ``retired_benchmarks/recommendation/dlrm/pytorch/python/main.py``, profile
  ``dlrm-kaggle-pytorch``: ``DLRM_Net`` of facebookresearch/dlrm (``--dlrm DIR``, its
  ``DLRM_DIR``; the reference imports it and its Criteo dataset from there), the Kaggle
  configuration with its fixed, uncapped tables (so dlvirt's launch runs with
  ``max_rows_per_table: null`` here), loaded from dlvirt's state dict (the same parameter names),
  eagerly under ``torch.no_grad``, ``--threads N`` worker threads. Its dataset reads the processed
  Kaggle days (memory-mapped layout, test set = the first half of day 6), which dlvirt's own TSV
  lines are written into (``write_kaggle_days``: the same integers and the same hashed
  categoricals), every sample collated into memory before LoadGen starts; its samples are the same
  lines cut into groups of the same 100-700 bounds, so its rate is converted to dlvirt's samples
  (× dlvirt's samples / its samples over the same lines).

A reference whose modules this Python cannot import, or whose files the checkout lacks (or RS's
without ``--dlrm``), is replaced by a stand-in, and the script says which and why: the framework's
raw loop (``benchmarks/jobs.py: RawLoop``), which does what a reference harness does around the
model: every sample pre-processed into memory beforehand, then the app's own ``infer`` batch after
batch. Each reference's samples/s is LoadGen's (``mlperf_log_summary.txt``, every sample issued
once: ``performance_issue_unique``; a run whose worker logged a failure is refused, as those
harnesses then answer its samples empty): its inputs are ready in memory, so the timed path is
inference plus what the reference does per batch before answering: for IC an argmax, for RS a
per-line accuracy count in Python (about 0.9 s per 120,000 lines on one core here, a quarter of
its pass), which dlvirt's inference stage does not hold and its E2E does. dlvirt's side is a real
BM/N/PIN/CPU launch (the runner and LoadGen harness, one warm-up, then ``--reps`` counted
repetitions): its inference stage (samples / the stage's busy time) and its E2E (reading,
pre-processing and post-processing included; for RS, E2E / reference is the conservative ratio).
The two take turns going first from round to round; printed per app and core count, the median
over ``--rounds`` rounds, as one Markdown table, then each round's rates.

Workloads are the default study's (config/config.yaml); ``--samples N`` sets every app's sample
count instead (a functional check). The references' extra Python dependencies are not in the study's
lock: ``./setup.sh peers`` installs them into the study's venv from their own lock
(envs/requirements-peers.txt: OpenCV and pycocotools for IC, toml, librosa, unidecode and inflect for
SR, OpenCV and scikit-learn (librosa's) for RS; every package the study's stack has at its version).
NLP's NVIDIA ``file_utils`` imports boto3 and botocore's ``ClientError`` for S3 downloads it never
makes here; no botocore installs beside the study's python-dateutil 4, so where boto3 is missing
empty modules stand in for the two (``BERT_SHIM``). DLRM_Net's module imports TensorBoard's
``SummaryWriter`` for training logs; where tensorboard is missing an empty class stands in
(``DLRM_SHIM``).

    python benchmarks/peers.py --inference DIR [--dlrm DIR] [--apps ic,nlp,sr,rs] [--cores 1,all]
                               [--rounds 3] [--samples N] [--reps 1]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dlvirt.apps import app_class  # noqa: E402
from dlvirt.run.runner import run_job  # noqa: E402
from dlvirt.system.hostinfo import node_identity  # noqa: E402

from jobs import fresh_raw_loop, job_spec, study_config  # noqa: E402 - benchmarks/jobs.py

# what the vision and DLRM harnesses log when a batch raises; they then complete its samples empty,
# so LoadGen's rate would count work never done
WORKER_FAILED = "thread: failed"
SAMPLES_PER_S = re.compile(r"^Samples per second\s*:\s*([0-9.eE+-]+)", re.MULTILINE)
QSL_COUNT = re.compile(r'"key": "qsl_reported_total_count", "value": (\d+)')


def in_fresh_process(function: Any, *args: Any) -> Any:
    """``function(*args)`` in a spawned process (a framework sizes its pools once per process)."""
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


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


def export_state_dict(app: str, settings: dict[str, Any], dataset: str, path: str, extra: dict[str, list[int]],
                      under: str | None) -> None:
    """(In a fresh process.) The state dict of ``app``'s torch model as a launch without weights
    builds it, with ``extra`` zero tensors of those shapes added (keys the reference's loader deletes)
    and, if ``under`` is given, wrapped as ``{under: state}``, written to ``path``."""
    import torch

    from dlvirt.run.harness import plan_threads
    from dlvirt.system import observe

    model = app_class(app)(settings, Path(dataset), "CPU", plan_threads("framework-default", observe.observe()))
    model.load_model()
    state = {**model.model.state_dict(), **{key: torch.zeros(shape) for key, shape in extra.items()}}
    torch.save({under: state} if under else state, path)


@dataclass
class Reference:
    """How one app's MLPerf reference SUT runs here: where it lives in the checkout, what it imports
    beyond dlvirt's stack, its LoadGen model name (user.conf's keys)."""

    app: str
    harness: str          # its folder in the checkout
    script: str           # what it runs there
    modules: tuple[str, ...]
    model_name: str
    needs: tuple[str, ...] = ()  # files of the checkout it needs beside its script (submodules)
    shim: str = ""  # Python run before its script, in its process (its folder first on sys.path)

    def settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        """dlvirt's app settings for the comparison (the study's, unless the reference does other work)."""
        return settings

    def problem(self, inference: Path) -> str | None:
        """Why this reference cannot run here (None: it can)."""
        folder = inference / self.harness
        lacking = [name for name in (self.script, *self.needs) if not (folder / name).exists()]
        if lacking:
            return f"{folder} lacks {', '.join(lacking)}"
        probe = "import importlib.util as u, sys; print(' '.join(m for m in sys.argv[1:] if u.find_spec(m) is None))"
        found = subprocess.run([sys.executable, "-c", probe, *self.modules], capture_output=True, text=True,
                               check=True).stdout.split()
        return f"{sys.executable} cannot import {', '.join(found)} (./setup.sh peers)" if found else None

    def prepare(self, inference: Path, settings: dict[str, Any], dataset: Path, work: Path) -> None:
        """Export dlvirt's model into the reference's format under ``work``."""

    def command(self, inference: Path, settings: dict[str, Any], dataset: Path, work: Path,
                threads: int) -> tuple[list[str], Path, dict[str, str]]:
        """The reference's command line (after ``python``), its working folder and its extra environment."""
        raise NotImplementedError

    def per_sample(self, dataset: Path, reference_samples: int) -> float:
        """dlvirt's samples per reference sample (``reference_samples``: how many its QSL holds)."""
        return 1.0

    def rate(self, inference: Path, settings: dict[str, Any], dataset: Path, work: Path, cpus: list[int]) -> float:
        """One run of the reference (Offline, performance only, every sample once) on ``cpus``:
        LoadGen's samples/s in dlvirt's sample unit."""
        output = work / f"log-{len(cpus)}"
        output.mkdir(exist_ok=True)
        user_conf = work / "user.conf"
        user_conf.write_text("".join(f"{self.model_name}.Offline.{key} = {value}\n" for key, value in
                                     (("min_duration", 0), ("target_qps", 1), ("performance_sample_count_override", 0),
                                      ("performance_issue_unique", 1))))
        args, cwd, env = self.command(inference, settings, dataset, work, len(cpus))
        run_script = "import runpy, sys\nsys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')"
        script = ["-c", f"{self.shim}\n{run_script}", self.script] if self.shim else [self.script]
        command = ["taskset", "-c", ",".join(map(str, cpus)), sys.executable, *script, *args,
                   "--user_conf", str(user_conf)]
        done = subprocess.run(command, cwd=cwd, env={**os.environ, **env, "LOG_PATH": str(output)},
                              capture_output=True, text=True)
        summary, detail = output / "mlperf_log_summary.txt", output / "mlperf_log_detail.txt"
        if done.returncode != 0 or not summary.is_file():
            raise SystemExit(f"MLPerf's {self.app} reference failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        if WORKER_FAILED in done.stdout + done.stderr:  # it answered LoadGen anyway: its rate is no rate
            raise SystemExit(f"MLPerf's {self.app} reference: a worker failed ({WORKER_FAILED!r}), and its runner "
                             f"answered those samples empty:\n{done.stderr[-3000:]}")
        found, count = SAMPLES_PER_S.search(summary.read_text()), QSL_COUNT.search(detail.read_text())
        if not found or not count:
            raise SystemExit(f"{output}: no 'Samples per second' or qsl_reported_total_count")
        return float(found.group(1)) * self.per_sample(dataset, int(count.group(1)))


class VisionReference(Reference):
    def prepare(self, inference: Path, settings: dict[str, Any], dataset: Path, work: Path) -> None:
        in_fresh_process(export_frozen_graph, str(work / "resnet50_v1.pb"), int(settings["seed"]))

    def command(self, inference: Path, settings: dict[str, Any], dataset: Path, work: Path,
                threads: int) -> tuple[list[str], Path, dict[str, str]]:
        count, n = str(settings["dataset"]["count"]), str(threads)
        return (["--profile", "resnet50-tf", "--scenario", "Offline", "--model", str(work / "resnet50_v1.pb"),
                 "--dataset-path", str(dataset), "--cache_dir", str(work / "cache"), "--output",
                 str(work / f"log-{threads}"), "--max-batchsize", str(settings["batch_size"]), "--count", count,
                 "--threads", n],
                inference / self.harness, {"TF_INTRA_OP_PARALLELISM_THREADS": n, "TF_INTER_OP_PARALLELISM_THREADS": n})


class BertReference(Reference):
    def prepare(self, inference: Path, settings: dict[str, Any], dataset: Path, work: Path) -> None:
        in_fresh_process(export_state_dict, self.app, settings, str(dataset), str(work / "model.pytorch"), {}, None)
        # its working folder: the harness's files, and the feature cache (eval_features.pickle) it writes there
        (work / "bert").mkdir()
        for entry in (inference / self.harness).iterdir():
            (work / "bert" / entry.name).symlink_to(entry)

    def command(self, inference: Path, settings: dict[str, Any], dataset: Path, work: Path,
                threads: int) -> tuple[list[str], Path, dict[str, str]]:
        from dlvirt.apps.nlp import CORPUS_VOCAB
        from dlvirt.apps.squad import SQUAD_DEV_FILE

        return (["--backend", "pytorch", "--scenario", "Offline"], work / "bert",
                {"ML_MODEL_FILE_WITH_PATH": str(work / "model.pytorch"), "VOCAB_FILE": str(dataset / CORPUS_VOCAB),
                 "DATASET_FILE": str(dataset / SQUAD_DEV_FILE)})

    def per_sample(self, dataset: Path, reference_samples: int) -> float:
        from dlvirt.apps.squad import SQUAD_DEV_FILE, read_squad

        return len(read_squad(dataset / SQUAD_DEV_FILE)) / reference_samples  # questions per window


class RnntReference(Reference):
    def settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        return {**settings, "decoding": "greedy"}

    def prepare(self, inference: Path, settings: dict[str, Any], dataset: Path, work: Path) -> None:
        # the feature extractor's buffers, which the reference's checkpoint loader deletes
        buffers = {"audio_preprocessor.featurizer.fb": [1], "audio_preprocessor.featurizer.window": [1]}
        in_fresh_process(export_state_dict, self.app, settings, str(dataset), str(work / "rnnt.pt"), buffers,
                         "state_dict")

    def command(self, inference: Path, settings: dict[str, Any], dataset: Path, work: Path,
                threads: int) -> tuple[list[str], Path, dict[str, str]]:
        from dlvirt.apps.sr.librispeech import MANIFEST

        return (["--backend", "pytorch", "--scenario", "Offline", "--mlperf_conf",
                 str(inference / "loadgen" / "mlperf.conf"), "--pytorch_checkpoint", str(work / "rnnt.pt"),
                 "--dataset_dir", str(dataset), "--manifest", str(dataset / MANIFEST), "--log_dir",
                 str(work / f"log-{threads}")], inference / self.harness, {})


class DlrmReference(Reference):
    """MLPerf's DLRM reference, whose model (``DLRM_Net``) and Criteo dataset class live in a
    checkout of facebookresearch/dlrm (``dlrm``: its ``DLRM_DIR``)."""

    dlrm: Path | None = None
    samples = 0  # dlvirt's samples over the lines the reference reads (prepare)

    def settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        return {**settings, "max_rows_per_table": None}  # the Kaggle profile's tables, uncapped

    def problem(self, inference: Path) -> str | None:
        if self.dlrm is None:
            return NO_DLRM_CHECKOUT
        lacking = [name for name in DLRM_FILES if not (self.dlrm / name).is_file()]
        if lacking:
            return f"--dlrm {self.dlrm} lacks {', '.join(lacking)} (a checkout of facebookresearch/dlrm)"
        return super().problem(inference)

    def prepare(self, inference: Path, settings: dict[str, Any], dataset: Path, work: Path) -> None:
        in_fresh_process(export_state_dict, self.app, settings, str(dataset), str(work / "dlrm.pt"), {}, "state_dict")
        self.samples = write_kaggle_days(dataset, settings, work / "criteo")

    def command(self, inference: Path, settings: dict[str, Any], dataset: Path, work: Path,
                threads: int) -> tuple[list[str], Path, dict[str, str]]:
        lines = settings["dataset"]["lines_per_sample"]
        path = ":".join(filter(None, (str(self.dlrm), os.environ.get("PYTHONPATH"))))
        return (["--profile", "dlrm-kaggle-pytorch", "--scenario", "Offline", "--mlperf_conf",
                 str(inference / "loadgen" / "mlperf.conf"), "--model-path", str(work / "dlrm.pt"),
                 "--dataset-path", str(work / "criteo"), "--output", str(work / f"log-{threads}"),
                 "--max-batchsize", str(settings["batch_size"]), "--threads", str(threads),
                 "--samples-to-aggregate-min", str(lines["min"]), "--samples-to-aggregate-max", str(lines["max"]),
                 "--samples-to-aggregate-trace-file", str(work / "aggregation.txt")],
                inference / self.harness, {"DLRM_DIR": str(self.dlrm), "PYTHONPATH": path})

    def per_sample(self, dataset: Path, reference_samples: int) -> float:
        return self.samples / reference_samples  # both cut the same lines into samples


# What MLPerf's DLRM reference imports from facebookresearch/dlrm
DLRM_FILES = ("dlrm_s_pytorch.py", "dlrm_data_pytorch.py", "data_utils.py", "data_loader_terabyte.py")


def write_kaggle_days(dataset: Path, settings: dict[str, Any], out: Path) -> int:
    """dlvirt's Criteo TSV lines (those its samples hold) as the processed Kaggle days that MLPerf's
    DLRM reference reads (``dlrm_data_pytorch.CriteoDataset``, memory-mapped layout: its test set
    is the first half of day 6): day 6 holds the lines twice, the other days none; integers as
    written with negatives 0 (its ``log(x + 1)`` then gives dlvirt's dense features), categoricals
    hashed into the tables as dlvirt hashes them (its tables take them as they are). Returns how
    many dlvirt samples the lines make."""
    import numpy as np

    from dlvirt.apps.rs import Recommendation, parse_columns, sample_spans, table_modulus, table_rows

    tsv = Recommendation.tsv_file(dataset)
    spans = sample_spans(tsv, settings["dataset"])
    with open(tsv, "rb") as handle:
        values, categoricals = parse_columns(handle.read(spans[-1][1]), str(tsv))
    modulus = table_modulus(table_rows(settings.get("max_rows_per_table")))
    day = {"X_int": np.maximum(values[:, 1:], 0).astype(np.int32), "X_cat": (categoricals % modulus).astype(np.int32),
           "y": values[:, 0].astype(np.int32)}
    out.mkdir(parents=True, exist_ok=True)
    for number in range(6):
        np.savez(out / f"train_day_{number}_reordered.npz", **{k: v[:0] for k, v in day.items()})
    np.savez(out / "train_day_6_reordered.npz", **{k: np.concatenate([v, v]) for k, v in day.items()})
    np.savez(out / "train_day_count.npz", total_per_file=np.array([0] * 6 + [2 * len(values)]))
    np.savez(out / "train_fea_count.npz", counts=modulus.astype(np.int32))
    return len(spans)


# Run before the BERT reference's run.py, in its process: NVIDIA's file_utils imports boto3 and
# botocore's ClientError, which ./setup.sh peers cannot install (the module doc).
BERT_SHIM = """
import sys, types
try:
    import boto3
except ImportError:  # imported for S3 downloads the reference never makes here (the module doc)
    botocore = types.ModuleType("botocore")
    botocore.exceptions = types.ModuleType("botocore.exceptions")
    botocore.exceptions.ClientError = type("ClientError", (Exception,), {})
    sys.modules.update({"boto3": types.ModuleType("boto3"), "botocore": botocore,
                        "botocore.exceptions": botocore.exceptions})
"""
# Run before the RNN-T reference's run.py, in its process. (1) NumPy 2 removed np.sctypes, which its
# AudioSegment reads to scale integer samples: NumPy 1's integer types. (2) Its TorchScript decoder's
# first call takes the profiling executor's optimisation (56 s on one core here, then 2.5 s per 6 s
# utterance), which MLPerf's 2,513 utterances amortise and a few do not: two untimed utterances before
# LoadGen starts, as dlvirt's launch has its warm-up repetition.
RNNT_SHIM = """
import numpy as np, torch
np.sctypes = {"int": [np.int8, np.int16, np.int32, np.int64], "uint": [np.uint8, np.uint16, np.uint32, np.uint64],
              "float": [np.float16, np.float32, np.float64], "complex": [np.complex64, np.complex128]}
import pytorch_SUT
built = pytorch_SUT.PytorchSUT.__init__
def warmed(self, *args):
    built(self, *args)
    wave = self.qsl[0]
    with torch.no_grad():
        for _ in range(2):
            features, lengths = self.audio_preprocessor.forward((torch.from_numpy(wave[None]),
                                                                 torch.tensor([wave.shape[0]])))
            self.greedy_decoder.forward(features.permute(2, 0, 1), lengths)
pytorch_SUT.PytorchSUT.__init__ = warmed
"""
# Run before the DLRM reference's main.py, in its process: DLRM_Net's module imports TensorBoard's
# SummaryWriter for training logs it never writes here, and the study's stack has no tensorboard.
DLRM_SHIM = """
import sys, types
import torch
try:
    import torch.utils.tensorboard
except ImportError:  # imported for training logs the reference never writes (DLRM_SHIM)
    board = types.ModuleType("torch.utils.tensorboard")
    board.SummaryWriter = type("SummaryWriter", (), {})
    sys.modules["torch.utils.tensorboard"] = board
"""
REFERENCES: dict[str, Reference] = {
    "ic": VisionReference("ic", "vision/classification_and_detection/python", "main.py",
                          ("cv2", "pycocotools", "mlperf_loadgen", "tensorflow"), "resnet50"),
    "nlp": BertReference("nlp", "language/bert", "run.py",
                         ("absl", "six", "requests", "transformers", "mlperf_loadgen"), "bert",
                         needs=("DeepLearningExamples/PyTorch/LanguageModeling/BERT/tokenization.py",),
                         shim=BERT_SHIM),
    "sr": RnntReference("sr", "retired_benchmarks/speech_recognition/rnnt", "run.py",
                        ("toml", "librosa", "soundfile", "unidecode", "inflect", "tqdm", "mlperf_loadgen"), "rnnt",
                        shim=RNNT_SHIM),
    # LoadGen settings by "*": it names the model by its --model-path
    "rs": DlrmReference("rs", "retired_benchmarks/recommendation/dlrm/pytorch/python", "main.py",
                        ("cv2", "sklearn", "tqdm", "mlperf_loadgen"), "*", shim=DLRM_SHIM),
}
NO_DLRM_CHECKOUT = ("MLPerf's DLRM reference imports DLRM_Net and its Criteo dataset from facebookresearch/dlrm, "
                    "which mlcommons/inference does not hold, and no checkout of it was given (--dlrm DIR)")


def dlvirt_rates(app: str, settings: dict[str, Any], dataset: Path, work: Path, cores: int,
                 reps: int) -> tuple[float, float, list[int]]:
    """One BM/N/PIN/CPU launch: its inference-stage and E2E samples/s (means over the counted
    repetitions) and the CPUs it got."""
    result = run_job(job_spec(app, settings, dataset, f"BM/{cores}/PIN/CPU", reps), work / "run.json",
                     work / "loadgen")
    infer = statistics.mean(r.samples / r.phases["infer_s"] for r in result.runs)
    e2e = statistics.mean(r.samples / r.e2e_s for r in result.runs)
    return infer, e2e, result.runs[0].observed["affinity"]


def with_samples(settings: dict[str, Any], samples: int | None) -> dict[str, Any]:
    """``settings`` with ``samples`` generated samples, each issued once (None: as they are)."""
    settings = copy.deepcopy(settings)
    if samples is not None:
        settings["dataset"]["count"] = samples
        settings["loadgen"]["min_query_count"] = samples
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inference", type=Path, required=True, help="a checkout of mlcommons/inference")
    parser.add_argument("--dlrm", type=Path, default=os.environ.get("DLRM_DIR"),
                        help="a checkout of facebookresearch/dlrm, for RS's reference (default: $DLRM_DIR)")
    parser.add_argument("--apps", default="ic,nlp,sr,rs")
    parser.add_argument("--cores", default="1,all", help="core counts, 'all': every CPU of this process's affinity")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, help="every app's sample count (default: the study's)")
    parser.add_argument("--reps", type=int, default=1, help="dlvirt's counted repetitions per launch")
    args = parser.parse_args()
    if not (args.inference / "loadgen" / "mlperf.conf").is_file():
        raise SystemExit(f"--inference {args.inference}: no loadgen/mlperf.conf (a checkout of mlcommons/inference)")
    apps = args.apps.split(",")
    unknown = [app for app in apps if app not in REFERENCES]
    if unknown:
        raise SystemExit(f"--apps: no reference known for {', '.join(unknown)} (known: {', '.join(REFERENCES)})")
    every = len(os.sched_getaffinity(0))
    levels = [every if c == "all" else int(c) for c in args.cores.split(",")]
    study = study_config()["apps"]
    stand_ins: dict[str, str] = {}
    dlrm = REFERENCES["rs"]
    assert isinstance(dlrm, DlrmReference)
    dlrm.dlrm = args.dlrm
    for app in apps:
        why = REFERENCES[app].problem(args.inference)
        if why:
            stand_ins[app] = why
            print(f"{app}: {why}; the framework's raw loop stands in (samples in memory, the model batch after batch)")
    rows: dict[tuple[str, int], list[tuple[float, float, float]]] = {(a, n): [] for a in apps for n in levels}
    cpus: dict[tuple[str, int], list[int]] = {}
    with tempfile.TemporaryDirectory(prefix="dlvirt-peers-") as tmp:
        for app in apps:
            reference = None if app in stand_ins else REFERENCES[app]
            settings = with_samples(study[app], args.samples)
            if reference is not None:
                settings = reference.settings(settings)
            work = Path(tmp) / app
            dataset = work / "dataset"
            app_class(app).prepare_dataset(dataset, settings)
            if reference is not None:
                reference.prepare(args.inference, settings, dataset, work)

            def reference_rate(key: tuple[str, int], reference: Reference | None = reference,
                               settings: dict[str, Any] = settings, dataset: Path = dataset,
                               work: Path = work) -> float:
                if reference is None:
                    return float(fresh_raw_loop(key[0], settings, dataset, cpus[key], 1)["rate"])
                return reference.rate(args.inference, settings, dataset, work, cpus[key])

            for round_ in range(args.rounds):
                for cores in levels:
                    key = (app, cores)
                    # dlvirt goes first in the first round: the reference then takes the CPUs its launch got
                    if round_ % 2 == 0 or key not in cpus:
                        infer, e2e, cpus[key] = dlvirt_rates(app, settings, dataset, work, cores, args.reps)
                        theirs = reference_rate(key)
                    else:
                        theirs = reference_rate(key)
                        infer, e2e, _ = dlvirt_rates(app, settings, dataset, work, cores, args.reps)
                    rows[key].append((theirs, infer, e2e))
    workloads = "the default study's workloads" if args.samples is None else f"{args.samples} samples per app"
    print(f"MLPerf reference SUTs (Offline) vs dlvirt BM/N/PIN/CPU, {workloads}, "
          f"median of {args.rounds} interleaved rounds; samples/s in dlvirt's samples (IC images, NLP questions, "
          f"SR utterances, RS Criteo samples); {node_identity()['cpu_model']}, {every} CPUs, "
          f"{datetime.now(UTC):%Y-%m-%d}")
    print()
    print("| app | cores | reference samples/s | inference samples/s | E2E samples/s | inference / reference "
          "| E2E / reference |")
    print("|---|---|---|---|---|---|---|")
    for (app, cores), found in rows.items():
        theirs, infer, e2e = (statistics.median(x[i] for x in found) for i in range(3))
        inf_ratio = statistics.median(i / r for r, i, _ in found)
        e2e_ratio = statistics.median(e / r for r, _, e in found)
        label = f"{app} (stand-in)" if app in stand_ins else app
        print(f"| {label} | {cores} | {theirs:.2f} | {infer:.2f} | {e2e:.2f} | {inf_ratio:.3f} | {e2e_ratio:.3f} |")
    print()
    for (app, cores), found in rows.items():
        print(f"{app} {cores} core(s), CPUs {cpus[(app, cores)]}, per round (reference, inference, E2E samples/s): "
              f"{[tuple(round(v, 2) for v in x) for x in found]}")
    for app, why in stand_ins.items():
        print(f"{app}: stand-in, because {why}")


if __name__ == "__main__":
    main()
