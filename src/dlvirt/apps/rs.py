"""RS: click-through-rate prediction with DLRM (PyTorch) on Criteo Kaggle DAC TSV lines.

The model is DLRM in the configuration of the Criteo Kaggle runs of the DLRM reference
(``dlrm_s_pytorch.py``): 13 dense features → bottom MLP 13-512-256-64-16, 26 ``EmbeddingBag``
tables of dimension 16 with the Kaggle cardinalities, dot interaction of the 27 vectors (without
self-interaction), top MLP 367-512-256-1 and a sigmoid; parameter names match the reference's
state dict (``emb_l.N.weight``, ``bot_l.N.*``, ``top_l.N.*``). ``max_rows_per_table`` caps tables
for small hosts, and every result file says whether a cap was in force.

A query sample is, as in MLPerf's DLRM harness, a group of consecutive TSV lines (one user's
impressions; 100–700 lines by default). Pre-processing reads its lines from storage and parses them
in one compiled pass over their bytes (``parse_bytes``, ``_criteo.c``): missing integers → 0,
negatives → 0, then log(1 + x) in numpy; categorical hex strings → integers, hashed into each table
by modulo (the reference's ``--max-ind-range`` hashing; missing → 0). MLPerf's DLRM reference parses the
text before the benchmark instead (its dataset step writes a processed ``.npz``/``.bin`` and
LoadGen's untimed ``load_query_samples`` puts the samples in memory); dlvirt keeps reading and
parsing inside E2E, as for every app.
Post-processing thresholds the CTRs, scores them against the labels (accuracy, ROC AUC) and writes
them as text (compiled too: ``format_ctrs``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlvirt.apps import torch_runtime
from dlvirt.apps.base import AppError, checked_weights
from dlvirt.core.kinds import AppKind

# What stops RS's compiled parser from being used ("": nothing); parse_bytes says it
try:
    from dlvirt.apps import _criteo
    _CRITEO_PROBLEM = ""
    # in a source tree (not a wheel), a build older than its source would time an older parser
    # than the code version a result records
    _CRITEO_SOURCE = Path(__file__).with_name("_criteo.c")
    if _CRITEO_SOURCE.is_file() and _CRITEO_SOURCE.stat().st_mtime > Path(_criteo.__file__).stat().st_mtime:
        _CRITEO_PROBLEM = f"{_criteo.__file__} is older than {_CRITEO_SOURCE}"
except ImportError as missing:  # not built, or built for another Python
    _criteo = None  # type: ignore[assignment]
    _CRITEO_PROBLEM = str(missing) or "not built"

DENSE = 13
SPARSE = 26
FIELDS = 1 + DENSE + SPARSE
EMBEDDING_DIM = 16
BOTTOM_MLP = (DENSE, 512, 256, 64, EMBEDDING_DIM)
TOP_MLP = (512, 256, 1)
# Rows per categorical feature in the Criteo Kaggle DAC data (the DLRM reference's day_fea_count).
KAGGLE_TABLE_ROWS = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
                     27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)
# Approximate share of missing values per column and of positive labels in Kaggle's train.txt.
DENSE_MISSING = (0.45, 0.0, 0.21, 0.22, 0.03, 0.22, 0.04, 0.0, 0.04, 0.45, 0.04, 0.77, 0.22)
SPARSE_MISSING = (0.0, 0.0, 0.03, 0.03, 0.0, 0.12, 0.0, 0.0, 0.0, 0.0, 0.0, 0.03, 0.0, 0.0, 0.0, 0.03,
                  0.0, 0.0, 0.44, 0.44, 0.03, 0.76, 0.0, 0.03, 0.44, 0.44)
# Approximate log-medians of the 13 integer columns (I5 counts in thousands, I12 is mostly 0).
DENSE_LOG_MEDIAN = (0.0, 1.1, 1.9, 1.4, 7.9, 3.4, 1.1, 2.1, 3.7, 0.0, 0.0, 0.0, 1.4)
CLICK_RATE = 0.256
DATA_FILE = "train.txt"
_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)  # digit value -> ASCII
# character code -> hex digit value (0xFF: not a hex digit), for parse_hex
_HEX_DIGIT = np.full(256, 0xFF, dtype=np.uint8)
_HEX_DIGIT[ord("0"):ord("9") + 1] = np.arange(10)
_HEX_DIGIT[ord("a"):ord("f") + 1] = _HEX_DIGIT[ord("A"):ord("F") + 1] = np.arange(10, 16)


@dataclass(frozen=True)
class CriteoBatch:
    """Model inputs of one or more samples: one row per TSV line."""

    dense: Any    # float32 (rows, 13), log(1 + x)
    sparse: Any   # int64 (rows, 26), row indices into each embedding table
    labels: np.ndarray  # int8 (rows,)
    lines: tuple[int, ...]  # rows of each sample, in order


def collate(items: list[CriteoBatch]) -> CriteoBatch:
    if len(items) == 1:
        return items[0]
    return CriteoBatch(np.concatenate([b.dense for b in items]), np.concatenate([b.sparse for b in items]),
                       np.concatenate([b.labels for b in items]), tuple(n for b in items for n in b.lines))


def parse_lines(text: bytes, modulus: np.ndarray, where: str = "", checked: list[str] | None = None,
                rows: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Criteo TSV lines (label, 13 integers, 26 hex categoricals; any field may be empty) →
    labels int8 (n,), dense float32 (n, 13) = log(1 + max(x, 0)), sparse int64 (n, 26) = each
    categorical modulo its table's rows (``modulus``, 26 int64 in 1..2^32-1; ``table_modulus``).
    Well-formed lines are parsed in one compiled pass (``parse_bytes``; ``rows``: how many lines
    the text holds, where the caller knows); anything else by the checked path, which gives the same
    values or says what is wrong, and is several times slower: ``checked`` gets ``where`` appended
    each time it runs (``list.append`` is atomic, so that the pre-processing workers can share one
    list), so that a repetition can say how many samples its pre-processing time holds at that speed."""
    fast = parse_bytes(text, modulus, rows)
    if fast is not None:
        return fast
    if checked is not None:
        checked.append(where)
    labels, dense, sparse = parse_lines_checked(text, where)
    return labels, dense, sparse % modulus


