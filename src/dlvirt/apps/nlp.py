"""NLP: extractive question answering with BERT-large (PyTorch, transformers) on SQuAD v1.1.

The model is ``BertForQuestionAnswering`` built from a ``BertConfig`` (MLPerf: 24 layers, hidden
1024, 16 heads, sequence 384) with random weights unless a checkpoint is configured. One LoadGen
sample is one SQuAD question: pre-processing tokenises its question and context with a WordPiece
vocab and cuts them into 384-token windows (``squad.featurise``), inference runs every window of
the batch's questions (as far as the longest reaches: ``apps.nlp.padding``), post-processing
searches the n best spans back to answer text and scores it (exact match / F1) against the
annotators' answers.

The vocab is the real BERT ``vocab.txt`` when ``apps.nlp.vocab.path`` is set; otherwise the dataset
rule trains a WordPiece vocab on the dataset's own text with ``tokenizers`` (offline), so words are
split into sub-words as BERT's tokeniser would split real text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from dlvirt.apps import squad, torch_runtime
from dlvirt.apps.base import DATASET_INFO, AppError, checked_weights, sha256_file
from dlvirt.core import formats
from dlvirt.core.atomic import write_json_atomic, write_text_atomic
from dlvirt.core.formats import read_document
from dlvirt.core.kinds import AppKind

# BertConfig sizes of the published BERT models (Devlin et al.; Turc et al. for mini/tiny).
ARCHITECTURES: dict[str, dict[str, Any]] = {
    "bert-large": {"num_hidden_layers": 24, "hidden_size": 1024, "num_attention_heads": 16, "intermediate_size": 4096},
    "bert-base": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072},
    "bert-mini": {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024},
    "bert-tiny": {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 512},
}
MLPERF_ARCHITECTURE = "bert-large"
BERT_VOCAB_SIZE = 30522  # the uncased BERT vocab.txt; the embedding table keeps this size
CORPUS_VOCAB = "vocab.txt"
# What an inference call computes of its windows (apps.nlp.padding): a window's tokens are a prefix,
# the rest is padding that the attention mask hides from every real token, so that cutting it off
# changes no real token's logits (within float rounding; tests/unit/test_app_nlp.py)
PADDING = {
    "longest": "windows cut after the batch's longest (padding the attention mask hides is not computed)",
    "max_length": f"every window at all {squad.MAX_SEQ_LENGTH} positions, padding included (MLPerf's reference)",
}
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def train_wordpiece_vocab(texts: Iterable[str], out_path: Path, vocab_size: int = BERT_VOCAB_SIZE) -> int:
    """Train an uncased BERT WordPiece vocab on ``texts`` and write it as ``vocab.txt``; return its size."""
    import string

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                        initial_alphabet=list(string.ascii_lowercase + string.digits
                                                              + string.punctuation),
                                        show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    write_text_atomic(out_path, "".join(f"{token}\n" for token, _ in vocab))
    return len(vocab)


def load_tokenizer(vocab: Path) -> Any:
    """BERT's (fast, ``tokenizers``-backed) tokenizer on ``vocab``. ``vocab=`` and not ``vocab_file=``:
    transformers 5 silently ignores ``vocab_file`` and returns a 5-token tokenizer, so the size is
    checked too. (``BertTokenizerFast`` is the same class in transformers 5.)"""
    from transformers import BertTokenizer

    tokens = [line for line in vocab.read_text(encoding="utf-8").splitlines() if line]
    missing = [t for t in SPECIAL_TOKENS[:4] if t not in tokens]
    if missing:  # the tokenizer would silently add them as extra tokens
        raise AppError(f"{vocab}: not a BERT vocab (no {', '.join(missing)})")
    tokenizer = BertTokenizer(vocab=str(vocab), do_lower_case=True)
    if tokenizer.vocab_size != len(tokens):
        raise AppError(f"{vocab}: the tokenizer loaded {tokenizer.vocab_size} tokens, the file has {len(tokens)}")
    return tokenizer


def bert_config(architecture: str, vocab_size: int) -> Any:
    """The BertConfig of ``architecture`` (sequence 512 positions, 2 token types, as BERT)."""
    from transformers import BertConfig

    return BertConfig(vocab_size=max(BERT_VOCAB_SIZE, vocab_size), max_position_embeddings=512,
                      type_vocab_size=2, **ARCHITECTURES[architecture])


def squad_file(root: Path) -> Path:
    """A SQuAD JSON file given as itself or as the folder holding dev-v1.1.json."""
    return root if root.is_file() else root / squad.SQUAD_DEV_FILE


class QuestionAnswering(torch_runtime.TorchModelApp):
    kind = AppKind(name="nlp", title="Question answering", model="BERT-large", framework="pytorch",
                   dataset="SQuAD v1.1 dev", order=2, framework_packages=("torch",),
                   packages=("transformers", "tokenizers"))
    dataset_index = squad.SQUAD_DEV_FILE
    weights_keys = ("seed", "architecture", "vocab")
    dataset_may_be_file = True

    # -- dataset ------------------------------------------------------------------------------
    @classmethod
    def dataset_path_problem(cls, path: Path) -> str | None:
        """Besides its place, the file must read as SQuAD v1.1 JSON (any other file is refused
        when the config is checked, not in the job)."""
        why = super().dataset_path_problem(path)
        if why is None:
            try:
                squad.read_squad(squad_file(path))
            except AppError as err:
                return str(err).removeprefix(f"{squad_file(path)}: ")
        return why

    @classmethod
    def prepare_dataset(cls, out_dir: Path, settings: dict[str, Any]) -> None:
        super().prepare_dataset(out_dir, settings)
        # The corpus vocab is trained on the dataset's own text, real or synthetic; it is used
        # unless apps.nlp.vocab.path names BERT's vocab.txt.
        out_dir = Path(out_dir)
        info = read_document(out_dir / DATASET_INFO, "dataset info")
        source = squad_file(Path(info["root"])) if info["root"] else out_dir / squad.SQUAD_DEV_FILE
        tokens = train_wordpiece_vocab(squad.corpus_text(source), out_dir / CORPUS_VOCAB)
        info["corpus_vocab"] = {"file": CORPUS_VOCAB, "tokens": tokens, "trained_on": str(source)}
        write_json_atomic(out_dir / DATASET_INFO, formats.stamped("dataset info", info))

    @classmethod
    def generate_dataset(cls, out_dir: Path, settings: dict[str, Any]) -> dict[str, Any]:
        dataset = settings["dataset"]
        document = squad.SquadGenerator(np.random.default_rng(dataset["seed"])).document(dataset["count"])
        path = out_dir / squad.SQUAD_DEV_FILE
        write_text_atomic(path, json.dumps(document))
        contexts = sum(len(a["paragraphs"]) for a in document["data"])
        return {"count": dataset["count"], "format": "SQuAD v1.1 JSON", "bytes": path.stat().st_size,
                "articles": len(document["data"]), "contexts": contexts}

    @classmethod
    def check_real_dataset(cls, root: Path, settings: dict[str, Any]) -> dict[str, Any]:
        path = squad_file(root)
        if not path.is_file():
            raise AppError(f"apps.nlp.dataset.path {root}: no SQuAD JSON file (expected {squad.SQUAD_DEV_FILE} "
                           f"or the file itself)")
        examples = squad.read_squad(path)
        digest = sha256_file(path)
        return {"count": len(examples), "format": "SQuAD v1.1 JSON", "file": str(path), "sha256": digest,
                "official_dev_v1.1": digest == squad.SQUAD_DEV_SHA256}

    @classmethod
    def download_dataset(cls, out_dir: Path) -> list[Path]:
        from dlvirt.apps.download import fetch_verified

        return [fetch_verified(squad.SQUAD_DEV_URL, Path(out_dir) / squad.SQUAD_DEV_FILE, squad.SQUAD_DEV_SHA256)]

    # -- model and phases ---------------------------------------------------------------------
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.examples = squad.read_squad(squad_file(self.data_root))
        limit = self.settings["dataset"].get("count")
        if self.dataset_info["source"] == "real" and limit:
            self.examples = self.examples[:limit]
        self.architecture = self.settings.get("architecture", MLPERF_ARCHITECTURE)
        if self.architecture not in ARCHITECTURES:
            raise AppError(f"apps.nlp.architecture {self.architecture!r}: known are {', '.join(ARCHITECTURES)}")
        self.padding = self.settings.get("padding", "longest")
        if self.padding not in PADDING:
            raise AppError(f"apps.nlp.padding {self.padding!r}: known are {', '.join(PADDING)}")

    def sample_count(self) -> int:
        return len(self.examples)

    def _vocab(self) -> tuple[Path, dict[str, Any]]:
        configured = checked_weights(self.settings, "vocab")
        if configured is not None:
            return configured, {"source": "configured", "path": str(configured), "sha256": sha256_file(configured)}
        path = self.dataset_dir / CORPUS_VOCAB
        if not path.is_file():
            raise AppError(f"{path} is missing: rerun the dataset rule, or set apps.nlp.vocab.path")
        return path, {"source": "trained on the dataset's text (tokenizers WordPiece)", "path": str(path),
                      "sha256": sha256_file(path)}

    def load_model(self) -> None:
        import torch
        from transformers import BertForQuestionAnswering

        self.device = torch_runtime.configure(self.threads, self.processor)
        vocab_path, self.vocab_info = self._vocab()
        self.tokenizer = load_tokenizer(vocab_path)
        self.backend = self.tokenizer.backend_tokenizer  # no truncation/padding state: safe across threads
        cls_id, sep_id, pad_id = (self.tokenizer.convert_tokens_to_ids(t) for t in ("[CLS]", "[SEP]", "[PAD]"))
        self.special: tuple[int, int, int] = (cls_id, sep_id, pad_id)
        self.vocab_info["tokens"] = self.tokenizer.vocab_size
        self.config = bert_config(self.architecture, self.tokenizer.vocab_size)
        self.weights_path = checked_weights(self.settings)
        if self.weights_path is None and self.cached_weights is not None:
            self.model = torch_runtime.load_module(lambda: BertForQuestionAnswering(self.config),
                                                   self.cached_weights, "apps.nlp weights resource").eval()
        else:
            torch.manual_seed(int(self.settings.get("seed", 0)))
            self.model = BertForQuestionAnswering(self.config).eval()
        if self.weights_path is not None:
            self._load_checkpoint(self.weights_path)
        self.model.to(self.device)

    def import_framework(self) -> None:
        import torch  # noqa: F401
        from transformers import BertForQuestionAnswering  # noqa: F401

    @classmethod
    def weights_tag(cls, settings: dict[str, Any]) -> str:
        return f"{settings.get('architecture', MLPERF_ARCHITECTURE)}-{super().weights_tag(settings)}"

    def _load_checkpoint(self, path: Path) -> None:
        state = torch_runtime.load_state_dict(path, "apps.nlp.weights.path")
        # Unexpected keys (a pooler the QA model has no use for) are fine; missing ones are not.
        result = self.model.load_state_dict(state, strict=False)
        if result.missing_keys:
            raise AppError(f"apps.nlp.weights.path {path}: {len(result.missing_keys)} {self.architecture} "
                           f"parameters missing from the checkpoint, e.g. {result.missing_keys[:3]}")

    def _encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        encoding = self.backend.encode(text, add_special_tokens=False)
        return encoding.ids, encoding.offsets

    def preprocess(self, index: int) -> squad.Features:
        example = self.examples[index]
        return squad.featurise(self._encode, self.special, example.question, example.context)

    def infer(self, batch: list[squad.Features]) -> list[tuple[squad.Features, np.ndarray, np.ndarray]]:
        import torch

        arrays = squad.concatenate(batch)
        if self.padding == "longest":
            length = int(arrays["attention_mask"].sum(axis=1).max())
            arrays = {k: v[:, :length] for k, v in arrays.items()}
        inputs = {k: torch.from_numpy(v).to(self.device) for k, v in arrays.items()}
        with torch.inference_mode():
            out = self.model(**inputs)
        starts = out.start_logits.float().cpu().numpy()
        ends = out.end_logits.float().cpu().numpy()
        results = []
        first = 0
        for features in batch:
            last = first + features.windows
            results.append((features, starts[first:last], ends[first:last]))
            first = last
        return results

    def synthetic_batch(self, batch_size: int) -> list[squad.Features]:
        rng = np.random.default_rng(0)
        cls_id, sep_id, _ = self.special
        batch = []
        for _ in range(batch_size):
            query = int(rng.integers(8, squad.MAX_QUERY_LENGTH + 1))
            ids = rng.integers(len(SPECIAL_TOKENS), self.tokenizer.vocab_size, size=(1, squad.MAX_SEQ_LENGTH))
            ids[0, [0, query + 1, -1]] = (cls_id, sep_id, sep_id)
            types = np.zeros_like(ids)
            types[0, query + 2:] = 1
            batch.append(squad.Features(ids.astype(np.int64), types, np.ones_like(ids),
                                        np.full((1, squad.MAX_SEQ_LENGTH, 2), -1, np.int32),
                                        np.zeros((1, squad.MAX_SEQ_LENGTH), bool)))
        return batch

    def begin_repetition(self, out_dir: Path) -> None:
        super().begin_repetition(out_dir)
        self.predictions: dict[str, str] = {}
        self.scores: list[tuple[float, float]] = []
        self.windows = 0

    def postprocess(self, indices: list[int],
                    outputs: list[tuple[squad.Features, np.ndarray, np.ndarray]]) -> list[bytes]:
        answers = []
        for index, (features, starts, ends) in zip(indices, outputs, strict=True):
            example = self.examples[index]
            text, _ = squad.best_answer(features, starts, ends, example.context)
            self.predictions[example.qid] = text
            self.scores.append(squad.score(text, example.answers))
            self.windows += features.windows
            answers.append(text.encode("utf-8"))
        return answers

    def end_repetition(self) -> dict[str, Any]:
        write_json_atomic(self.out_dir / "predictions.json", self.predictions)
        seen = max(len(self.scores), 1)
        exact, f1 = np.sum(self.scores, axis=0) if self.scores else (0.0, 0.0)
        # windows = MLPerf's sample unit (features); one of our samples is a question
        return {"exact_match": 100 * float(exact) / seen, "f1": 100 * float(f1) / seen,
                "scored": len(self.scores), "windows": self.windows}

    def model_provenance(self) -> dict[str, Any]:
        provenance = super().model_provenance()
        mlperf = self.architecture == MLPERF_ARCHITECTURE
        provenance["model"] = self.architecture.replace("bert", "BERT")
        if not mlperf:
            provenance["note"] = f"NOT the MLPerf BERT-large: apps.nlp.architecture is {self.architecture}"
        provenance.update({"architecture": self.architecture, "mlperf_reference_size": mlperf,
                           "config": {**ARCHITECTURES[self.architecture], "vocab_size": self.config.vocab_size,
                                      "max_seq_length": squad.MAX_SEQ_LENGTH, "doc_stride": squad.DOC_STRIDE,
                                      "max_query_length": squad.MAX_QUERY_LENGTH},
                           "vocab": self.vocab_info, "padding": self.padding, "padding_note": PADDING[self.padding]})
        return provenance
