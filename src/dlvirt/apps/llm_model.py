"""LLM's model file: a decoder-only Llama-family architecture with seeded random weights and a
tokenizer of the architecture's vocabulary size, written as GGUF (the ``gguf`` package), the file
format llama.cpp loads, quantised as users run it.

Architectures are published shapes (``ARCHITECTURES``); the study's default is SmolLM2-135M's (a
Llama architecture: RMSNorm, RoPE, grouped-query attention, SwiGLU), which this 2-core machine kind
runs in seconds per repetition, and ``tiny`` is a test shape for guests under emulation. Weights are
normal(0, 0.02) as Llama's initialisation, quantised to Q8_0 or Q4_0 by the ``gguf`` package's own
quantisers (blocks of 32 along a row; a tensor whose rows are not whole blocks, and the norms, stay
F32 as llama.cpp's quantiser leaves them).

The tokenizer is SentencePiece-BPE ("llama" in GGUF, Llama 2's kind): the special tokens <unk>,
<s>, </s>, the 256 byte-fallback tokens <0x00>..<0xFF>, then BPE pieces trained with ``tokenizers``
on the dataset's text and on pseudo-words of the dataset's generator until the vocabulary has the
architecture's size exactly; a piece's score is minus its merge rank, as SentencePiece's BPE writes
it. The real SmolLM2 uses a byte-level BPE of the same size: a published GGUF (``PUBLISHED``) has it.
"""

from __future__ import annotations

import string
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlvirt.apps.base import AppError


@dataclass(frozen=True)
class Architecture:
    name: str
    title: str               # the published model whose shape this is
    layers: int
    embedding: int
    heads: int
    kv_heads: int
    feed_forward: int
    vocab: int
    context: int
    rope_theta: float
    rms_eps: float = 1e-5
    tied_embeddings: bool = False  # the output projection is the token embedding (no output.weight)
    stand_in: bool = False         # a test shape, not a published model: its rows are never evidence

    @property
    def head_dim(self) -> int:
        return self.embedding // self.heads

    def parameters(self) -> int:
        kv = self.kv_heads * self.head_dim
        per_layer = (2 * self.embedding * self.embedding + 2 * self.embedding * kv
                     + 3 * self.embedding * self.feed_forward + 2 * self.embedding)
        out = 0 if self.tied_embeddings else self.vocab * self.embedding
        return self.vocab * self.embedding + self.layers * per_layer + self.embedding + out

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "parameters": self.parameters()}


# Published shapes (their config.json); "tiny" is ours, for guests under emulation.
ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in (
    Architecture("smollm2-135m", "SmolLM2-135M (HuggingFaceTB)", layers=30, embedding=576, heads=9, kv_heads=3,
                 feed_forward=1536, vocab=49152, context=8192, rope_theta=100000.0, tied_embeddings=True),
    Architecture("tinyllama-1.1b", "TinyLlama-1.1B", layers=22, embedding=2048, heads=32, kv_heads=4,
                 feed_forward=5632, vocab=32000, context=2048, rope_theta=10000.0),
    Architecture("tiny", "a test shape (not a published model)", layers=2, embedding=64, heads=4, kv_heads=2,
                 feed_forward=128, vocab=512, context=512, rope_theta=10000.0, stand_in=True),
)}
DEFAULT_ARCHITECTURE = "smollm2-135m"
QUANTISATIONS = ("Q8_0", "Q4_0", "F16")
DEFAULT_QUANTISATION = "Q8_0"

# A published GGUF of the default architecture, for users with network (``python -m dlvirt download
# --app llm``; then apps.llm.weights.path and .sha256). The digest is the one its publisher's
# repository lists at this revision; dlvirt refuses a download that does not match it.
PUBLISHED = {
    "file": "SmolLM2-135M-Instruct-q8_0.gguf",
    "url": "https://huggingface.co/Mungert/SmolLM2-135M-Instruct-GGUF/resolve/"
           "980b4318b34b2f20e60c89d8f8a98283ec83cbd6/SmolLM2-135M-Instruct-q8_0.gguf",
    "sha256": "bc64cce8e1c11e4ed870633b557e04af718249c817c4cf8a6784116144ec3e28",
    "architecture": "smollm2-135m",
}

