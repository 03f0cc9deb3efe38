"""NOOP, the null app: a plumbing check, not a DL application. A linear classifier in NumPy on feature vectors
read from a CSV file, milliseconds per repetition, through everything a real app goes through: the
dataset and weights rules, the platform, the LoadGen harness (real LoadGen), the summary, tables and
figures. No framework to import, no model to build: what it measures is dlvirt's own cost.

Its dataset is a real file in a simple real format: ``samples.csv``, a header ``label,f0,...,fN``
and one sample per line (a class label and its features). A real dataset (``apps.noop.dataset.path``)
is such a file, or a folder holding one. Its weights are a NumPy ``.npz`` archive of ``W``
(features x classes) and ``b`` (classes). It is registered like the apps, but no study runs it
unless its config asks (``study.apps: [noop]``; not ``null``, which YAML
reads as no value); Table 1 and the plan's gaps leave it out otherwise.

Threads: a granted plan's ``intra_op`` threads each compute one slice of a batch (NumPy's matrix
product releases the GIL), the app's own pool; ``inter_op`` is 1.
"""

from __future__ import annotations

import csv
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from dlvirt.apps.base import App, AppError, checked_weights
from dlvirt.core.atomic import write_text_atomic
from dlvirt.core.kinds import AppKind

SAMPLES = "samples.csv"
FEATURES = 64
CLASSES = 10
POOL_THREAD = "noop-intra"


def read_samples(path: Path, limit: int | None = None) -> tuple[np.ndarray, list[int]]:
    """The labels and each line's byte offset, checked: every line has the header's field count,
    an integer label and numbers after it."""
    offsets: list[int] = []
    labels: list[int] = []
    with open(path, "rb") as handle:
        header = handle.readline().decode().strip().split(",")
        if len(header) < 2 or header[0] != "label" or header[1:] != [f"f{i}" for i in range(len(header) - 1)]:
            raise AppError(f"{path}: not a samples CSV (its header must be label,f0,f1,...)")
        fields = len(header)
        while limit is None or len(labels) < limit:
            offset = handle.tell()
            line = handle.readline()
            if not line:
                break
            if not line.strip():
                continue
            parts = line.decode().strip().split(",")
            number = len(labels) + 2  # the header is line 1
            if len(parts) != fields:
                raise AppError(f"{path}:{number}: {len(parts)} fields, the header has {fields}")
            try:
                labels.append(int(parts[0]))
                np.asarray(parts[1:], dtype=np.float32)
            except ValueError as err:
                raise AppError(f"{path}:{number}: {err}") from err
            offsets.append(offset)
    if not labels:
        raise AppError(f"{path}: no samples")
    return np.asarray(labels, dtype=np.int64), offsets


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


