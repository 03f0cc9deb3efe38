"""SQuAD v1.1: the file format, a synthetic generator, BERT featurisation and span post-processing.

Featurisation follows the MLPerf/Google BERT reference (``create_squad_data``): the question is
truncated to 64 WordPiece tokens, the context is cut into windows of ``384 - len(question) - 3``
tokens whose starts are 128 tokens apart (``doc_stride``), each window becomes
``[CLS] question [SEP] window [SEP]`` padded to 384. A context token is scored only in the window
where it has the most context on both sides (``_check_is_max_context``). Post-processing takes the
20 best start and end logits of every window, keeps spans inside the context of at most 30 tokens,
and maps the best one back to the context's characters through the tokenizer's offsets.
"""

from __future__ import annotations

import collections
import json
import re
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlvirt.apps.base import AppError

SQUAD_DEV_FILE = "dev-v1.1.json"
SQUAD_DEV_URL = "https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v1.1.json"
SQUAD_DEV_SHA256 = "95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9"
SQUAD_DEV_QUESTIONS = 10570

MAX_SEQ_LENGTH = 384
DOC_STRIDE = 128
MAX_QUERY_LENGTH = 64
N_BEST_SIZE = 20
MAX_ANSWER_LENGTH = 30

# encode(text) -> (WordPiece ids, (char start, char end) of each token in text)
Encoder = Callable[[str], tuple[list[int], list[tuple[int, int]]]]


@dataclass(frozen=True)
class Example:
    qid: str
    question: str
    context: str
    answers: tuple[str, ...]


@dataclass
class Features:
    """Every 384-token window of one question, ready for BertForQuestionAnswering."""

    input_ids: np.ndarray       # (windows, seq) int64
    token_type_ids: np.ndarray  # (windows, seq) int64: 0 question part, 1 context part
    attention_mask: np.ndarray  # (windows, seq) int64
    char_spans: np.ndarray      # (windows, seq, 2) int32: context characters of each token, -1 outside the context
    max_context: np.ndarray     # (windows, seq) bool: the window where this context token has most context

    @property
    def windows(self) -> int:
        return int(self.input_ids.shape[0])


# -- file format --------------------------------------------------------------------------------

