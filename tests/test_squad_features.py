"""SQuAD features and post-processing: the original's behaviour, checked three ways.

1. Against tf-models-official's `squad_lib` (a copy of the original run_squad.py): the
   same rows (ids, segments, token -> word map, max-context flags, training targets)
   and, from random logits, the same predictions, n-best lists and null odds, on a
   slice of the shared dev sets with default and with tiny windows.
2. Oracle logits on the WHOLE shared dev-v1.1 and dev-v2.0: EM >= 99% / F1 >= 99.5%.
3. Chinese SQuAD-format data (a CMRC-2018-style sample written here) with the Chinese
   vocabulary: character-level answers come back exactly.
"""

from __future__ import annotations

import collections
import json
import pathlib

import numpy as np
import pytest

from bert_tf.tokenization import FullTokenizer, is_cjk
from fine_tune.squad.features import SpanFeaturiser, doc_spans, max_context_masks
from fine_tune.squad.oracle import oracle_check
from fine_tune.squad.postprocess import PostprocessConfig, get_final_text, predict_examples
from fine_tune.squad.reader import Paragraph, read_squad
from tests.conftest import require_module, shared_file

UNCASED = "vocab/google_uncased_en_vocab.txt"
CHINESE = "vocab/google_zh_vocab.txt"
# (max_seq_length, doc_stride, max_query_length): the original's, and tiny windows
# that cut most contexts into many overlapping rows.
WINDOWS = [(384, 128, 64), (64, 16, 12)]


# === Small pieces ===
def original_words(context: str) -> tuple[list[str], list[int]]:
    """The original read_squad_examples loop (whitespace words, char -> word)."""
    words, char_to_word, after_space = [], [], True
    for char in context:
        if char in " \t\r\n\u202f":
            after_space = True
        else:
            if after_space:
                words.append(char)
            else:
                words[-1] += char
            after_space = False
        char_to_word.append(len(words) - 1)
    return words, char_to_word


def has_cjk(text: str) -> bool:
    return any(is_cjk(ord(char)) for char in text)


def test_words_equal_the_original_on_every_shared_context():
    """Equal where there is no CJK; with CJK, our words regroup into the original's."""
    with_cjk = 0
    for relative in ("squad/dev-v1.1.json", "squad/dev-v2.0.json"):
        data = json.loads(shared_file(relative).read_text(encoding="utf-8"))["data"]
        for article in data:
            for entry in article["paragraphs"]:
                paragraph = Paragraph.from_context(entry["context"])
                words, char_to_word = original_words(entry["context"])
                assert paragraph.text(0, len(paragraph.words) - 1) == " ".join(words)
                if has_cjk(entry["context"]):
                    with_cjk += 1
                    regrouped = np.cumsum(paragraph.spaced) - 1
                    assert [int(regrouped[w]) if w >= 0 else -1 for w in paragraph.char_to_word] == char_to_word
                else:
                    assert list(paragraph.words) == words
                    assert list(paragraph.char_to_word) == char_to_word
    assert with_cjk > 0


def original_is_max_context(spans, span_index, position) -> bool:
    best_score, best_index = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if start <= position <= end:
            score = min(position - start, end - position) + 0.01 * length
            if best_score is None or score > best_score:
                best_score, best_index = score, index
    return span_index == best_index


@pytest.mark.parametrize("num_tokens,room,stride", [(1, 5, 2), (10, 4, 3), (50, 17, 5), (300, 61, 60), (97, 96, 1)])
def test_windows_and_max_context_equal_the_original(num_tokens, room, stride):
    spans = doc_spans(num_tokens, room, stride)
    assert spans[0][0] == 0 and spans[-1][0] + spans[-1][1] == num_tokens
    masks = max_context_masks(spans, num_tokens)
    for index, ((start, length), mask) in enumerate(zip(spans, masks)):
        assert mask.tolist() == [original_is_max_context(spans, index, start + i) for i in range(length)]
    assert sum(int(mask.sum()) for mask in masks) == num_tokens  # each token predicted from one window


@pytest.mark.parametrize("pred,orig,lower,expected", [
    ("steve smith", "Steve Smith's", True, "Steve Smith"),
    ("1895", "(1895-1943).", True, "1895"),
    ("cafe", "Café!", True, "Café"),
    ("Café", "Café!", False, "Café"),
    ("北 京", "北京", True, "北京"),
    ("iphone", "第一代iPhone手机", True, "iPhone"),
    ("missing", "Paris", True, "Paris"),  # not found: the whole words
    ("model", "model—\u200b\u200bmany", True, "model—\u200b\u200bmany"),  # lengths differ: the whole words
])
def test_get_final_text(pred, orig, lower, expected):
    assert get_final_text(pred, orig, lower) == expected


