"""`fine_tune.squad.serving.SpanAnswerer` (the SQuAD export's graph) against the Python path it mirrors:
`SpanFeaturiser` windows, `postprocess.predict_examples` and the predictor's `Answer`, fed the same logits.

A model without weights gives every row logits that depend on its token ids and positions, so
both paths see identical numbers over many windows (max_seq_length 48, doc_stride 12) and every
rule is exercised: max-context windows, n-best starts x ends, spans across windows, repeated
texts, the null answer. The trained model's parity (a fresh Python, a tiny fine-tuned model) is in
tests/test_export.py.
"""

from __future__ import annotations

import dataclasses
import functools
import json

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.hub_export import serving_function
from bert_tf.preprocessing import BertPreprocessor
from bert_tf.tokenization import FullTokenizer
from fine_tune.predictor import Answer, answer_of
from fine_tune.squad.features import SpanFeaturiser
from fine_tune.squad.postprocess import PostprocessConfig, predict_examples
from fine_tune.squad.reader import Paragraph, SquadExample
from fine_tune.squad.serving import SpanAnswerer, context_words, piece_lengths
from tests.conftest import shared_file

UNCASED = "vocab/google_uncased_en_vocab.txt"
CHINESE = "vocab/google_zh_vocab.txt"
SEQ, STRIDE, QUERY = 48, 12, 16
# Contexts where get_final_text falls back to whole words ([UNK], a length-changing cleaning) or
# maps through accents, CJK words, NUL and whitespace runs.
TRICKY = [
    ("Who?", "Café naïve 1995-95 (1895-1943). \u5317\u4eac\u5e02 ok"),
    ("What?", "a\u00a0b e\u0301t\u00e9 ctl\x00x \u2603snow\u2603 \u0130stanbul done"),
    ("Where?", "tabs\tand\r\nnew  lines\u202fhere, \u263a\u263a and [UNK] text"),
    # An [UNK] word whose cleaning also deletes a character (soft hyphen, zero-width space, ZWJ): the
    # [UNK] must not take the deleted character's place (the graph answered "\xad" alone).
    ("Which?", "\uff2c)\xad \U0001f600)\xad \uff2c)\u200b \uff21\uff22\uff23)\xad \u216b)\xad end"),
    ("Whose?", "\x00%\U0001f3fd The price was \uff15\uff10\uff05) \xad today, \U0001f468\u200d\U0001f469) ok."),
    # Two [UNK]s in a word (each its basic token), an [UNK] whose lower case grows (Hangul), Greek
    # final sigma before a period (the word's pieces differ from its basic tokens').
    ("How much?", "price \uff15\uff10\uff05) \ud55c\uad6d\uc5b4) \u0391\u03a3.\u0392 \u0391\u03a3. ok \uff15\uff10"),
    ("", "Short."),
    ("Empty?", ""),
    ("Only control?", "\x00\x01"),
]


def fake_model(inputs: dict[str, tf.Tensor], training: bool = False) -> dict[str, tf.Tensor]:
    """Start and end logits of each position from its token id and position (no weights)."""
    ids = tf.cast(inputs["input_word_ids"], tf.float32)
    position = tf.cast(tf.range(tf.shape(ids)[1]), tf.float32)[None, :]
    types = tf.cast(inputs["input_type_ids"], tf.float32)
    return {"start_logits": 4.0 * tf.sin(0.37 * ids + 1.3 * position) + types,
            "end_logits": 4.0 * tf.cos(0.51 * ids + 0.7 * position) + types}