SPECIAL = ("<unk>", "<s>", "</s>")
UNK, BOS, EOS = 0, 1, 2
BYTE_TOKENS = tuple(f"<0x{b:02X}>" for b in range(256))
# GGUF token types (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6
SPACE = "\u2581"  # SentencePiece's word-boundary mark


def architecture(name: str) -> Architecture:
    if name not in ARCHITECTURES:
        raise AppError(f"apps.llm.architecture {name!r}: known are {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[name]


@dataclass(frozen=True)
class Vocabulary:
    tokens: list[str]
    scores: list[float]
    types: list[int]
    trained_on: dict[str, Any]


def train_vocabulary(texts: Iterable[str], extra_words: Iterable[str], size: int) -> Vocabulary:
    """A SentencePiece-BPE vocabulary of exactly ``size`` tokens: special, byte and BPE pieces trained
    on ``texts`` and then ``extra_words`` (pseudo-words that give BPE enough merges for a large
    vocabulary). Too little text for ``size`` is an error."""
    from tokenizers import SentencePieceBPETokenizer

    pieces = size - len(SPECIAL) - len(BYTE_TOKENS)
    if pieces < 100:
        raise AppError(f"a vocabulary of {size} tokens is too small (at least {len(SPECIAL) + 256 + 100})")
    texts, words = list(texts), list(extra_words)
    tokenizer = SentencePieceBPETokenizer(replacement=SPACE, add_prefix_space=True)
    alphabet = list(string.ascii_letters + string.digits + string.punctuation)
    tokenizer.train_from_iterator(texts + words, vocab_size=pieces, min_frequency=1, special_tokens=[],
                                  initial_alphabet=alphabet, limit_alphabet=len(alphabet) + 1, show_progress=False)
    learnt = [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    if len(learnt) != pieces:
        raise AppError(f"the tokenizer's corpus gave {len(learnt)} BPE pieces, {pieces} are needed: more text")
    tokens = [*SPECIAL, *BYTE_TOKENS, *learnt]
    scores = [0.0] * (len(SPECIAL) + len(BYTE_TOKENS)) + [-float(rank) for rank in range(len(learnt))]
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * len(BYTE_TOKENS) + [NORMAL] * len(learnt)
    return Vocabulary(tokens, scores, types, {"texts": len(texts), "extra_words": len(words),
                                              "method": "tokenizers SentencePiece-BPE"})


def _tensor(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    return rng.normal(0.0, 0.02, size=(rows, cols)).astype(np.float32)


def _add(writer: Any, name: str, data: np.ndarray, qtype: str) -> str:
    """Add a weight matrix quantised to ``qtype`` where its rows are whole blocks, else F32;
    return the type written."""
    import gguf

    kind = gguf.GGMLQuantizationType[qtype]
    block = gguf.GGML_QUANT_SIZES[kind][0]
    if data.ndim == 1 or data.shape[-1] % block:
        writer.add_tensor(name, data.astype(np.float32))
        return "F32"
    writer.add_tensor(name, gguf.quants.quantize(data, kind), raw_dtype=kind)
    return qtype


def write_gguf(path: Path, arch: Architecture, vocabulary: Vocabulary, seed: int,
               quantisation: str = DEFAULT_QUANTISATION) -> dict[str, Any]:
    """Write ``arch`` with seeded normal(0, 0.02) weights and ``vocabulary`` as a GGUF file; return
    what it holds (for the run record)."""
    import gguf

    if quantisation not in QUANTISATIONS:
        raise AppError(f"apps.llm.quantisation {quantisation!r}: one of {', '.join(QUANTISATIONS)}")
    if len(vocabulary.tokens) != arch.vocab:
        raise AppError(f"the vocabulary has {len(vocabulary.tokens)} tokens, {arch.name} needs {arch.vocab}")
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".partial-{path.name}")
    writer = gguf.GGUFWriter(str(partial), "llama")
    writer.add_name(f"dlvirt random {arch.name}")
    writer.add_context_length(arch.context)
    writer.add_embedding_length(arch.embedding)
    writer.add_block_count(arch.layers)
    writer.add_feed_forward_length(arch.feed_forward)
    writer.add_head_count(arch.heads)
    writer.add_head_count_kv(arch.kv_heads)
    writer.add_rope_dimension_count(arch.head_dim)
    writer.add_rope_freq_base(arch.rope_theta)
    writer.add_layer_norm_rms_eps(arch.rms_eps)
    writer.add_vocab_size(arch.vocab)
    file_type = {"Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
                 "F16": gguf.LlamaFileType.MOSTLY_F16}[quantisation]
    writer.add_file_type(file_type)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(vocabulary.tokens)
    writer.add_token_scores(vocabulary.scores)
    writer.add_token_types(vocabulary.types)
    writer.add_unk_token_id(UNK)
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(EOS)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    kv = arch.kv_heads * arch.head_dim
    types: dict[str, int] = {}

    def add(name: str, data: np.ndarray) -> None:
        written = _add(writer, name, data, quantisation)
        types[written] = types.get(written, 0) + 1

    add("token_embd.weight", _tensor(rng, arch.vocab, arch.embedding))
    for i in range(arch.layers):
        add(f"blk.{i}.attn_norm.weight", np.ones(arch.embedding, np.float32))
        add(f"blk.{i}.attn_q.weight", _tensor(rng, arch.embedding, arch.embedding))
        add(f"blk.{i}.attn_k.weight", _tensor(rng, kv, arch.embedding))
        add(f"blk.{i}.attn_v.weight", _tensor(rng, kv, arch.embedding))
        add(f"blk.{i}.attn_output.weight", _tensor(rng, arch.embedding, arch.embedding))
        add(f"blk.{i}.ffn_norm.weight", np.ones(arch.embedding, np.float32))
        add(f"blk.{i}.ffn_gate.weight", _tensor(rng, arch.feed_forward, arch.embedding))
        add(f"blk.{i}.ffn_up.weight", _tensor(rng, arch.feed_forward, arch.embedding))
        add(f"blk.{i}.ffn_down.weight", _tensor(rng, arch.embedding, arch.feed_forward))
    add("output_norm.weight", np.ones(arch.embedding, np.float32))
    if not arch.tied_embeddings:
        add("output.weight", _tensor(rng, arch.vocab, arch.embedding))
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    partial.replace(path)
    return {"architecture": arch.to_dict(), "quantisation": quantisation, "tensor_types": types, "seed": seed,
            "tokenizer": {"model": "llama (SentencePiece-BPE)", "tokens": len(vocabulary.tokens),
                          **vocabulary.trained_on}}


def read_metadata(path: Path) -> dict[str, Any]:
    """The architecture facts of a GGUF file (any publisher's): what a run record says of it."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    arch = str(reader.fields["general.architecture"].contents())
    facts: dict[str, Any] = {"architecture": arch}
    for key, name in (("block_count", "layers"), ("embedding_length", "embedding"), ("context_length", "context"),
                      ("feed_forward_length", "feed_forward"), ("attention.head_count", "heads"),
                      ("attention.head_count_kv", "kv_heads")):
        field = reader.fields.get(f"{arch}.{key}")
        if field is not None:
            facts[name] = field.contents()
    for key in ("general.name", "general.file_type", "tokenizer.ggml.model"):
        if key in reader.fields:
            facts[key] = reader.fields[key].contents()
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    facts["vocab"] = len(tokens.data) if tokens is not None else None
    facts["tensors"] = len(reader.tensors)
    return facts