def test_long_question_is_truncated_and_said_once(tmp_path, capsys):
    context = "Denver won the game. " * 3
    question = "which " + "very " * 80 + "team won?"
    data = {"data": [{"paragraphs": [{"context": context, "qas": [
        {"id": f"q{i}", "question": question, "answers": [{"text": "Denver", "answer_start": 0}]} for i in range(3)
    ]}]}]}
    path = tmp_path / "long.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    tokenizer = FullTokenizer(shared_file(UNCASED))
    features = SpanFeaturiser(doc_stride=32, max_query_length=16)(read_squad(str(path), False), tokenizer, 64, [])
    assert [window.offset for window in features.extras] == [18, 18, 18]  # [CLS] + 16 + [SEP]
    assert features.scalars["start_positions"].tolist() == [18, 18, 18]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "3 questions are longer than --max_query_length=16" in err


# === Against the original (tf-models-official squad_lib) ===
@pytest.fixture(scope="module")
def squad_lib():
    require_module("official", "tf-models-official holds a copy of the original run_squad.py")
    from official.nlp.data import squad_lib
    from official.nlp.tools import tokenization

    return squad_lib, tokenization


def dev_slice(relative: str, out: pathlib.Path, single_answer: bool) -> pathlib.Path:
    """Every 6th article, 5 paragraphs each; `single_answer`: only the first answer (the original's training format).

    Paragraphs with CJK are left out: there our words are finer than the original's.
    """
    document = json.loads(shared_file(relative).read_text(encoding="utf-8"))
    document["data"] = [
        dict(article, paragraphs=[p for p in article["paragraphs"] if not has_cjk(p["context"])][:5])
        for article in document["data"][::6]
    ]
    if single_answer:
        for article in document["data"]:
            for paragraph in article["paragraphs"]:
                for qa in paragraph["qas"]:
                    qa["answers"] = qa["answers"][:1]
    out.write_text(json.dumps(document), encoding="utf-8")
    return out


def original_features(squad_lib, path, training, version_2, tokenizer, window):
    lib, _ = squad_lib
    examples = lib.read_squad_examples(str(path), is_training=training, version_2_with_negative=version_2)
    rows = []
    max_seq_length, doc_stride, max_query_length = window

    def keep(feature, is_padding=False):
        if not is_padding:
            rows.append(feature)

    lib.convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride, max_query_length,
                                     is_training=training, output_fn=keep, batch_size=8)
    return examples, rows


def assert_same_rows(ours, theirs) -> None:
    assert len(ours) == len(theirs)
    for row, feature in enumerate(theirs):
        length = len(feature.tokens)
        window = ours.extras[row]
        assert ours.example_index[row] == feature.example_index
        assert ours.sequences["input_word_ids"][row].tolist() == feature.input_ids[:length]
        assert ours.sequences["input_type_ids"][row].tolist() == feature.segment_ids[:length]
        positions = range(window.offset, window.offset + window.length)
        assert {p: window.word(p) for p in positions} == feature.token_to_orig_map
        assert dict(zip(positions, window.max_context.tolist())) == feature.token_is_max_context


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("version_2", [False, True])
def test_training_rows_equal_the_original(squad_lib, tmp_path, window, version_2):
    relative = "squad/dev-v2.0.json" if version_2 else "squad/dev-v1.1.json"
    path = dev_slice(relative, tmp_path / "train.json", single_answer=True)
    tokenizer = original_tokenizer(squad_lib)
    _, theirs = original_features(squad_lib, path, True, version_2, tokenizer, window)
    ours = SpanFeaturiser(window[1], window[2])(
        read_squad(str(path), version_2), FullTokenizer(shared_file(UNCASED)), window[0], [])
    assert_same_rows(ours, theirs)
    assert ours.scalars["start_positions"].tolist() == [f.start_position for f in theirs]
    assert ours.scalars["end_positions"].tolist() == [f.end_position for f in theirs]


def original_tokenizer(squad_lib):
    tokenizer = squad_lib[1].FullTokenizer(str(shared_file(UNCASED)), do_lower_case=True)
    tokenizer.wordpiece_tokenizer.max_input_chars_per_word = 200  # the original's value (REFERENCE.md)
    return tokenizer


RawResult = collections.namedtuple("RawResult", ["unique_id", "start_logits", "end_logits"])