def read_squad(path: Path) -> list[Example]:
    """The questions of a SQuAD v1.1 JSON file, in file order."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        examples = []
        for article in document["data"]:
            for paragraph in article["paragraphs"]:
                context = paragraph["context"]
                for qa in paragraph["qas"]:
                    examples.append(Example(str(qa["id"]), qa["question"], context,
                                            tuple(a["text"] for a in qa["answers"])))
    except (OSError, ValueError, KeyError, TypeError) as err:  # ValueError: bad JSON, not UTF-8
        raise AppError(f"{path}: not a SQuAD v1.1 JSON file ({type(err).__name__}: {err})") from err
    if not examples:
        raise AppError(f"{path}: no questions in 'data'")
    return examples


def corpus_text(path: Path) -> Iterator[str]:
    """Every context and question of a SQuAD file (what a WordPiece vocab is trained on)."""
    contexts = set()
    for example in read_squad(path):
        if example.context not in contexts:
            contexts.add(example.context)
            yield example.context
        yield example.question


# -- synthetic generator -----------------------------------------------------------------------

FUNCTION_WORDS = ["the", "of", "and", "in", "to", "a", "was", "is", "for", "as", "by", "with", "on", "that", "from",
                  "at", "his", "it", "an", "were", "which", "are", "this", "be", "also", "or", "has", "had", "its",
                  "their", "after", "new", "who", "they", "but", "not", "have", "one", "been", "two", "more", "other",
                  "all", "during", "into", "most", "such", "when", "there", "first", "between", "later", "both",
                  "these", "than", "over", "only", "under", "while", "where", "many"]
WH_WORDS = ("What", "Which", "Who", "When", "Where", "How many", "In what", "What type of")
SYLLABLES = [c + v for c in "bcdfghklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou", "ea")]


def _lexicon(rng: np.random.Generator, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        parts = rng.choice(SYLLABLES, size=int(rng.integers(1, 5)))
        word = "".join(parts) + (rng.choice(["", "", "n", "s", "r", "ing", "ed", "tion"]))
        words.add(str(word))
    return [str(w) for w in rng.permutation(sorted(words))]  # random Zipf ranks, not alphabetical ones


class SquadGenerator:
    """Wikipedia-like paragraphs of pseudo-words (Zipf-distributed, with English function words,
    names, years and numbers) and extractive questions about them, in SQuAD v1.1's JSON shape.

    Sizes follow SQuAD's dev set: ~120-word contexts with a long tail (some exceed one 384-token
    window), 1-7 questions per paragraph, 1-4-word answers given by three annotators."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.lexicon = _lexicon(rng, 4000)
        ranks = np.arange(1, len(self.lexicon) + 1, dtype=np.float64)
        self.weights = (1 / ranks) / (1 / ranks).sum()

    def _word(self) -> str:
        roll = self.rng.random()
        if roll < 0.42:
            return str(self.rng.choice(FUNCTION_WORDS))
        if roll < 0.50:
            return str(self.rng.choice(self.lexicon[:800])).capitalize()
        if roll < 0.53:
            return str(int(self.rng.integers(1066, 2021)))
        if roll < 0.55:
            return f"{int(self.rng.integers(2, 100_000)):,}"
        return str(self.rng.choice(self.lexicon, p=self.weights))

    def _paragraph(self) -> tuple[str, list[list[tuple[int, str]]]]:
        """Context text and its sentences as lists of (char start, word)."""
        target = int(np.clip(self.rng.lognormal(np.log(115), 0.45), 25, 520))
        text = ""
        sentences: list[list[tuple[int, str]]] = []
        count = 0
        while count < target:
            words = [self._word() for _ in range(int(self.rng.integers(8, 31)))]
            words[0] = words[0][:1].upper() + words[0][1:]
            placed = []
            for i, word in enumerate(words):
                if text:
                    text += " "
                placed.append((len(text), word))
                text += word
                if i < len(words) - 1 and self.rng.random() < 0.07:
                    text += ","
            text += "."
            sentences.append(placed)
            count += len(words)
        return text, sentences

    def paragraph(self) -> str:
        """One context paragraph's text (LLM's prompts are made of them)."""
        return self._paragraph()[0]

    def _question(self, context: str, sentence: list[tuple[int, str]]) -> tuple[str, list[tuple[str, int]]]:
        """A question about one sentence and its three annotators' answers as (text, answer_start)."""
        length = int(self.rng.integers(1, min(4, len(sentence) - 2) + 1))
        # Answers start on a content word, as SQuAD's do (an answer "the" would score F1 0 even when right).
        content = [i for i in range(1, len(sentence) - length + 1) if sentence[i][1].lower() not in FUNCTION_WORDS]
        first = int(self.rng.choice(content)) if content else int(self.rng.integers(1, len(sentence) - length + 1))
        span = sentence[first:first + length]
        end = span[-1][0] + len(span[-1][1])
        rest = [w for _, w in sentence[:first] + sentence[first + length:]]
        keep = sorted(self.rng.choice(len(rest), size=min(len(rest), int(self.rng.integers(4, 11))), replace=False))
        question = f"{self.rng.choice(WH_WORDS)} {' '.join(rest[k] for k in keep)}?"
        answer = (context[span[0][0]:end], span[0][0])
        # Annotators mostly agree; now and then one drops the first word of a longer span.
        third = (context[span[1][0]:end], span[1][0]) if length > 1 and self.rng.random() < 0.3 else answer
        return question, [answer, answer, third]

    def document(self, questions: int) -> dict[str, Any]:
        data: list[dict[str, Any]] = []
        made = 0
        while made < questions:
            title = "_".join(str(self.rng.choice(self.lexicon[:800])).capitalize()
                             for _ in range(int(self.rng.integers(1, 4))))
            article: dict[str, Any] = {"title": title, "paragraphs": []}
            for _ in range(int(self.rng.integers(3, 12))):
                if made >= questions:
                    break
                context, sentences = self._paragraph()
                qas = []
                for _ in range(min(int(self.rng.integers(1, 8)), questions - made)):
                    sentence = sentences[int(self.rng.integers(0, len(sentences)))]
                    question, answers = self._question(context, sentence)
                    qas.append({"answers": [{"answer_start": start, "text": text} for text, start in answers],
                                "question": question, "id": f"{made:024x}"})
                    made += 1
                article["paragraphs"].append({"context": context, "qas": qas})
            data.append(article)
        return {"data": data, "version": "1.1"}


