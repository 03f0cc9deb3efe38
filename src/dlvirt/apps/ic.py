"""IC: image classification with ResNet50 on ImageNet-style JPEGs, in TensorFlow/Keras (the paper's)
or PyTorch (``apps.ic.framework``; MLPerf's reference offers both).

Pre-processing follows the MLPerf reference (``pre_process_vgg``): decode, RGB, aspect-preserving
resize so the short side is 256 (224 / 0.875) with area interpolation, 224×224 centre crop,
per-channel mean subtraction, NHWC float32. Both backends take that same NHWC batch (PyTorch's
transposes it to NCHW on its device) and return class probabilities, which the same top-5
post-processing scores. The app keeps the dataset and the pre- and post-processing; each framework
is a model backend (``dlvirt.apps.backend.ModelBackend``) in ``BACKENDS``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dlvirt.apps import torch_runtime
from dlvirt.apps.backend import ModelBackend
from dlvirt.apps.base import App, AppError, ThreadPlan, checked_weights
from dlvirt.core.kinds import AppKind
from dlvirt.system import observe
from dlvirt.system.hostinfo import package_versions

IMAGE_SIZE = 224
RESIZE_SHORT = 256  # MLPerf: 224 / 87.5 %
CHANNEL_MEANS = np.array([123.68, 116.78, 103.94], dtype=np.float32)
NUM_CLASSES = 1000
VAL_MAP = "val_map.txt"
FRAMEWORKS = ("tensorflow", "pytorch")
KERAS_OPTIONAL_IMPORTS = ("pandas", "matplotlib")  # Keras does without them (try: import ... except ImportError)


def read_val_map(root: Path) -> list[tuple[str, int]]:
    entries = []
    for n, line in enumerate((root / VAL_MAP).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise AppError(f"{root / VAL_MAP}:{n}: expected 'FILE LABEL', got {line!r}")
        entries.append((parts[0], int(parts[1])))
    return entries


def preprocess_image(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as source:
        rgb = source.convert("RGB")
    width, height = rgb.size
    if height > width:
        new_w, new_h = RESIZE_SHORT, round(RESIZE_SHORT * height / width)
    else:
        new_w, new_h = round(RESIZE_SHORT * width / height), RESIZE_SHORT
    resized = rgb.resize((new_w, new_h), Image.Resampling.BOX)
    left = (new_w - IMAGE_SIZE) // 2
    top = (new_h - IMAGE_SIZE) // 2
    array = np.asarray(resized.crop((left, top, left + IMAGE_SIZE, top + IMAGE_SIZE)), dtype=np.float32)
    return array - CHANNEL_MEANS


def synthetic_image(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """A photo-like image: smooth colour fields plus fine texture, so JPEG sizes resemble ImageNet's."""
    from PIL import Image

    coarse = rng.integers(0, 256, size=(max(2, height // 48), max(2, width // 48), 3), dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC), dtype=np.int16)
    texture = rng.normal(0, 18, size=(height, width, 3)).astype(np.int16)
    return np.clip(smooth + texture, 0, 255).astype(np.uint8)


@contextlib.contextmanager
def _random_initialisers_skipped() -> Iterator[None]:
    """Inside, Keras's random initialiser (VarianceScaling: ResNet50's Glorot kernels, its only one)
    gives zeros: a model built only to be overwritten by a weights file skips its random draws
    (~0.3 s of a ~1.9 s load here)."""
    import tensorflow as tf

    scaling = tf.keras.initializers.VarianceScaling
    draw = scaling.__call__
    scaling.__call__ = lambda self, shape, dtype=None: tf.zeros(shape, dtype=dtype)
    try:
        yield
    finally:
        scaling.__call__ = draw


def _keras_skipsets_kept() -> None:
    """Keras (3.15) means to compute, once per kind of object, the attributes its weights loader
    skips while walking a model, by building a throwaway object and listing it; it stores the set
    under ``saving_attr_skipset_<kind>`` but looks for ``saving_attr_skiplist_<kind>``, so it builds
    a throwaway Layer for every one of ResNet50's 178 layers (~0.1-0.3 s of ``load_weights`` here).
    Storing the same sets under the key it looks for keeps what it skips, and so what it loads,
    unchanged. Where Keras no longer has these internals, nothing is done."""
    try:
        from keras.src.backend.common import global_state
        from keras.src.saving import saving_lib
    except ImportError:
        return
    if not hasattr(saving_lib, "get_attr_skipset"):
        return
    for kind in ("Layer", "Functional", "Operation"):
        key = f"saving_attr_skiplist_{kind}"
        if global_state.get_global_attribute(key, None) is None:
            global_state.set_global_attribute(key, saving_lib.get_attr_skipset(kind))


FROZEN_INPUT = "input_tensor"  # the frozen graph's input, as MLPerf's resnet50-tf names it
FROZEN_NOTE = ("the model's variables frozen into constants (a GraphDef) and run in a TensorFlow session, "
               "as MLPerf's reference runs ResNet50: the graph optimiser folds batch-norm into the "
               "convolutions; frozen at the first call (the launch's first_call, warm-up time: optimisation_s)")


def frozen_graph(forward: Any) -> tuple[Any, str]:
    """``forward`` (a tf.function of one input) traced, its variables replaced by constants: the
    GraphDef and its output tensor's name.

    This is what ``convert_variables_to_constants_v2`` does before it rebuilds an eager function
    from the GraphDef, which for ResNet50 takes ~7 s of Python here; a session imports the GraphDef
    in ~1 s instead (and runs it as MLPerf's reference does). The two steps are TensorFlow's
    internals, of the version the lock pins; tests/integration/test_app_ic_model.py runs them."""
    from tensorflow.python.framework import convert_to_constants

    concrete = forward.get_concrete_function()
    data = convert_to_constants._FunctionConverterDataInEager(func=concrete, lower_control_flow=False,
                                                             aggressive_inlining=False)
    graph_def, _ = convert_to_constants._replace_variables_by_constants(converter_data=data)
    return graph_def, concrete.outputs[0].name


def frozen_session(forward: Any, device: str) -> tuple[Any, str]:
    """A TensorFlow session holding ``forward``'s frozen graph (``frozen_graph``) placed on ``device``
    (a session would place it on a GPU wherever it sees one), with the process's thread settings,
    and the output tensor to fetch."""
    import tensorflow as tf

    graph_def, output = frozen_graph(forward)
    graph = tf.Graph()
    with graph.as_default(), tf.device(device):
        tf.compat.v1.import_graph_def(graph_def, name="")
    return tf.compat.v1.Session(graph=graph), output


class KerasResNet50:
    """Keras's ResNet50 (v1) on TensorFlow: the paper's IC model."""

    framework = "tensorflow"
    architecture = "ResNet50 v1 (Keras): stride 2 in the first 1x1 convolution of a down-sampling block"

    weights_file = "model.weights.h5"  # Keras's own format (save_weights, load_weights)

    @classmethod
    def import_framework(cls) -> None:
        # Keras imports pandas and matplotlib when installed (the analysis stack has them), for
        # features a benchmark never uses: ~0.7 s of its ~4 s import here. Kept out of this process.
        for unused in KERAS_OPTIONAL_IMPORTS:
            sys.modules.setdefault(unused, None)  # type: ignore[arg-type]  # None: import fails
        import tensorflow  # noqa: F401

    def __init__(self, threads: ThreadPlan, processor: str, seed: int, weights: Path | None,
                 cached: Path | None = None) -> None:
        import tensorflow as tf

        if threads.intra_op is not None:
            tf.config.threading.set_intra_op_parallelism_threads(threads.intra_op)
        if threads.inter_op is not None:
            tf.config.threading.set_inter_op_parallelism_threads(threads.inter_op)
        self.gpus = tf.config.list_physical_devices("GPU")
        if processor == "GPU" and not self.gpus:
            raise AppError("scenario asks for GPU but TensorFlow sees no GPU device")
        self.device = "/GPU:0" if processor == "GPU" else "/CPU:0"
        tf.keras.utils.set_random_seed(seed)
        with tf.device(self.device):
            if weights or cached:
                # the file's weights replace every variable (load_weights refuses a file that
                # misses one), so the random draws Keras makes while building are skipped
                with _random_initialisers_skipped():
                    self.model = tf.keras.applications.ResNet50(weights=None, classes=NUM_CLASSES)
                _keras_skipsets_kept()
                self.model.load_weights(str(weights or cached))
            else:
                self.model = tf.keras.applications.ResNet50(weights=None, classes=NUM_CLASSES)
        spec = tf.TensorSpec([None, IMAGE_SIZE, IMAGE_SIZE, 3], tf.float32, name=FROZEN_INPUT)
        self.forward = tf.function(lambda x: self.model(x, training=False), input_signature=[spec])
        self.frozen = processor == "CPU"  # CPU runs the frozen graph in a session, GPU the tf.function
        self.session: Any = None  # the frozen graph's, made at the first call (a weights build needs none)
        self._output = ""  # the tensor the session fetches
        self.freeze_s: float | None = None
        self.eager_inter_op = 0  # the eager runtime's inter-op threads, idle beside a session

    def _session(self) -> Any:
        if self.session is None:
            self.eager_inter_op = observe.thread_names().get("tf_Compute", 0)
            start = time.perf_counter()
            self.session, self._output = frozen_session(self.forward, self.device)
            self.freeze_s = time.perf_counter() - start
        return self.session

    def first_call(self) -> None:
        """Run once, outside the timed runs: the model is frozen and the session's graph optimiser
        folds the frozen graph's constants (CPU), or the tf.function traces (one signature, any
        batch size)."""
        import tensorflow as tf

        if self.frozen:
            self(np.zeros([1, IMAGE_SIZE, IMAGE_SIZE, 3], np.float32))
        else:
            self.forward(tf.zeros([1, IMAGE_SIZE, IMAGE_SIZE, 3]))

    def optimisation(self) -> dict[str, Any]:
        if not self.frozen:
            return {"optimisation": "tf.function", "optimisation_note": "traced over the model's variables (GPU: "
                    "the frozen graph is measured on CPU only)"}
        return {"optimisation": "frozen-graph", "optimisation_note": FROZEN_NOTE, "optimisation_s": self.freeze_s}

    def save(self, path: Path) -> None:
        partial = path.with_name(f".partial-{path.name}")  # Keras wants the .weights.h5 ending
        self.model.save_weights(str(partial))
        partial.replace(path)

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        import tensorflow as tf

        if self.frozen:
            return np.asarray(self._session().run(self._output, {f"{FROZEN_INPUT}:0": batch}))
        with tf.device(self.device):
            return np.asarray(self.forward(tf.constant(batch)))

    def gpu_state(self) -> dict[str, Any]:
        import tensorflow as tf

        build = tf.sysconfig.get_build_info()
        peak = tf.config.experimental.get_memory_info("GPU:0")["peak"] if self.gpus else None
        return {"framework": self.framework, "framework_gpus": [d.name for d in self.gpus],
                "weights_device": str(self.model.weights[0].device), "framework_peak_bytes": peak,
                "cuda": build.get("cuda_version"), "cudnn": build.get("cudnn_version")}

    def threads(self) -> dict[str, Any]:
        """TensorFlow names its inter-op pools' threads tf_Compute (counted here); its intra-op
        pool is unnamed, and a count it chooses itself (reported as 0) is one per CPU of the
        affinity (its NumSchedulableCPUs), what ``intra_op_source`` says. A session has an inter-op
        pool of its own beside the eager runtime's, which built the model and then runs nothing:
        ``inter_op`` counts the pool that runs the model, ``inter_op_idle`` the other. A kernel that
        shows none of TensorFlow's thread names (gVisor's) leaves the count set (``inter_op_source``)."""
        import tensorflow as tf

        configured = tf.config.threading.get_intra_op_parallelism_threads()
        names = observe.thread_names()
        counted = any(name.startswith("tf_") for name in names)
        return {"intra_op": configured or len(os.sched_getaffinity(0)),
                "intra_op_source": "set" if configured else "TensorFlow default: CPUs in the affinity",
                "inter_op": names.get("tf_Compute", 0) - self.eager_inter_op if counted
                else tf.config.threading.get_inter_op_parallelism_threads(),
                "inter_op_source": "counted (tf_Compute threads)" if counted
                else "set (this kernel shows no thread names: gVisor)",
                "inter_op_idle": self.eager_inter_op}

    def versions(self) -> dict[str, str]:
        import tensorflow as tf

        return {"tensorflow": tf.__version__, "keras": getattr(tf.keras, "__version__", "")}


class TorchResNet50:
    """ResNet50 v1.5 in plain torch (``dlvirt.apps.resnet_torch``); weights from a state dict."""

    framework = "pytorch"
    architecture = "ResNet50 v1.5 (MLPerf's): stride 2 in the 3x3 convolution of a down-sampling block"
    weights_file = "model.pt"

    @classmethod
    def import_framework(cls) -> None:
        import torch  # noqa: F401

    def __init__(self, threads: ThreadPlan, processor: str, seed: int, weights: Path | None,
                 cached: Path | None = None) -> None:
        import torch

        from dlvirt.apps import resnet_torch

        self.device = torch_runtime.configure(threads, processor)
        if cached is not None:
            self.model = torch_runtime.load_module(lambda: resnet_torch.build(NUM_CLASSES), cached,
                                                   "apps.ic weights resource")
        else:
            torch.manual_seed(seed)
            self.model = resnet_torch.build(NUM_CLASSES)
        if weights is not None:
            state = torch_runtime.load_state_dict(weights, "apps.ic.weights.path")
            try:
                self.model.load_state_dict(state, strict=True)
            except RuntimeError as err:
                raise AppError(f"apps.ic.weights.path {weights}: not a ResNet50 state dict ({err})") from err
        self.model.to(self.device).eval()
        self.runner = torch_runtime.FrozenOnCpu(self.model, self.device)

    def save(self, path: Path) -> None:
        torch_runtime.save_module(self.model, path)

    def first_call(self) -> None:
        """Run once, outside the timed runs: on CPU the model is traced and frozen (any batch size)."""
        self(np.zeros([1, IMAGE_SIZE, IMAGE_SIZE, 3], np.float32))

    def optimisation(self) -> dict[str, Any]:
        return self.runner.optimisation()

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        import torch

        with torch.inference_mode():
            nhwc = torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32)).to(self.device)
            # NCHW in shape, channels-last in memory: the layout oneDNN's convolutions take best
            return self.runner(nhwc.permute(0, 3, 1, 2)).cpu().numpy()

    def gpu_state(self) -> dict[str, Any]:
        return torch_runtime.gpu_state(self.model)

    def threads(self) -> dict[str, Any]:
        return torch_runtime.reported_threads()

    def versions(self) -> dict[str, str]:
        return package_versions(("torch",))


# the model backends (dlvirt.apps.backend.ModelBackend), by apps.ic.framework
BACKENDS: dict[str, type[ModelBackend]] = {
    KerasResNet50.framework: KerasResNet50, TorchResNet50.framework: TorchResNet50}


class ImageClassification(App):
    kind = AppKind(name="ic", title="Image classification", model="ResNet50", framework="tensorflow",
                   dataset="ImageNet 2012 validation", order=0,
                   framework_packages=("tensorflow", "torch"), packages=("tensorflow-cpu", "pillow"))
    dataset_index = VAL_MAP
    weights_keys = ("seed", "framework")
    weights_file_names = tuple(backend.weights_file for backend in BACKENDS.values())

    @classmethod
    def generate_dataset(cls, out_dir: Path, settings: dict[str, Any]) -> dict[str, Any]:
        from PIL import Image

        dataset = settings["dataset"]
        rng = np.random.default_rng(dataset["seed"])
        lines = []
        total_bytes = 0
        for i in range(1, dataset["count"] + 1):
            # ImageNet val images are mostly 500 px on the long side, 333-500 on the short one.
            long_side = 500
            short_side = int(rng.integers(333, 501))
            width, height = (long_side, short_side) if rng.random() < 0.75 else (short_side, long_side)
            name = f"ILSVRC2012_val_{i:08d}.JPEG"
            Image.fromarray(synthetic_image(rng, width, height)).save(out_dir / name, "JPEG", quality=90)
            total_bytes += (out_dir / name).stat().st_size
            lines.append(f"{name} {int(rng.integers(0, NUM_CLASSES))}")
        (out_dir / VAL_MAP).write_text("\n".join(lines) + "\n")
        return {"count": dataset["count"], "format": "JPEG", "bytes": total_bytes}

    @classmethod
    def check_real_dataset(cls, root: Path, settings: dict[str, Any]) -> dict[str, Any]:
        if not (root / VAL_MAP).is_file():
            raise AppError(f"apps.ic.dataset.path {root}: no {VAL_MAP} (the MLPerf 'FILE LABEL' list)")
        entries = read_val_map(root)
        missing = [f for f, _ in entries[:50] if not (root / f).is_file()]
        if missing:
            raise AppError(f"apps.ic.dataset.path {root}: images listed in {VAL_MAP} are missing: {missing[:5]}")
        return {"count": len(entries), "format": "JPEG"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.framework = str(self.settings.get("framework", ImageClassification.framework))
        if self.framework not in BACKENDS:
            raise AppError(f"apps.ic.framework {self.framework!r}: one of {', '.join(FRAMEWORKS)}")
        self.entries = read_val_map(self.data_root)
        limit = self.settings["dataset"].get("count")
        if self.dataset_info["source"] == "real" and limit:
            self.entries = self.entries[:limit]

    def sample_count(self) -> int:
        return len(self.entries)

    @classmethod
    def weights_tag(cls, settings: dict[str, Any]) -> str:
        return f"{settings.get('framework', cls.framework)}-{super().weights_tag(settings)}"

    @classmethod
    def weights_file_name(cls, settings: dict[str, Any]) -> str:
        return BACKENDS[str(settings.get("framework", cls.framework))].weights_file

    def import_framework(self) -> None:
        BACKENDS[self.framework].import_framework()

    def load_model(self) -> None:
        self.weights_path = checked_weights(self.settings)
        # configured weights are loaded into a model built as before; else the weights resource
        cached = self.cached_weights if self.weights_path is None else None
        self.backend = BACKENDS[self.framework](self.threads, self.processor, int(self.settings.get("seed", 0)),
                                                self.weights_path, cached)

    def save_weights(self, path: Path) -> None:
        self.backend.save(path)

    def first_call(self) -> None:
        self.backend.first_call()

    def preprocess(self, index: int) -> np.ndarray:
        return preprocess_image(self.data_root / self.entries[index][0])

    def infer(self, batch: list[np.ndarray] | np.ndarray) -> np.ndarray:
        return self.backend(batch if isinstance(batch, np.ndarray) else np.stack(batch))

    def synthetic_batch(self, batch_size: int) -> np.ndarray:
        rng = np.random.default_rng(0)
        return rng.normal(0, 60, size=(batch_size, IMAGE_SIZE, IMAGE_SIZE, 3)).astype(np.float32)

    def begin_repetition(self, out_dir: Path) -> None:
        super().begin_repetition(out_dir)
        self.predictions = open(self.out_dir / "predictions.txt", "w")  # noqa: SIM115 - closed in end_repetition
        self.top1_hits = 0
        self.top5_hits = 0
        self.seen = 0

    def postprocess(self, indices: list[int], outputs: np.ndarray) -> list[bytes]:
        top5 = np.argsort(-outputs, axis=1)[:, :5]
        answers = []
        lines = []
        for index, best in zip(indices, top5, strict=True):
            name, label = self.entries[index]
            self.top1_hits += int(best[0] == label)
            self.top5_hits += int(label in best)
            self.seen += 1
            lines.append(f"{name} {' '.join(str(int(c)) for c in best)}\n")
            answers.append(np.int32(best[0]).tobytes())
        self.predictions.writelines(lines)
        return answers

    def end_repetition(self) -> dict[str, Any]:
        self.predictions.close()
        seen = max(self.seen, 1)
        return {"top1": self.top1_hits / seen, "top5": self.top5_hits / seen, "scored": self.seen}

    def model_provenance(self) -> dict[str, Any]:
        applied = self.backend.optimisation() if hasattr(self, "backend") else {}
        return {**super().model_provenance(), "architecture": BACKENDS[self.framework].architecture, **applied}

    def gpu_state(self) -> dict[str, Any]:
        return self.backend.gpu_state()

    def framework_threads(self) -> dict[str, Any]:
        return self.backend.threads()

    def framework_versions(self) -> dict[str, str]:
        return self.backend.versions()