@pytest.mark.parametrize("window,n_best,max_answer", [(WINDOWS[0], 20, 30), (WINDOWS[1], 5, 4)])
@pytest.mark.parametrize("version_2,threshold", [(False, 0.0), (True, 0.0), (True, -2.0)])
def test_predictions_from_random_logits_equal_the_original(
    squad_lib, tmp_path, window, n_best, max_answer, version_2, threshold
):
    relative = "squad/dev-v2.0.json" if version_2 else "squad/dev-v1.1.json"
    path = dev_slice(relative, tmp_path / "dev.json", single_answer=False)
    examples, theirs = original_features(squad_lib, path, False, version_2, original_tokenizer(squad_lib), window)
    ours_examples = read_squad(str(path), version_2, split="dev")
    ours = SpanFeaturiser(window[1], window[2])(ours_examples, FullTokenizer(shared_file(UNCASED)), window[0], [])
    assert_same_rows(ours, theirs)
    rng = np.random.default_rng(7)
    outputs = [{key: rng.normal(0, 3, length).astype(np.float32) for key in ("start_logits", "end_logits")}
               for length in ours.lengths]
    results = [RawResult(f.unique_id, [float(x) for x in o["start_logits"]], [float(x) for x in o["end_logits"]])
               for f, o in zip(theirs, outputs)]
    texts, nbest, null_odds = squad_lib[0].postprocess_output(
        examples, theirs, results, n_best, max_answer, True, version_2_with_negative=version_2,
        null_score_diff_threshold=threshold)
    config = PostprocessConfig(n_best, max_answer, True, version_2, threshold)
    predictions = predict_examples(ours_examples, ours.example_index, ours.extras, outputs, config)
    assert {p.qas_id: p.text for p in predictions} == dict(texts)
    for prediction in predictions:
        expected = nbest[prediction.qas_id]
        assert [e.text for e in prediction.nbest] == [e["text"] for e in expected]
        assert [e.start_logit for e in prediction.nbest] == [e["start_logit"] for e in expected]
        assert [e.end_logit for e in prediction.nbest] == [e["end_logit"] for e in expected]
        assert [e.probability for e in prediction.nbest] == pytest.approx([e["probability"] for e in expected],
                                                                          abs=1e-12)
    if version_2:
        assert {p.qas_id: p.null_score_diff for p in predictions} == dict(null_odds)
    assert sum(bool(p.text) for p in predictions) > len(predictions) // 4  # real spans were compared


# === Oracle logits on the whole shared dev sets ===
def test_oracle_on_the_whole_dev_v1():
    report = oracle_check(str(shared_file("squad/dev-v1.1.json")), str(shared_file(UNCASED)), False)
    assert report.questions == 10570
    assert report.scores["exact_match"] >= 99.0 and report.scores["f1"] >= 99.5, report.scores
    # What fails is known (bench/squad.py lists it): answers inside a word ("8" of
    # "20–18"), answers longer than max_answer_length, annotation slips.
    assert len(report.failures) < 60


def test_oracle_on_the_whole_dev_v2_with_gold_no_answers():
    report = oracle_check(str(shared_file("squad/dev-v2.0.json")), str(shared_file(UNCASED)), True)
    assert report.questions == 11873
    assert report.scores["exact"] >= 99.0 and report.scores["NoAns_exact"] == 100.0, report.scores


# === Chinese (CMRC 2018 layout) ===
CHINESE_PARAGRAPHS = [  # (context, [(question, answer)]): written for this test
    ("北京是中华人民共和国的首都，位于华北平原的北部。2008年夏季奥运会在北京举行，共有204个国家和地区参加。",
     [("中国的首都是哪里？", "北京"), ("北京位于哪个平原？", "华北平原"), ("奥运会在哪一年举行？", "2008年"),
      ("有多少个国家和地区参加？", "204个国家和地区")]),
    ("苹果公司于2007年发布了第一代iPhone手机，售价为499美元。长城全长超过两万公里，是古代的军事防御工程。",
     [("第一代手机叫什么？", "iPhone"), ("售价是多少？", "499美元"), ("长城有多长？", "两万公里")]),
]


def write_cmrc_style(path: pathlib.Path) -> pathlib.Path:
    """A CMRC-2018-style file: SQuAD layout, character offsets, ids like DEV_0_QUERY_1."""
    paragraphs = [
        {"id": f"DEV_0_P{p}", "context": context, "qas": [
            {"id": f"DEV_0_QUERY_{p}{q}", "question": question,
             "answers": [{"text": answer, "answer_start": context.index(answer)}]}
            for q, (question, answer) in enumerate(qas)
        ]}
        for p, (context, qas) in enumerate(CHINESE_PARAGRAPHS)
    ]
    document = {"version": "v1.0", "data": [{"id": "DEV_0", "title": "样例", "paragraphs": paragraphs}]}
    path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.mark.parametrize("window", [(384, 128, 64), (32, 6, 8)])
def test_chinese_character_answers_come_back_exactly(tmp_path, window):
    path = write_cmrc_style(tmp_path / "cmrc_dev.json")
    report = oracle_check(str(path), str(shared_file(CHINESE)), False, max_seq_length=window[0],
                          doc_stride=window[1], max_query_length=window[2])
    assert report.failures == [] and report.scores["exact_match"] == 100.0
    words = read_squad(str(path), False)[4].paragraph.words
    assert words[10:16] == ("第", "一", "代", "iPhone", "手", "机")  # each ideograph a word, Latin runs whole