# -- featurisation -----------------------------------------------------------------------------

def _max_context(spans: list[tuple[int, int]], span_index: int, position: int) -> bool:
    """Whether window ``span_index`` gives the context token at ``position`` its most context."""
    best_score, best_index = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, index
    return best_index == span_index


def featurise(encode: Encoder, special: tuple[int, int, int], question: str, context: str,
              max_seq_length: int = MAX_SEQ_LENGTH, doc_stride: int = DOC_STRIDE,
              max_query_length: int = MAX_QUERY_LENGTH) -> Features:
    """The windows of one question over its context. ``special`` = ([CLS], [SEP], [PAD]) ids."""
    cls_id, sep_id, pad_id = special
    query_ids = encode(question)[0][:max_query_length]
    doc_ids, doc_offsets = encode(context)
    max_doc = max_seq_length - len(query_ids) - 3
    spans: list[tuple[int, int]] = []
    start = 0
    while start < len(doc_ids) or not spans:
        length = min(len(doc_ids) - start, max_doc)
        spans.append((start, length))
        if start + length >= len(doc_ids):
            break
        start += min(length, doc_stride)
    n = len(spans)
    input_ids = np.full((n, max_seq_length), pad_id, dtype=np.int64)
    token_type_ids = np.zeros((n, max_seq_length), dtype=np.int64)
    attention_mask = np.zeros((n, max_seq_length), dtype=np.int64)
    char_spans = np.full((n, max_seq_length, 2), -1, dtype=np.int32)
    max_context = np.zeros((n, max_seq_length), dtype=bool)
    head = [cls_id, *query_ids, sep_id]
    for w, (start, length) in enumerate(spans):
        tokens = head + doc_ids[start:start + length] + [sep_id]
        input_ids[w, :len(tokens)] = tokens
        attention_mask[w, :len(tokens)] = 1
        first = len(head)
        token_type_ids[w, first:len(tokens)] = 1
        char_spans[w, first:first + length] = doc_offsets[start:start + length]
        for i in range(length):
            max_context[w, first + i] = _max_context(spans, w, start + i)
    return Features(input_ids, token_type_ids, attention_mask, char_spans, max_context)


def concatenate(items: list[Features]) -> dict[str, np.ndarray]:
    """The windows of several questions as one model batch."""
    return {name: np.concatenate([getattr(f, name) for f in items])
            for name in ("input_ids", "token_type_ids", "attention_mask")}


# -- post-processing ---------------------------------------------------------------------------

def best_answer(features: Features, start_logits: np.ndarray, end_logits: np.ndarray, context: str,
                n_best_size: int = N_BEST_SIZE, max_answer_length: int = MAX_ANSWER_LENGTH) -> tuple[str, float]:
    """The highest-scoring valid span over all windows, as context text, and its score. The logits
    (windows, n) may stop short of the windows' length (apps.nlp.padding): past n is padding."""
    best_text, best_score = "", float("-inf")
    for w in range(features.windows):
        starts = np.argsort(-start_logits[w])[:n_best_size]
        ends = np.argsort(-end_logits[w])[:n_best_size]
        spans = features.char_spans[w]
        for s in starts:
            if spans[s, 0] < 0 or not features.max_context[w, s]:
                continue
            for e in ends:
                if spans[e, 0] < 0 or e < s or e - s + 1 > max_answer_length:
                    continue
                score = float(start_logits[w, s] + end_logits[w, e])
                if score > best_score:
                    best_score = score
                    best_text = context[spans[s, 0]:spans[e, 1]]
    return best_text, best_score


# -- SQuAD v1.1 metrics (the official evaluate-v1.1 definitions) -------------------------------

def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def f1_score(prediction: str, truth: str) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    common = collections.Counter(pred) & collections.Counter(gold)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(truth))


def score(prediction: str, answers: tuple[str, ...]) -> tuple[float, float]:
    """(exact match, F1) of one prediction against its gold answers (best over annotators)."""
    if not answers:
        return 0.0, 0.0
    return max(exact_match(prediction, a) for a in answers), max(f1_score(prediction, a) for a in answers)
