"""The app interface: dataset, model, pre-process, infer, post-process.

One class per DL application; the LoadGen harness (``dlvirt.run.harness``) drives any of them the same
way, so adding an app is one new module registered in ``dlvirt.apps``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from dlvirt.core import formats
from dlvirt.core.atomic import write_json_atomic, write_text_atomic
from dlvirt.core.formats import read_document
from dlvirt.core.kinds import AppKind
from dlvirt.core.scenario import Scenario
from dlvirt.core.vocabulary import ThreadPolicy
from dlvirt.system import allocator

DATASET_INFO = "dataset.json"
# The checksum file beside a weights resource: ``<weights file>.sha256``, the hex digest alone.
CHECKSUM_SUFFIX = ".sha256"
# ... and the record of its last full check (verified_weights): ``<weights file>.checked.json``
CHECKED_SUFFIX = ".checked.json"


class AppError(RuntimeError):
    pass


# libgomp's spins after a parallel region under a granted plan whose stages alternate and whose
# app pre-processes on worker threads. Short enough that the helpers sleep through a
# pre-processing step of a millisecond and more: the default 300 000 spins outlast RS's whole
# step (~4 ms per worker), so its second worker ran beside a spinning helper and pre-processing on
# two workers took as long as on one. Long enough for a model's gaps between its own regions: 0
# spins halved SR's rate, 1 000-3 000 let its helpers fall asleep between the decoder's small
# regions. SR pre-processes on the framework's threads and keeps OpenMP's own (its 2-core rate
# fell at 10 000). Measured on the AMD EPYC guest, 2026-12-04; docs/measurement.md, "Idle helpers".
OMP_SPIN_COUNT = 10_000


@dataclass(frozen=True)
class ThreadPlan:
    """Threads the harness and the app's framework use.

    ``granted``: sized from what the platform really grants (affinity, CFS quota), so that the
    harness's compute threads that can run at once never exceed the granted cores. By default the
    stages *alternate*, each on every granted core (N pre-processing workers, then N intra-op
    threads, then post-processing inline; the idle stage's threads wait blocked): a model-only run
    and an app with little pre-processing get the model on all N cores. Asked for
    (``pipeline: overlapped``), the cores are *split*: one pre-processing worker beside N-1
    intra-op threads. ``framework-default``: dlvirt sets no framework thread count at all
    (``None``) and sizes its pre-processing pool as Python's default does, the model of a plain
    application.

    ``omp_spin_count``: how long an OpenMP (libgomp: PyTorch's) pool thread spins for more work
    after a parallel region before it sleeps (``GOMP_SPINCOUNT``, applied before the framework
    loads; None: OpenMP's own, 300 000 spins). A granted plan whose stages alternate shortens it to
    ``OMP_SPIN_COUNT`` where pre-processing runs on worker threads, so that the intra-op helpers of
    the inference just done sleep instead of spinning through the pre-processing beside its N
    workers (a spinning helper is a runnable thread on a granted core doing nothing).

    ``retain_freed_memory``: the process's allocator keeps freed memory for the next batch
    (``dlvirt.system.allocator``) instead of mapping fresh pages for every large temporary and
    interrupting every granted core to unmap them. A granted plan does; ``framework-default`` keeps
    glibc's own behaviour, as a plain application would.
    """

    policy: ThreadPolicy     # "granted" or "framework-default"
    cores: int               # the core count the plan was sized from
    intra_op: int | None     # framework intra-op threads (None: the framework chooses)
    inter_op: int | None     # framework inter-op threads (None: the framework chooses)
    pre_workers: int         # pre-processing worker threads
    overlap: bool = True     # pre-processing runs ahead, beside inference (else the stages alternate)
    post_thread: bool = False  # post-processing on its own thread (else inline after each inference)
    sharing: str = "split"   # how the granted cores are shared: alternate, split, or unmanaged
    omp_spin_count: int | None = None  # GOMP_SPINCOUNT for the framework's OpenMP pool (None: OpenMP's own)
    retain_freed_memory: bool = False  # glibc malloc keeps freed memory (False: glibc's own thresholds)

    def environment(self) -> dict[str, str]:
        """The environment the plan's settings need: read by the framework's OpenMP runtime when it
        loads, and by the C library of any process started from this one."""
        env = {} if self.omp_spin_count is None else {"GOMP_SPINCOUNT": str(self.omp_spin_count)}
        return {**env, **(allocator.environment() if self.retain_freed_memory else {})}

    def apply(self) -> dict[str, int] | None:
        """Put the plan's process settings in place, before anything loads the framework: the
        environment, and this process's allocator thresholds (returned; None: glibc's own). An
        allocator that cannot keep freed memory fails the launch (AllocatorError)."""
        os.environ.update(self.environment())
        return allocator.retain_freed_memory() if self.retain_freed_memory else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def compute_threads(self) -> int | None:
        """The most harness compute threads the plan lets run at once (None: not managed)."""
        if self.intra_op is None:
            return None
        if not self.overlap:
            return max(self.intra_op, self.pre_workers)
        return self.intra_op + self.pre_workers + int(self.post_thread)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def checked_weights(settings: dict[str, Any], section: str = "weights") -> Path | None:
    """The file configured under ``section`` (path, sha256) after its checksum matched, or None:
    for ``weights``, random initialisation."""
    weights = settings.get(section) or {}
    path = weights.get("path")
    if not path:
        return None
    path = Path(path)
    if not path.is_file():
        raise AppError(f"{section}.path {path} does not exist")
    want = weights.get("sha256")
    if want:
        got = sha256_file(path)
        if got != want:
            raise AppError(f"{section}.path {path}: sha256 {got} != {section}.sha256 {want}")
    return path


def write_checksum(path: Path) -> str:
    """Write ``path``'s SHA-256 beside it (``CHECKSUM_SUFFIX``); return the digest."""
    digest = sha256_file(path)
    write_text_atomic(Path(f"{path}{CHECKSUM_SUFFIX}"), digest + "\n")
    return digest


def file_identity(path: Path) -> dict[str, int]:
    """What changes whenever a file's content may have: its device, inode, size, and modification
    and status-change times (a write, a rename over it or a touch changes ctime)."""
    st = Path(path).stat()
    return {"dev": st.st_dev, "ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns}


def known_sha256(path: Path, record: Any) -> str | None:
    """The digest an earlier hash of ``path`` recorded (``hash_record``), if the file is still the one
    it hashed (``file_identity``); None: hash it."""
    if isinstance(record, dict) and record.get("identity") == file_identity(path):
        return str(record["sha256"])
    return None


def hash_record(path: Path) -> dict[str, Any]:
    """``path``'s SHA-256 with the file's identity as it was hashed ("identity" None if the file
    changed meanwhile, so that no later check takes the digest from this record)."""
    identity = file_identity(path)
    digest = sha256_file(path)
    return {"sha256": digest, "identity": identity if file_identity(path) == identity else None,
            "hashed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def verified_weights(path: Path) -> dict[str, Any]:
    """A weights resource checked against the checksum file beside it: its path, SHA-256 and how
    it was checked (``check``).

    Hashing BERT-large's 1.3 GB costs a second per launch, so a full check is recorded beside the
    file (``CHECKED_SUFFIX``: ``hash_record``); a later check of the same file (same identity) whose
    checksum file still names that digest takes the recorded one ("unchanged since hashed"). Where
    the record cannot be written (a read-only resource), every check hashes."""
    path = Path(path)
    checksum = Path(f"{path}{CHECKSUM_SUFFIX}")
    if not path.is_file() or not checksum.is_file():
        raise AppError(f"weights resource {path}: {'file' if not path.is_file() else 'checksum file'} missing "
                       "(rule weights builds both)")
    want = (checksum.read_text().split() or [""])[0]
    checked = Path(f"{path}{CHECKED_SUFFIX}")
    try:
        record = read_document(checked, "weights check")
    except (OSError, ValueError):  # none yet, or unreadable: hash
        record = None
    if known_sha256(path, record) == want:
        return {"path": str(path), "sha256": want, "check": f"unchanged since hashed at {record['hashed_at']}"}
    record = hash_record(path)
    if record["sha256"] != want:
        raise AppError(f"weights resource {path}: sha256 {record['sha256']} != {want} in {checksum.name}; rebuild "
                       "it (snakemake --forcerun weights)")
    with contextlib.suppress(OSError):  # read-only: the next check hashes again
        write_json_atomic(checked, formats.stamped("weights check", record))
    return {"path": str(path), "sha256": want, "check": "hashed"}


class App(ABC):
    kind: ClassVar[AppKind]  # what the rest of dlvirt knows about it (each app module declares it)
    name: ClassVar[str]      # kind.name
    framework: str  # kind.framework; an app whose framework is configurable (IC) sets its own
    dataset_index: ClassVar[str]  # the file a real dataset folder holds (apps.<app>.dataset.path)
    dataset_may_be_file: ClassVar[bool] = False  # dataset.path may also name that file itself
    weights_keys: ClassVar[tuple[str, ...]] = ("seed",)  # the settings its random initialisation depends on
    # every name weights_file_name may give (the weights rule's wildcard: dlvirt.apps.weights_file_names)
    weights_file_names: ClassVar[tuple[str, ...]] = ("model.pt",)
    # Pre-processing made of the framework's own ops (SR's features): the framework spreads them over
    # its intra-op threads, so where the stages alternate the harness runs them on the inference
    # thread. On N worker threads each would open a framework thread pool of its own: more runnable
    # threads than cores, and OpenMP, seeing more of its threads than CPUs, stops keeping its pool
    # spinning between parallel regions, which slows inference's many small ones.
    preprocess_on_framework_threads: ClassVar[bool] = False
    in_process: bool = True  # it holds its model in the harness's process (dlvirt.run.tools.base.ModelHost)
    # It generates tokens (LLM): its LoadGen responses are int32 token ids, and inference calls
    # ``first_token(position in batch, token)`` (set by the harness) once a request's first token is
    # out, so that LoadGen measures time to first token and per output token.
    token_latencies: ClassVar[bool] = False
    first_token: Callable[[int, int], None] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            cls.name, cls.framework = cls.kind.name, cls.kind.framework

    def __init__(self, settings: dict[str, Any], dataset_dir: Path, processor: str, threads: ThreadPlan,
                 initial_weights: dict[str, Any] | None = None) -> None:
        self.settings = settings
        self.dataset_dir = Path(dataset_dir)
        self.dataset_info = read_document(self.dataset_dir / DATASET_INFO, "dataset info")
        self.processor = processor
        self.threads = threads
        self.weights_path: Path | None = None
        # the workflow's weights resource (path, sha256; the runner verified it): the seeded random
        # initialisation, saved once, which load_model loads instead of initialising the model again
        self.initial_weights = initial_weights

    # -- matrix ---------------------------------------------------------------------------------
    @classmethod
    def unsupported_reason(cls, scenario: Scenario, tool: str) -> str | None:
        if scenario.processor not in cls.kind.processors:
            return f"{cls.kind.label} does not run on {scenario.processor} ({cls.kind.why_no_gpu})"
        return None

    # -- dataset --------------------------------------------------------------------------------
    @classmethod
    def prepare_dataset(cls, out_dir: Path, settings: dict[str, Any]) -> None:
        """Generate the synthetic dataset, or check and register the user's real one."""
        out_dir = Path(out_dir)
        dataset = settings["dataset"]
        root = Path(dataset["path"]).resolve() if dataset.get("path") else None
        why = cls.dataset_path_problem(root) if root else None
        if why:  # refused before anything is written
            raise AppError(f"apps.{cls.name}.dataset.path {root}: {why}")
        out_dir.mkdir(parents=True, exist_ok=True)
        if root:
            info = {"source": "real", "root": str(root), **cls.check_real_dataset(root, settings)}
        else:
            info = {"source": "synthetic", "root": None, "seed": dataset["seed"],
                    **cls.generate_dataset(out_dir, settings)}
        info.update({"app": cls.name, "dataset": cls.kind.dataset})
        write_json_atomic(out_dir / DATASET_INFO, formats.stamped("dataset info", info))

    @classmethod
    def dataset_path_problem(cls, path: Path) -> str | None:
        """What is wrong with a real dataset's path as far as planning can tell without reading
        the data (None: nothing), so that a wrong path fails before any job is built."""
        if not path.exists():
            return "does not exist"
        if path.is_dir():
            return None if (path / cls.dataset_index).is_file() else f"has no {cls.dataset_index}"
        if cls.dataset_may_be_file:
            return None
        return f"is a file, not a folder holding {cls.dataset_index}"

    @classmethod
    @abstractmethod
    def generate_dataset(cls, out_dir: Path, settings: dict[str, Any]) -> dict[str, Any]:
        """Write a synthetic dataset in the real file format under ``out_dir``; return facts about it."""

    @classmethod
    @abstractmethod
    def check_real_dataset(cls, root: Path, settings: dict[str, Any]) -> dict[str, Any]:
        """Check a user-provided dataset at ``root``; raise AppError naming what is missing."""

    @classmethod
    def download_dataset(cls, out_dir: Path) -> list[Path]:
        """Fetch the real dataset into ``out_dir`` and verify its checksums (needs network; never
        part of ``all``); return the files. Apps without a public download say so."""
        raise AppError(f"app {cls.name} has no dataset download; point apps.{cls.name}.dataset.path at the data")

    @property
    def data_root(self) -> Path:
        """Where the samples are: the dataset dir for synthetic data, the user's folder for real data."""
        root = self.dataset_info.get("root")
        return Path(root) if root else self.dataset_dir

    # -- model and phases -----------------------------------------------------------------------
    @abstractmethod
    def sample_count(self) -> int:
        """Samples in the dataset (LoadGen's total sample count)."""

    @abstractmethod
    def import_framework(self) -> None:
        """Import the framework the model needs (start-up, kept apart from the model load)."""

    @abstractmethod
    def load_model(self) -> None:
        """Set framework threads from ``self.threads``, build the model, load weights: the configured
        ones, else ``initial_weights``, else a seeded random initialisation."""

    @abstractmethod
    def first_call(self) -> None:
        """The framework's one-time set-up on the loaded model before any repetition (TensorFlow
        traces its function); the launch counts it with its warm-ups, apart from the model load."""

    # -- the weights resource (rule weights: built once per app, model settings and seed) ------
    @classmethod
    def weights_tag(cls, settings: dict[str, Any]) -> str:
        """What the seeded random initialisation depends on, as a folder name."""
        return f"seed{int(settings.get('seed', 0))}"

    @classmethod
    def weights_settings(cls, settings: dict[str, Any]) -> dict[str, Any]:
        """The app settings the seeded random initialisation depends on (a change rebuilds it)."""
        return {key: settings[key] for key in cls.weights_keys if key in settings}

    @classmethod
    def weights_file_name(cls, settings: dict[str, Any]) -> str:
        """The weights resource's file name, in the framework's own format."""
        return "model.pt"

    @abstractmethod
    def save_weights(self, path: Path) -> None:
        """Save the loaded model's weights to ``path`` in the framework's own format."""

    @classmethod
    def build_weights(cls, settings: dict[str, Any], dataset_dir: Path, output: Path) -> str:
        """The weights resource: the model's seeded random initialisation, as a launch without it
        would build it, saved to ``output`` with its checksum file beside it; returns the SHA-256."""
        plan = ThreadPlan(policy="framework-default", cores=os.cpu_count() or 1, intra_op=None, inter_op=None,
                          pre_workers=1, sharing="unmanaged")
        if (settings.get("weights") or {}).get("path"):
            raise AppError(f"apps.{cls.name}.weights.path is set: launches load those weights, not a weights resource")
        app = cls(settings, dataset_dir, "CPU", plan)
        app.load_model()
        output.parent.mkdir(parents=True, exist_ok=True)
        app.save_weights(output)
        return write_checksum(output)

    @property
    def cached_weights(self) -> Path | None:
        """The weights resource to load when no weights are configured (None: none given)."""
        return None if self.initial_weights is None else Path(self.initial_weights["path"])

    @abstractmethod
    def preprocess(self, index: int) -> Any:
        """Read sample ``index`` from storage and turn it into model input (thread-safe)."""

    @abstractmethod
    def infer(self, batch: list[Any]) -> Any:
        """Run the model on a batch of pre-processed samples."""

    @abstractmethod
    def postprocess(self, indices: list[int], outputs: Any) -> list[bytes]:
        """Turn model outputs into per-sample answers (the LoadGen response payload)."""

    @abstractmethod
    def synthetic_batch(self, batch_size: int) -> Any:
        """A model-ready batch of random inputs of the real shapes, for model-only (DLBS-style)
        timing: what ``infer`` accepts, already collated, with no pre-processing cost."""

    def infer_phases(self) -> dict[str, float]:
        """Parts of the repetition's inference the app times itself (LLM: prefill and decode, with
        their CPU time), added to its phases; none by default."""
        return {}

    def begin_repetition(self, out_dir: Path) -> None:
        """Called before each repetition; ``out_dir`` receives its predictions."""
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)

    def end_repetition(self) -> dict[str, Any]:
        """Quality figures of the finished repetition (accuracy where labels exist)."""
        return {}

    def model_provenance(self) -> dict[str, Any]:
        if self.weights_path is None:
            # random either way; the resource is that same seeded initialisation, saved once
            source: dict[str, Any] = {"weights_source": "seeded random initialisation, built in this launch"}
            if self.initial_weights is not None:
                source = {"weights_source": "seeded random initialisation, cached (rule weights)",
                          "weights_file": self.initial_weights["path"],
                          "weights_sha256": self.initial_weights["sha256"],
                          "weights_check": self.initial_weights.get("check")}
            return {"model": self.kind.model, "framework": self.framework, "weights": "random",
                    "seed": self.settings.get("seed", 0), **source}
        return {"model": self.kind.model, "framework": self.framework, "weights": "loaded",
                "path": str(self.weights_path), "sha256": self.settings["weights"].get("sha256")}

    def gpu_state(self) -> dict[str, Any]:
        """What the framework says about the GPU after a repetition (GPU scenarios only): the GPUs it
        sees (``framework_gpus``), the device the model's weights live on (``weights_device``), the
        peak GPU memory it allocated (``framework_peak_bytes``), its ``cuda`` and ``cudnn`` versions.
        The job fails unless the weights are on a GPU (``dlvirt.system.gpu.usage_problems``)."""
        return {}

    def framework_versions(self) -> dict[str, str]:
        return {}

    @abstractmethod
    def framework_threads(self) -> dict[str, Any]:
        """The thread counts the framework really uses, read back from it (``intra_op``,
        ``inter_op`` and what else it reports)."""