def _dense(values: np.ndarray) -> np.ndarray:
    return np.log1p(np.maximum(values[:, 1:], 0).astype(np.float32))


def parse_bytes(text: bytes, modulus: np.ndarray, rows: int | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``parse_lines``' labels, dense and hashed sparse arrays from ``rows`` (None: counted)
    well-formed lines (40 tab-separated fields each, ``-?[0-9]*`` integers of at most 18 digits,
    hex of at most 8 digits, every line ending in a newline but the last); None for anything else.
    One compiled pass over the bytes with the GIL released (``_criteo.c``), then numpy's log1p in
    place (the checked path's, so that both give the same bits): about a sixth of the numpy
    parser's time, and two threads parse side by side (docs/measurement.md, "RS's parser: compiled")."""
    criteo = compiled()
    if not text:
        return None
    if rows is None:
        rows = text.count(b"\n") + (not text.endswith(b"\n"))
    labels = np.empty(rows, dtype=np.int8)
    dense = np.empty((rows, DENSE), dtype=np.float32)
    sparse = np.empty((rows, SPARSE), dtype=np.int64)
    if not criteo.parse(text, labels, dense, sparse, modulus):
        return None
    np.log1p(dense, out=dense)
    return labels, dense, sparse


def compiled() -> Any:
    """The compiled module ``dlvirt.apps._criteo``, or an error that says how to build it."""
    if _CRITEO_PROBLEM:
        raise AppError(f"RS's compiled parser dlvirt.apps._criteo cannot be used ({_CRITEO_PROBLEM}): ./setup.sh "
                       "install builds it for this host's Python (pip install -e . with a C compiler and the Python "
                       "headers)")
    return _criteo


def table_modulus(rows: tuple[int, ...]) -> np.ndarray:
    """The categoricals' hashing divisors (``parse_lines``' ``modulus``) for tables of ``rows``."""
    return np.array(rows, dtype=np.int64)


def parse_lines_checked(text: bytes, where: str = "") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``parse_lines`` by Python's own string parsing (the GIL held): any input, refused with what
    is wrong and ``where``."""
    values, categoricals = parse_columns(text, where)
    return values[:, 0].astype(np.int8), _dense(values), categoricals


def parse_columns(text: bytes, where: str = "") -> tuple[np.ndarray, np.ndarray]:
    """Criteo TSV lines as written: the label and 13 integers int64 (n, 14), missing → 0, and the 26
    categoricals' hex values int64 (n, 26), missing → 0; anything else refused with what is wrong
    and ``where``."""
    lines = text.decode("ascii", errors="replace").splitlines()
    try:
        fields = np.array([line.split("\t") for line in lines], dtype=str)
    except ValueError as err:
        raise AppError(f"{where}: lines with other than {FIELDS} tab-separated fields") from err
    if fields.ndim != 2 or fields.shape[1] != FIELDS:
        raise AppError(f"{where}: expected {FIELDS} tab-separated fields per line, got shape {fields.shape}")
    numbers = fields[:, :1 + DENSE]
    numbers[numbers == ""] = "0"
    try:
        values = numbers.astype(np.int64)
    except (ValueError, OverflowError) as err:
        raise AppError(f"{where}: a label or integer feature is not an integer ({err})") from err
    return values, parse_hex(fields[:, 1 + DENSE:], where)


def parse_hex(strings: np.ndarray, where: str = "") -> np.ndarray:
    """Hex strings (up to 8 digits; '' = missing → 0) to int64, vectorised over the array."""
    if np.strings.str_len(strings).max(initial=0) > 8:
        raise AppError(f"{where}: a categorical feature has more than 8 hex digits")
    codes = np.ascontiguousarray(strings.astype("<U8")).view(np.uint32).reshape(*strings.shape, 8)
    present = codes != 0
    nibbles = _HEX_DIGIT[np.minimum(codes, 255)]
    if (nibbles[present] > 15).any():
        raise AppError(f"{where}: a categorical feature is not hexadecimal")
    value = np.zeros(strings.shape, dtype=np.int64)
    for digit in range(8):
        here = present[..., digit]
        value = np.where(here, value * 16 + nibbles[..., digit], value)
    return value


def table_rows(cap: int | None) -> tuple[int, ...]:
    return tuple(min(rows, cap) if cap else rows for rows in KAGGLE_TABLE_ROWS)


def lines_per_sample(dataset: dict[str, Any]) -> np.ndarray:
    """How many consecutive lines make up each query sample (seeded, within [min, max])."""
    bounds = dataset["lines_per_sample"]
    if bounds["min"] > bounds["max"]:
        raise AppError(f"apps.rs.dataset.lines_per_sample: min {bounds['min']} > max {bounds['max']}")
    rng = np.random.default_rng([dataset["seed"], 1])
    return rng.integers(bounds["min"], bounds["max"] + 1, size=dataset["count"])


def line_offsets(path: Path, lines: int) -> np.ndarray:
    """Byte offsets of the first ``lines`` line starts plus the end of the last (fewer if the file is shorter)."""
    ends: list[np.ndarray] = []
    found = 0
    position = 0
    with open(path, "rb") as handle:
        while found < lines and (block := handle.read(1 << 24)):
            newlines = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10) + position + 1
            ends.append(newlines[: lines - found])
            found += len(ends[-1])
            position += len(block)
    return np.concatenate([np.zeros(1, dtype=np.int64), *ends]) if ends else np.zeros(1, dtype=np.int64)


def sample_spans(path: Path, dataset: dict[str, Any]) -> list[tuple[int, int, int]]:
    """(first byte, end byte, lines) of each query sample in the TSV; as many samples as it holds."""
    sizes = lines_per_sample(dataset)
    offsets = line_offsets(path, int(sizes.sum()))
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    samples = int(np.searchsorted(bounds, len(offsets) - 1, side="right")) - 1
    if samples < 1:
        raise AppError(f"{path}: fewer lines ({len(offsets) - 1}) than one sample needs ({sizes[0]})")
    return [(int(offsets[bounds[i]]), int(offsets[bounds[i + 1]]), int(sizes[i])) for i in range(samples)]


def synthetic_lines(rng: np.random.Generator, rows: int) -> bytes:
    """Criteo-format TSV lines with Kaggle-like values: ~26 % clicks, heavy-tailed counts, Zipf-
    distributed categoricals over each table's cardinality, per-column missing values."""
    labels = (rng.random(rows) < CLICK_RATE).astype(np.int64)
    counts = np.floor(rng.lognormal(mean=DENSE_LOG_MEDIAN, sigma=1.3, size=(rows, DENSE))).astype(np.int64)
    counts[:, 1] -= (rng.random(rows) < 0.05).astype(np.int64) * rng.integers(1, 4, size=rows)  # I2 goes negative
    columns: list[np.ndarray] = [labels.astype(str)]
    for j in range(DENSE):
        column = counts[:, j].astype(str)
        column[rng.random(rows) < DENSE_MISSING[j]] = ""
        columns.append(column)
    for j, cardinality in enumerate(KAGGLE_TABLE_ROWS):
        rank = np.minimum(rng.zipf(1.2, size=rows), cardinality) - 1
        value = ((rank + (j + 1) * 1_000_003) * 2654435761) & 0xFFFFFFFF  # distinct random-looking tokens
        digits = _HEX_DIGITS[(value[:, None] >> np.arange(28, -1, -4)) & 0xF]
        column = digits.view("S8").ravel().astype(str)
        column[rng.random(rows) < SPARSE_MISSING[j]] = ""
        columns.append(column)
    table = np.stack(columns, axis=1)
    return ("\n".join("\t".join(row) for row in table.tolist()) + "\n").encode("ascii")


def format_ctrs(ctr: np.ndarray) -> str:
    """CTRs as ``f"{p:.6f}"`` joined by commas: compiled where they are float32 in [0, 1] (a float32
    times 10^6 is exact in float64, rounded half to even as Python's formatting rounds), anything
    else (NaN from a broken model) by Python's."""
    if ctr.dtype == np.float32 and ctr.flags.c_contiguous and (text := compiled().format_ctrs(ctr)) is not None:
        return str(text.decode("ascii"))
    return ",".join(f"{p:.6f}" for p in ctr.tolist())


def build_model(rows: tuple[int, ...]) -> Any:
    """DLRM with the reference's module names (bot_l/top_l Sequentials, emb_l ModuleList)."""
    import torch
    from torch import nn

    def mlp(sizes: tuple[int, ...], last_sigmoid: bool) -> nn.Sequential:
        layers: list[nn.Module] = []
        for i, (m, n) in enumerate(itertools.pairwise(sizes)):
            layer = nn.Linear(m, n)
            with torch.no_grad():  # the reference's initialisation
                layer.weight.normal_(0.0, float(np.sqrt(2.0 / (m + n))))
                layer.bias.normal_(0.0, float(np.sqrt(1.0 / n)))
            layers.append(layer)
            layers.append(nn.Sigmoid() if last_sigmoid and i == len(sizes) - 2 else nn.ReLU())
        return nn.Sequential(*layers)

    class DLRM(nn.Module):
        pair_i: torch.Tensor  # the interaction's lower-triangle pairs (buffers)
        pair_j: torch.Tensor

        def __init__(self) -> None:
            super().__init__()
            self.bot_l = mlp(BOTTOM_MLP, last_sigmoid=False)
            self.emb_l = nn.ModuleList()
            for n in rows:
                table = nn.EmbeddingBag(n, EMBEDDING_DIM, mode="sum")
                with torch.no_grad():
                    table.weight.uniform_(-float(np.sqrt(1.0 / n)), float(np.sqrt(1.0 / n)))
                self.emb_l.append(table)
            vectors = SPARSE + 1
            self.top_l = mlp((EMBEDDING_DIM + vectors * (vectors - 1) // 2, *TOP_MLP), last_sigmoid=True)
            lower = torch.tril_indices(vectors, vectors, offset=-1, device="cpu")  # values even in a meta build
            self.register_buffer("pair_i", lower[0], persistent=False)
            self.register_buffer("pair_j", lower[1], persistent=False)

        def forward(self, dense: Any, indices: Any) -> Any:
            """dense (n, 13) float, indices (n, 26) within each table → CTR (n,)."""
            x = self.bot_l(dense)
            offsets = torch.arange(dense.shape[0], device=dense.device)
            vectors = [x] + [table(indices[:, k], offsets) for k, table in enumerate(self.emb_l)]
            t = torch.stack(vectors, dim=1)
            z = torch.bmm(t, t.transpose(1, 2))[:, self.pair_i, self.pair_j]
            return self.top_l(torch.cat([x, z], dim=1)).squeeze(1)

    return DLRM().eval()


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    """Area under the ROC curve (Mann-Whitney U with tied ranks averaged); None without both classes."""
    positives = int(labels.sum())
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return None
    ranks = average_ranks(scores)
    return float((ranks[labels == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of ``values``, tied values sharing the mean of their ranks, and all NaN where
    any value is NaN (scipy.stats.rankdata's defaults: a model that output NaN scores no AUC): in
    numpy, since importing scipy.stats would cost each launch 0.64 s here."""
    if np.isnan(values).any():
        return np.full(len(values), np.nan)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    below = np.cumsum(counts) - counts  # how many values rank below each distinct one
    return (below + (counts + 1) / 2)[inverse.ravel()]


class Recommendation(torch_runtime.TorchModelApp):
    kind = AppKind(name="rs", title="Recommendation", model="DLRM", framework="pytorch",
                   dataset="Criteo Kaggle Display Advertising Challenge", order=3, framework_packages=("torch",))
    dataset_index = DATA_FILE
    weights_keys = ("seed", "max_rows_per_table")
    dataset_may_be_file = True
    runner: torch_runtime.FrozenOnCpu  # the model as it runs (load_model)

    @classmethod
    def generate_dataset(cls, out_dir: Path, settings: dict[str, Any]) -> dict[str, Any]:
        dataset = settings["dataset"]
        rng = np.random.default_rng(dataset["seed"])
        total = int(lines_per_sample(dataset).sum())
        with open(out_dir / DATA_FILE, "wb") as handle:
            handle.writelines(synthetic_lines(rng, min(50_000, total - first)) for first in range(0, total, 50_000))
        return {"count": dataset["count"], "lines": total, "format": "Criteo TSV (label, 13 int, 26 hex)",
                "bytes": (out_dir / DATA_FILE).stat().st_size}

    @classmethod
    def check_real_dataset(cls, root: Path, settings: dict[str, Any]) -> dict[str, Any]:
        path = cls.tsv_file(root)
        with open(path, "rb") as handle:
            head = handle.read(1 << 16).split(b"\n")[:-1]
        if not head:
            raise AppError(f"apps.rs.dataset.path {path}: no complete line in the first 64 KiB")
        parse_lines(b"\n".join(head), table_modulus(table_rows(settings.get("max_rows_per_table"))),
                    f"apps.rs.dataset.path {path}")
        spans = sample_spans(path, settings["dataset"])
        return {"count": len(spans), "lines": int(lines_per_sample(settings["dataset"])[:len(spans)].sum()),
                "file": str(path), "format": "Criteo TSV (label, 13 int, 26 hex)"}

    @staticmethod
    def tsv_file(root: Path) -> Path:
        """The TSV itself, or ``train.txt`` (Kaggle's dac.tar.gz) inside a folder."""
        path = root / DATA_FILE if root.is_dir() else root
        if not path.is_file():
            raise AppError(f"apps.rs.dataset.path {root}: no Criteo TSV file (a file, or a folder with {DATA_FILE})")
        return path

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.path = self.tsv_file(self.data_root)
        self.spans = sample_spans(self.path, self.settings["dataset"])
        self.threshold = float(self.settings.get("threshold", 0.5))
        self.table_sizes = table_rows(self.settings.get("max_rows_per_table"))
        self.modulus = table_modulus(self.table_sizes)
        self.checked_parses: list[str] = []  # samples the checked parser took (parse_lines), this repetition

    def sample_count(self) -> int:
        return len(self.spans)

    @classmethod
    def weights_tag(cls, settings: dict[str, Any]) -> str:
        return f"rows{settings.get('max_rows_per_table') or 'kaggle'}-{super().weights_tag(settings)}"

    def load_model(self) -> None:
        import torch

        self.device = torch_runtime.configure(self.threads, self.processor)
        self.weights_path = checked_weights(self.settings)
        if self.weights_path is None and self.cached_weights is not None:
            self.model = torch_runtime.load_module(lambda: build_model(self.table_sizes), self.cached_weights,
                                                   "apps.rs weights resource").eval()
        else:
            torch.manual_seed(int(self.settings.get("seed", 0)))
            self.model = build_model(self.table_sizes)
        if self.weights_path is not None:
            state = torch_runtime.load_state_dict(self.weights_path, "apps.rs.weights.path")
            try:
                self.model.load_state_dict(state, strict=True)
            except RuntimeError as err:
                raise AppError(f"apps.rs.weights.path {self.weights_path}: not a Kaggle-configuration DLRM state dict "
                               f"with these table sizes (apps.rs.max_rows_per_table must be null for a trained "
                               f"model) ({err})") from err
        self.model.to(self.device)
        self.runner = torch_runtime.FrozenOnCpu(self.model, self.device)

    def preprocess(self, index: int) -> CriteoBatch:
        start, end, rows = self.spans[index]
        with open(self.path, "rb") as handle:
            handle.seek(start)
            text = handle.read(end - start)
        labels, dense, sparse = parse_lines(text, self.modulus, f"{self.path} sample {index}", self.checked_parses,
                                            rows)
        return CriteoBatch(dense, sparse, labels, (len(labels),))

    def infer(self, batch: list[CriteoBatch] | CriteoBatch) -> list[tuple[np.ndarray, np.ndarray]]:
        import torch

        inputs = collate([batch] if isinstance(batch, CriteoBatch) else batch)
        with torch.inference_mode():
            ctr = self.runner(torch.as_tensor(inputs.dense).to(self.device),
                              torch.as_tensor(inputs.sparse).to(self.device)).float().cpu().numpy()
        cuts = np.cumsum(inputs.lines)[:-1]
        return list(zip(np.split(ctr, cuts), np.split(inputs.labels, cuts), strict=True))

    def synthetic_batch(self, batch_size: int) -> CriteoBatch:
        import torch

        bounds = self.settings["dataset"]["lines_per_sample"]
        rows = (bounds["min"] + bounds["max"]) // 2
        generator = torch.Generator().manual_seed(0)
        n = batch_size * rows
        dense = torch.rand(n, DENSE, generator=generator).mul_(8.0).to(self.device)
        sparse = torch.randint(0, 2**32, (n, SPARSE), generator=generator) % torch.as_tensor(self.modulus)
        return CriteoBatch(dense, sparse.to(self.device), np.zeros(n, dtype=np.int8), (rows,) * batch_size)

    def begin_repetition(self, out_dir: Path) -> None:
        super().begin_repetition(out_dir)
        self.predictions = open(self.out_dir / "predictions.tsv", "w")  # noqa: SIM115 - closed in end_repetition
        self.scores: list[np.ndarray] = []
        self.truth: list[np.ndarray] = []
        self.correct = 0
        self.checked_parses = []

    def postprocess(self, indices: list[int], outputs: list[tuple[np.ndarray, np.ndarray]]) -> list[bytes]:
        answers = []
        lines = []
        for index, (ctr, labels) in zip(indices, outputs, strict=True):
            clicks = ctr > self.threshold
            self.correct += int((clicks == (labels == 1)).sum())
            self.scores.append(ctr)
            self.truth.append(labels)
            lines.append(f"{index}\t{int(clicks.sum())}\t{format_ctrs(ctr)}\n")
            answers.append(ctr.astype(np.float32).tobytes())
        self.predictions.writelines(lines)
        return answers

    def end_repetition(self) -> dict[str, Any]:
        self.predictions.close()
        scores = np.concatenate(self.scores) if self.scores else np.zeros(0)
        labels = np.concatenate(self.truth) if self.truth else np.zeros(0)
        return {"accuracy": self.correct / max(len(scores), 1), "roc_auc": roc_auc(labels, scores),
                "rows_scored": len(scores), "samples_scored": len(self.scores), "threshold": self.threshold,
                # pre-processed by the slow checked parser, not the compiled one: 0 for well-formed data
                "samples_parsed_checked": len(self.checked_parses)}

    def model_provenance(self) -> dict[str, Any]:
        provenance = super().model_provenance()
        capped = self.table_sizes != KAGGLE_TABLE_ROWS
        provenance["config"] = {"embedding_dim": EMBEDDING_DIM, "bottom_mlp": list(BOTTOM_MLP),
                                "top_mlp": list(TOP_MLP), "interaction": "dot", "table_rows": list(self.table_sizes),
                                "max_rows_per_table": self.settings.get("max_rows_per_table"),
                                "kaggle_table_sizes": not capped}
        provenance["categorical_hashing"] = "hex value modulo table rows"
        return provenance
