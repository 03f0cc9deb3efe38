"""NLP data, without a model: the SQuAD v1.1 file format, featurisation and span post-processing on
known text, the tokenizer guard, the vocab checksum and the checksum-verified download path (the
models: tests/integration/test_app_nlp_model.py)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from dlvirt.apps import squad
from dlvirt.apps.base import AppError, ThreadPlan, sha256_file
from dlvirt.apps.download import fetch_verified
from dlvirt.apps.nlp import QuestionAnswering, load_tokenizer, train_wordpiece_vocab

NORMANS = ("The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, "
           "a region in France. They were descended from Norse raiders and pirates from Denmark, Iceland "
           "and Norway who, under their leader Rollo, agreed to swear fealty to King Charles III of West Francia.")
NORMANS_QUESTION = "In what country is Normandy located?"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory, nlp_dataset: Path):
    """A vocab trained on the synthetic corpus plus some English, so both tokenise into sub-words."""
    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    train_wordpiece_vocab([*squad.corpus_text(nlp_dataset / squad.SQUAD_DEV_FILE), NORMANS], vocab)
    return load_tokenizer(vocab)


def encoder(tokenizer):
    def encode(text):
        encoding = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
        return encoding.ids, encoding.offsets
    return encode


def special(tokenizer):
    return tuple(tokenizer.convert_tokens_to_ids(t) for t in ("[CLS]", "[SEP]", "[PAD]"))


def gold_logits(features: squad.Features, start_char: int, end_char: int) -> tuple[np.ndarray, np.ndarray]:
    """Logits that peak on the tokens starting at ``start_char`` and ending at ``end_char``."""
    rng = np.random.default_rng(0)
    starts = rng.normal(0, 1, features.input_ids.shape)
    ends = rng.normal(0, 1, features.input_ids.shape)
    starts[features.char_spans[..., 0] == start_char] = 20
    ends[features.char_spans[..., 1] == end_char] = 20
    return starts, ends


def test_generated_file_is_squad_v1_1(nlp_dataset):
    document = json.loads((nlp_dataset / squad.SQUAD_DEV_FILE).read_text())
    assert document["version"] == "1.1"
    questions = 0
    for article in document["data"]:
        assert article["title"] and article["paragraphs"]
        for paragraph in article["paragraphs"]:
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                questions += 1
                assert qa["id"] and qa["question"].endswith("?") and len(qa["answers"]) == 3
                for answer in qa["answers"]:
                    start = answer["answer_start"]
                    assert context[start:start + len(answer["text"])] == answer["text"]
    assert questions == 40 == len(squad.read_squad(nlp_dataset / squad.SQUAD_DEV_FILE))
    info = json.loads((nlp_dataset / "dataset.json").read_text())
    assert info["source"] == "synthetic" and info["count"] == 40
    assert info["corpus_vocab"]["tokens"] > 500


def test_known_answer_span_maps_back_to_its_text(tokenizer):
    features = squad.featurise(encoder(tokenizer), special(tokenizer), NORMANS_QUESTION, NORMANS)
    assert features.windows == 1 and features.input_ids.shape == (1, squad.MAX_SEQ_LENGTH)
    start = NORMANS.index("France")
    text, _ = squad.best_answer(features, *gold_logits(features, start, start + len("France")), NORMANS)
    assert text == "France"
    # A multi-token answer that spans punctuation comes back exactly as written in the context.
    start = NORMANS.index("Normandy, a region")
    end = start + len("Normandy, a region")
    text, _ = squad.best_answer(features, *gold_logits(features, start, end), NORMANS)
    assert text == "Normandy, a region"


def test_every_generated_answer_maps_back_through_windows(nlp_dataset, tokenizer):
    """Short windows (64 tokens, stride 16) force several per question; the gold span still comes back."""
    document = json.loads((nlp_dataset / squad.SQUAD_DEV_FILE).read_text())
    checked = 0
    for article in document["data"]:
        for paragraph in article["paragraphs"]:
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                answer = qa["answers"][0]
                start, end = answer["answer_start"], answer["answer_start"] + len(answer["text"])
                features = squad.featurise(encoder(tokenizer), special(tokenizer), qa["question"], context,
                                           max_seq_length=64, doc_stride=16, max_query_length=16)
                assert features.windows > 1
                text, _ = squad.best_answer(features, *gold_logits(features, start, end), context)
                assert text == answer["text"]
                assert squad.score(text, tuple(a["text"] for a in qa["answers"])) == (1.0, 1.0)
                checked += 1
    assert checked == 40


def test_windows_follow_doc_stride_and_score_each_token_once(tokenizer):
    encode = encoder(tokenizer)
    context = " ".join([NORMANS] * 8)
    question = " ".join(["Normandy"] * 100) + "?"  # longer than the 64-token query limit
    features = squad.featurise(encode, special(tokenizer), question, context)
    doc_tokens = len(encode(context)[0])
    query = squad.MAX_QUERY_LENGTH
    window = squad.MAX_SEQ_LENGTH - query - 3
    assert features.windows == 1 + math.ceil((doc_tokens - window) / squad.DOC_STRIDE)
    assert (features.token_type_ids[:, :query + 2] == 0).all()   # [CLS] + truncated query + [SEP]
    in_context = features.char_spans[..., 0] >= 0
    assert (features.token_type_ids[in_context] == 1).all()
    # Each context token is scored in exactly one window: where it has the most context.
    starts = features.char_spans[..., 0][features.max_context]
    assert len(starts) == doc_tokens == len(set(starts.tolist()))
    # Consecutive windows start doc_stride tokens apart.
    first_chars = [features.char_spans[w, query + 2, 0] for w in range(features.windows)]
    offsets = [o[0] for o in encode(context)[1]]
    assert [offsets.index(c) for c in first_chars] == [w * squad.DOC_STRIDE for w in range(features.windows)]


def test_squad_metrics_are_the_official_ones():
    assert squad.score("the France", ("France",)) == (1.0, 1.0)
    em, f1 = squad.score("region in France", ("France", "in France"))
    assert em == 0.0 and f1 == pytest.approx(0.8)


def test_tokenizer_refuses_vocabs_it_did_not_load(tmp_path):
    bad = tmp_path / "vocab.txt"
    bad.write_text("hello\nworld\n")
    with pytest.raises(AppError, match="not a BERT vocab"):
        load_tokenizer(bad)


def test_configured_vocab_is_checksummed(nlp_dataset, tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_bytes((nlp_dataset / "vocab.txt").read_bytes())
    settings = {"architecture": "bert-tiny", "dataset": {"count": 40},
                "vocab": {"path": str(vocab), "sha256": "0" * 64}}
    app = QuestionAnswering(settings, nlp_dataset, "CPU", ThreadPlan("granted", 1, 1, 1, 1))
    with pytest.raises(AppError, match=r"vocab.path .*: sha256 [0-9a-f]{64} != vocab.sha256"):
        app.load_model()


def test_an_unknown_padding_is_named(nlp_dataset):
    settings = {"architecture": "bert-tiny", "padding": "left", "dataset": {"count": 40}}
    with pytest.raises(AppError, match=r"apps.nlp.padding 'left': known are longest, max_length"):
        QuestionAnswering(settings, nlp_dataset, "CPU", ThreadPlan("granted", 1, 1, 1, 1))


def test_real_dataset_is_registered_and_bad_paths_named(tmp_path, nlp_dataset):
    real = tmp_path / "squad"
    real.mkdir()
    (real / squad.SQUAD_DEV_FILE).write_bytes((nlp_dataset / squad.SQUAD_DEV_FILE).read_bytes())
    out = tmp_path / "registered"
    QuestionAnswering.prepare_dataset(out, {"dataset": {"path": str(real), "count": 5, "seed": 0}})
    info = json.loads((out / "dataset.json").read_text())
    assert info["source"] == "real" and info["count"] == 40 and info["official_dev_v1.1"] is False
    assert (out / "vocab.txt").is_file()
    with pytest.raises(AppError, match="apps.nlp.dataset.path"):
        QuestionAnswering.prepare_dataset(tmp_path / "x", {"dataset": {"path": str(tmp_path / "none"), "count": 1}})


def test_download_keeps_only_a_file_with_the_right_checksum(tmp_path):
    """The download code path, offline: a file:// URL through the same urllib fetch."""
    source = tmp_path / "dev-v1.1.json"
    source.write_text('{"data": [], "version": "1.1"}')
    good = sha256_file(source)
    dest = tmp_path / "downloads" / "dev-v1.1.json"
    with pytest.raises(AppError, match="sha256"):
        fetch_verified(source.as_uri(), dest, "0" * 64)
    assert not dest.exists() and list(dest.parent.iterdir()) == []
    assert fetch_verified(source.as_uri(), dest, good) == dest and sha256_file(dest) == good
    assert squad.SQUAD_DEV_SHA256 == "95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9"