class NoopApp(App):
    kind = AppKind(name="noop", title="Plumbing check (null app)", model="linear classifier (NumPy)",
                   framework="numpy", dataset="feature vectors in a CSV file", order=99, processors=("CPU",),
                   why_no_gpu="NumPy computes on the CPU", check=True)
    dataset_index = SAMPLES
    dataset_may_be_file = True

    @classmethod
    def generate_dataset(cls, out_dir: Path, settings: dict[str, Any]) -> dict[str, Any]:
        dataset = settings["dataset"]
        rng = np.random.default_rng(dataset["seed"])
        features = int(dataset.get("features", FEATURES))
        centres = rng.normal(0, 1, size=(CLASSES, features))  # classes a linear model can tell apart
        lines = ["label," + ",".join(f"f{i}" for i in range(features))]
        for _ in range(dataset["count"]):
            label = int(rng.integers(0, CLASSES))
            vector = centres[label] + rng.normal(0, 0.5, size=features)
            lines.append(f"{label}," + ",".join(f"{v:.6f}" for v in vector))
        write_text_atomic(out_dir / SAMPLES, "\n".join(lines) + "\n")
        return {"count": dataset["count"], "format": "CSV", "features": features,
                "bytes": (out_dir / SAMPLES).stat().st_size}

    @classmethod
    def check_real_dataset(cls, root: Path, settings: dict[str, Any]) -> dict[str, Any]:
        path = root if root.is_file() else root / SAMPLES
        if not path.is_file():
            raise AppError(f"apps.noop.dataset.path {root}: no {SAMPLES}")
        try:
            labels, _ = read_samples(path)
        except AppError as err:
            raise AppError(f"apps.noop.dataset.path: {err}") from err
        return {"count": len(labels), "format": "CSV", "file": str(path)}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        root = self.data_root
        self.samples_path = root if root.is_file() else root / SAMPLES
        limit = self.settings["dataset"].get("count") if self.dataset_info["source"] == "real" else None
        self.labels, self.offsets = read_samples(self.samples_path, limit)
        with open(self.samples_path) as handle:
            self.features = len(next(csv.reader(handle))) - 1
        self.pool: ThreadPoolExecutor | None = None
        self.pool_size = 1

    def sample_count(self) -> int:
        return len(self.labels)

    def import_framework(self) -> None:
        """NumPy is imported already: there is no framework to start."""

    weights_file_names = ("model.npz",)

    @classmethod
    def weights_file_name(cls, settings: dict[str, Any]) -> str:
        return cls.weights_file_names[0]

    def load_model(self) -> None:
        self.weights_path = checked_weights(self.settings)
        source = self.weights_path or self.cached_weights
        if source is not None:
            with np.load(source) as archive:
                if "W" not in archive or "b" not in archive:
                    raise AppError(f"apps.noop weights {source}: an .npz of W and b is needed")
                self.W, self.b = archive["W"].astype(np.float32), archive["b"].astype(np.float32)
            if self.W.shape != (self.features, CLASSES) or self.b.shape != (CLASSES,):
                raise AppError(f"apps.noop weights {source}: W {self.W.shape}, b {self.b.shape}; this dataset "
                               f"needs W ({self.features}, {CLASSES}) and b ({CLASSES},)")
        else:
            rng = np.random.default_rng(int(self.settings.get("seed", 0)))
            self.W = rng.normal(0, 1 / np.sqrt(self.features), size=(self.features, CLASSES)).astype(np.float32)
            self.b = np.zeros(CLASSES, dtype=np.float32)
        # the granted plan's intra-op threads: each computes one slice of a batch
        self.pool_size = self.threads.intra_op or 1
        if self.pool_size > 1:
            self.pool = ThreadPoolExecutor(self.pool_size, thread_name_prefix=POOL_THREAD)

    def save_weights(self, path: Path) -> None:
        partial = path.with_name(f".partial-{path.name}")
        with open(partial, "wb") as handle:
            np.savez(handle, W=self.W, b=self.b)
        partial.replace(path)

    def first_call(self) -> None:
        """Nothing to prepare: NumPy runs eagerly."""

    def preprocess(self, index: int) -> np.ndarray:
        with open(self.samples_path, "rb") as handle:
            handle.seek(self.offsets[index])
            line = handle.readline()
        return np.asarray(line.decode().strip().split(",")[1:], dtype=np.float32)

    def infer(self, batch: list[np.ndarray] | np.ndarray) -> np.ndarray:
        inputs = batch if isinstance(batch, np.ndarray) else np.stack(batch)
        if self.pool is None or len(inputs) < 2:
            return softmax(inputs @ self.W + self.b)
        slices = np.array_split(inputs, min(self.pool_size, len(inputs)))
        return np.concatenate(list(self.pool.map(lambda part: softmax(part @ self.W + self.b), slices)))

    def synthetic_batch(self, batch_size: int) -> np.ndarray:
        return np.random.default_rng(0).normal(0, 1, size=(batch_size, self.features)).astype(np.float32)

    def begin_repetition(self, out_dir: Path) -> None:
        super().begin_repetition(out_dir)
        self.predictions: list[str] = []
        self.hits = 0

    def postprocess(self, indices: list[int], outputs: np.ndarray) -> list[bytes]:
        best = outputs.argmax(axis=1)
        answers = []
        for index, label in zip(indices, best, strict=True):
            self.hits += int(label == self.labels[index])
            self.predictions.append(f"{index} {int(label)}\n")
            answers.append(np.int32(label).tobytes())
        return answers

    def end_repetition(self) -> dict[str, Any]:
        write_text_atomic(self.out_dir / "predictions.txt", "".join(self.predictions))
        scored = len(self.predictions)
        return {"top1": self.hits / max(scored, 1), "scored": scored}

    def model_provenance(self) -> dict[str, Any]:
        return {**super().model_provenance(), "architecture": f"softmax(x W + b), {self.features} -> {CLASSES}",
                "note": "a plumbing check: dlvirt's own cost, no DL framework"}

    def framework_threads(self) -> dict[str, Any]:
        return {"intra_op": self.pool_size, "inter_op": 1,
                "intra_op_source": "the app's own pool: one slice of a batch per thread"}

    def framework_versions(self) -> dict[str, str]:
        return {"numpy": np.__version__}