def squad_questions(count: int) -> list[tuple[str, str]]:
    document = json.loads(shared_file("squad/dev-v1.1.json").read_text(encoding="utf-8"))
    pairs = [(qa["question"], paragraph["context"]) for article in document["data"][:2]
             for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    return pairs[::7][:count]


def python_answers(pairs, config: PostprocessConfig, model=fake_model, vocab=UNCASED) -> list[Answer]:
    tokenizer = FullTokenizer(str(shared_file(vocab)), do_lower_case=True)
    examples = [SquadExample(str(i), q, Paragraph.from_context(c), None) for i, (q, c) in enumerate(pairs)]
    features = SpanFeaturiser(STRIDE, QUERY)(examples, tokenizer, SEQ, [])
    outputs = []
    for ids, types in zip(features.sequences["input_word_ids"], features.sequences["input_type_ids"]):
        logits = model({"input_word_ids": ids[None], "input_type_ids": types[None]})
        outputs.append({key: np.asarray(value)[0] for key, value in logits.items()})
    predictions = predict_examples(examples, features.example_index, features.extras, outputs, config)
    return [answer_of(prediction) for prediction in predictions]


@functools.lru_cache(maxsize=None)
def serving(model, config: PostprocessConfig, vocab: str):
    """The export's graph of a model, config and vocabulary, traced once for any batch."""
    preprocessor = BertPreprocessor(str(shared_file(vocab)), True, SEQ, padding="longest")
    answerer = SpanAnswerer(model, preprocessor, STRIDE, QUERY, config)
    return serving_function(answerer.__call__, [tf.TensorSpec([None], tf.string)] * 2)


def graph_answers(pairs, config: PostprocessConfig, model=fake_model, vocab=UNCASED) -> dict[str, list]:
    questions, contexts = (tf.constant([pair[i] for pair in pairs], tf.string) for i in (0, 1))
    outputs = serving(model, config, vocab)(questions, contexts)
    return {key: value.numpy().tolist() for key, value in outputs.items()}


def assert_same(expected: list[Answer], got: dict[str, list], version_2: bool) -> None:
    assert len(got["answer"]) == len(expected)
    for row, answer in enumerate(expected):
        assert (got["answer"][row].decode("utf-8"), got["start"][row], got["end"][row]) == (
            answer.text, answer.start, answer.end), row
        assert got["score"][row] == pytest.approx(answer.score, abs=1e-6), row
        if version_2:
            assert got["has_answer"][row] == answer.has_answer, row
            assert got["null_score_diff"][row] == pytest.approx(answer.null_score_diff, rel=1e-6, abs=1e-5), row


@pytest.mark.parametrize("version_2", [False, True])
def test_the_graph_answers_as_the_python_path(version_2):
    pairs = squad_questions(40) + TRICKY
    # A threshold near the median difference of these logits: answered and unanswered questions.
    config = PostprocessConfig(n_best_size=20, max_answer_length=30, version_2_with_negative=version_2,
                               null_score_diff_threshold=-9.97)
    expected = python_answers(pairs, config)
    got = graph_answers(pairs, config)
    assert_same(expected, got, version_2)
    assert len({a.text for a in expected}) > 25  # the logits are no constant: many different answers
    if version_2:
        assert 5 < sum(a.has_answer for a in expected) < len(pairs) - 5
    tricky = expected[-len(TRICKY):]
    # No WordPiece in the context: no window; SQuAD 1.1's "empty" entry, SQuAD 2.0's null answer.
    assert tricky[-2:] == [Answer("", 0, 0, 1.0, False, 1e6 if version_2 else None)] * 2
    # A batch without any window (the model sees no row), and an empty batch.
    assert_same(tricky[-2:], graph_answers(TRICKY[-2:], config), version_2)
    assert graph_answers([], config)["answer"] == []


def drcd_questions(count: int) -> list[tuple[str, str]]:
    document = json.loads(shared_file("zh/drcd/DRCD_dev.json").read_text(encoding="utf-8"))
    pairs = [(qa["question"], paragraph["context"]) for article in document["data"][:3]
             for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    return pairs[::5][:count]


def test_the_words_are_the_readers():
    """In a context with CJK, each ideograph and punctuation character is a word, as
    `Paragraph.from_context` cuts it; elsewhere the original's whitespace words."""
    contexts = [c for _, c in TRICKY + squad_questions(5) + drcd_questions(10)]
    words = context_words(tf.constant(contexts))[0].to_list()
    for context, row in zip(contexts, words):
        # The graph splits a copy with NUL as U+0001 (regex_split stops at NUL).
        assert [w.decode("utf-8") for w in row] == [w.replace("\x00", "\x01") for w in Paragraph.from_context(context).words]
    assert [w.decode() for w in words[0]] == ["Café", "naïve", "1995", "-", "95", "(", "1895", "-", "1943", ")", ".",
                                              "\u5317", "\u4eac", "\u5e02", "ok"]


def test_chinese_answers_as_the_python_path():
    pairs = drcd_questions(30)
    config = PostprocessConfig(n_best_size=20, max_answer_length=30)
    expected = python_answers(pairs, config, vocab=CHINESE)
    assert_same(expected, graph_answers(pairs, config, vocab=CHINESE), False)
    assert len({a.text for a in expected}) > 5  # the questions share contexts: 9 different answers


def test_small_n_best_and_short_answers():
    pairs = squad_questions(12) + TRICKY[:3]
    config = PostprocessConfig(n_best_size=3, max_answer_length=2)
    assert_same(python_answers(pairs, config), graph_answers(pairs, config), False)


def peak_model(start_token: int, end_token: int):
    """Logits that pick the span from the first `start_token` to the last `end_token` of a row's context."""
    def model(inputs, training=False):
        ids, types = inputs["input_word_ids"], tf.cast(inputs["input_type_ids"], tf.float32)
        start = tf.where(tf.equal(ids, start_token), 10.0, 0.0) * types
        end = tf.where(tf.equal(ids, end_token), 10.0, 0.0) * types
        return {"start_logits": start, "end_logits": end}
    return model


def test_whole_words_where_get_final_text_falls_back():
    """A span from [UNK] ("☃") or a word that cleaning shortens ("e" + U+0301): the whole words, as the original."""
    tokenizer = FullTokenizer(str(shared_file(UNCASED)), do_lower_case=True)
    unk, snow = tokenizer.convert_tokens_to_ids(["[UNK]", "snow"])
    config = PostprocessConfig(n_best_size=5)
    pairs = [("What?", "see (\u2603 snow) now")]
    model = peak_model(unk, snow)
    assert dataclasses.astuple(python_answers(pairs, config, model)[0])[:3] == ("(\u2603 snow)", 4, 12)
    assert_same(python_answers(pairs, config, model), graph_answers(pairs, config, model), False)
    accent = [("What?", "the e\u0301te\u0301 now")]
    first, = tokenizer.convert_tokens_to_ids(tokenizer.tokenize("e\u0301te\u0301")[:1])
    model = peak_model(first, first)
    assert dataclasses.astuple(python_answers(accent, config, model)[0])[:3] == ("e\u0301te\u0301", 4, 9)
    assert_same(python_answers(accent, config, model), graph_answers(accent, config, model), False)


def test_the_one_documented_difference_an_earlier_occurrence_in_the_word():
    """get_final_text's `str.find` answers the first "95" of "1995-95"; the graph the span's own characters."""
    tokenizer = FullTokenizer(str(shared_file(UNCASED)), do_lower_case=True)
    assert tokenizer.tokenize("1995-95") == ["1995", "-", "95"]
    piece, = tokenizer.convert_tokens_to_ids(["95"])
    pairs = [("When?", "in 1995-95 it was")]
    config = PostprocessConfig(n_best_size=5)
    python, = python_answers(pairs, config, peak_model(piece, piece))
    got = graph_answers(pairs, config, peak_model(piece, piece))
    assert (python.text, python.start, python.end) == ("95", 5, 7)  # inside "1995"
    assert (got["answer"][0].decode(), got["start"][0], got["end"][0]) == ("95", 8, 10)
    assert got["score"][0] == pytest.approx(python.score, abs=1e-6)


def test_piece_lengths_of_the_vocabulary():
    lengths = piece_lengths(str(shared_file(UNCASED)))
    tokenizer = FullTokenizer(str(shared_file(UNCASED)), do_lower_case=True)
    ids = tokenizer.convert_tokens_to_ids(["the", "##cos", "[UNK]"])
    assert [lengths[i] for i in ids] == [3, 3, -1]
