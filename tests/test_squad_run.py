"""run_squad.py end to end on a tiny model, and one clear sentence for every bad input.

Training runs on slices of the shared dev sets (the training sets are not available
offline) and on a Chinese CMRC-style sample; each run checks the files a user reads
(predictions.json, nbest_predictions.json, null_odds.json), that the built-in scores
equal the official scripts on them, and that predict-only reruns give the same answers.
"""

from __future__ import annotations

import json
import pathlib

import keras
import numpy as np
import pytest

from bert_tf import BertConfig, BertEncoder
from fine_tune.heads import softmax
from fine_tune.squad import evaluate
from fine_tune.squad.head import SpanHead, span_loss
from fine_tune.squad.postprocess import PostprocessConfig
from fine_tune.squad.reader import read_squad
from fine_tune.cli import parse_args, run, squad_main
from tests.conftest import shared_file
from tests.test_squad_features import write_cmrc_style

UNCASED = "vocab/google_uncased_en_vocab.txt"
TINY = ["--preset=tiny", "--max_seq_length=128", "--doc_stride=48", "--max_query_length=32", "--train_batch_size=16",
        "--predict_batch_size=64", "--eval_batch_size=64", "--num_train_epochs=1", "--learning_rate=1e-4"]


@pytest.fixture(autouse=True)
def _fresh_keras_session():
    yield
    keras.backend.clear_session()


def dev_slice(relative: str, path: pathlib.Path, paragraphs: int) -> pathlib.Path:
    """The first `paragraphs` paragraphs of the first article of a shared dev set."""
    document = json.loads(shared_file(relative).read_text(encoding="utf-8"))
    document["data"] = [dict(document["data"][0], paragraphs=document["data"][0]["paragraphs"][:paragraphs])]
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def squad(output_dir: pathlib.Path, *flags: str, vocab: str = UNCASED) -> dict:
    argv = [f"--output_dir={output_dir}", f"--vocab_file={shared_file(vocab)}", *TINY, *flags]
    return run(*parse_args("squad", argv))


def read_json(path: pathlib.Path):
    return json.loads(path.read_text(encoding="utf-8"))


def assert_predictions_are_context_spans(data_file: pathlib.Path, predictions: dict[str, str]) -> None:
    """Every answer is a piece of its own context (whitespace runs aside), for every question."""
    contexts = {qa["id"]: " ".join(paragraph["context"].split())
                for article in read_json(data_file)["data"] for paragraph in article["paragraphs"]
                for qa in paragraph["qas"]}
    assert set(predictions) == set(contexts)
    for qas_id, text in predictions.items():
        assert " ".join(text.split()) in contexts[qas_id], (qas_id, text)


# === End to end ===
def test_v1_train_predict_and_predict_only_rerun(tmp_path):
    data = dev_slice("squad/dev-v1.1.json", tmp_path / "dev-v1.1-slice.json", paragraphs=6)
    out = tmp_path / "out"
    report = squad(out, "--do_train", f"--train_file={data}", "--do_predict", f"--predict_file={data}")
    predictions = read_json(out / "predictions.json")
    assert_predictions_are_context_spans(data, predictions)
    dataset = read_json(data)["data"]
    official = evaluate.evaluate_v1(dataset, predictions)
    assert report["test"] == {"predict_exact_match": official["exact_match"], "predict_f1": official["f1"]}
    nbest = read_json(out / "nbest_predictions.json")
    for qas_id, entries in nbest.items():
        assert 1 <= len(entries) <= 20 and entries[0]["text"] == predictions[qas_id]
        assert sum(entry["probability"] for entry in entries) == pytest.approx(1.0)
    assert not (out / "null_odds.json").exists() and not list(out.glob(".*.incomplete*"))
    # Predict only, from the saved model: the same answers.
    squad(out, "--do_predict", f"--predict_file={data}")
    assert read_json(out / "predictions.json") == predictions


def test_v2_train_with_eval_writes_null_odds_and_official_scores(tmp_path):
    data = dev_slice("squad/dev-v2.0.json", tmp_path / "dev-v2.0-slice.json", paragraphs=4)
    out = tmp_path / "out"
    report = squad(out, "--version_2_with_negative", "--null_score_diff_threshold=-1.5", "--do_train",
                   f"--train_file={data}", "--do_eval", "--do_predict", f"--predict_file={data}")
    predictions, null_odds = read_json(out / "predictions.json"), read_json(out / "null_odds.json")
    assert_predictions_are_context_spans(data, predictions)
    assert set(null_odds) == set(predictions)
    for qas_id, difference in null_odds.items():  # "" exactly when the difference is above the threshold
        assert (predictions[qas_id] == "") == (difference > -1.5)
    official = evaluate.evaluate_v2(read_json(data)["data"], predictions, null_odds)
    assert report["test"] == {f"predict_{key}": value for key, value in official.items()}
    assert report["eval"]["dev_HasAns_total"] + report["eval"]["dev_NoAns_total"] == len(predictions)
    assert (out / "dev_predictions.json").exists() and (out / "best" / "model.weights.h5").exists()


def test_chinese_cmrc_style_train_and_predict(tmp_path):
    data = write_cmrc_style(tmp_path / "cmrc_dev.json")
    out = tmp_path / "out"
    report = squad(out, "--do_train", f"--train_file={data}", "--do_predict", f"--predict_file={data}",
                   "--train_batch_size=4", vocab="vocab/google_zh_vocab.txt")
    predictions = read_json(out / "predictions.json")
    assert_predictions_are_context_spans(data, predictions)  # no spaces put between characters
    assert set(report["test"]) == {"predict_exact_match", "predict_f1"}


def test_span_head_learns_a_small_set(tmp_path):
    """A tiny model from scratch memorises 10 questions: targets, loss and decoding line up."""
    document = read_json(dev_slice("squad/dev-v1.1.json", tmp_path / "few.json", paragraphs=10))
    for paragraph in document["data"][0]["paragraphs"]:
        paragraph["qas"] = paragraph["qas"][:1]
    data = write(tmp_path / "few.json", document)
    report = squad(tmp_path / "out", "--do_train", f"--train_file={data}", "--do_predict", f"--predict_file={data}",
                   "--max_seq_length=256", "--doc_stride=64", "--num_train_epochs=15", "--learning_rate=1e-3",
                   "--train_batch_size=10", "--iterations_per_loop=1000")
    assert report["test"]["predict_f1"] >= 80.0, report["test"]


def test_span_loss_ignores_padding_and_the_head_outputs_float32():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (2, 9)).astype(np.float32)
    mask = (np.arange(9)[None] < np.array([[9], [6]])).astype(np.int32)
    targets = {"input_mask": mask, "start_positions": np.array([3, 5]), "end_positions": np.array([4, 5])}
    total, count = span_loss(targets, {"start_logits": logits, "end_logits": logits})
    def cross_entropy(targets_of_rows):
        return [-np.log(softmax(row[: int(m.sum())])[t]) for row, m, t in zip(logits, mask, targets_of_rows)]

    expected = sum((s + e) / 2 for s, e in zip(cross_entropy([3, 5]), cross_entropy([4, 5])))
    assert float(count) == 2 and float(total) == pytest.approx(expected, rel=1e-5)
    garbage = np.where(mask == 1, logits, 50.0).astype(np.float32)  # padding logits never count
    assert float(span_loss(targets, {"start_logits": garbage, "end_logits": garbage})[0]) == pytest.approx(float(total))
    encoder = BertEncoder(BertConfig.from_preset("tiny", vocab_size=50), dtype="mixed_bfloat16")
    model = SpanHead(PostprocessConfig()).build(encoder, 1, 0.1)
    outputs = model({"input_word_ids": np.ones((2, 9), np.int32), "input_mask": mask,
                     "input_type_ids": np.zeros((2, 9), np.int32)})
    assert {key: keras.backend.standardize_dtype(value.dtype) for key, value in outputs.items()} == {
        "start_logits": "float32", "end_logits": "float32"}


# === Bad input: one sentence, exit status 1, nothing written ===
def write(path: pathlib.Path, content) -> pathlib.Path:
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def squad_file(context: str = "Denver won.", answer_start=0, qas_id: str = "q1", **extra) -> dict:
    qa = {"id": qas_id, "question": "Who won?", "answers": [{"text": "Denver", "answer_start": answer_start}], **extra}
    return {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [qa]}]}]}


def failure(capsys, tmp_path: pathlib.Path, *flags: str) -> str:
    out = tmp_path / "out"
    assert squad_main([f"--output_dir={out}", f"--vocab_file={shared_file(UNCASED)}", "--preset=tiny", *flags]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())  # nothing half-written
    return err


@pytest.mark.parametrize("content,message", [
    ('{"data": [ {"paragraphs": ', "is not valid JSON (line 1, column"),
    ({"version": "1.1"}, "is not a SQuAD file"),
    ({"data": [{"paragraphs": [{"qas": []}]}]}, 'lacks the str field "context"'),
    (squad_file(context="  \n "), "article 0, paragraph 0 has an empty context"),
    ({"data": []}, "has no usable questions"),
])
def test_bad_files(capsys, tmp_path, content, message):
    path = write(tmp_path / "bad.json", content)
    assert message in failure(capsys, tmp_path, "--do_train", f"--train_file={path}")
    good = write(tmp_path / "good.json", squad_file())
    if "usable" not in message:  # the predict file is read (and refused) before training starts
        assert message in failure(capsys, tmp_path, "--do_train", f"--train_file={good}", "--do_predict",
                                  f"--predict_file={path}")


def test_repeated_ids_and_unanswerable_without_the_flag(capsys, tmp_path):
    document = squad_file()
    document["data"][0]["paragraphs"][0]["qas"] *= 2
    path = write(tmp_path / "twice.json", document)
    assert "the question id 'q1' appears twice" in failure(capsys, tmp_path, "--do_train", f"--train_file={path}")
    path = write(tmp_path / "v2.json", squad_file(is_impossible=True))
    assert "pass --version_2_with_negative" in failure(capsys, tmp_path, "--do_train", f"--train_file={path}")


@pytest.mark.parametrize("flags,message", [
    (["--doc_stride=400"], "--doc_stride 400 must be smaller than the room left for the context"),
    (["--max_seq_length=60", "--max_query_length=64"], "--max_seq_length 60 must be greater than --max_query_length"),
    (["--n_best_size=0"], "--n_best_size must be positive"),
])
def test_bad_lengths(capsys, tmp_path, flags, message):
    path = write(tmp_path / "ok.json", squad_file())
    assert message in failure(capsys, tmp_path, "--do_train", f"--train_file={path}", *flags)


def test_missing_file_flags(capsys, tmp_path):
    assert "--do_predict needs --predict_file" in failure(capsys, tmp_path, "--do_predict")
    assert "--do_train needs --train_file" in failure(capsys, tmp_path, "--do_train")
    assert "does not exist" in failure(capsys, tmp_path, "--do_train", f"--train_file={tmp_path / 'nope.json'}")


def test_misaligned_answers_are_skipped_counted_and_said_once(tmp_path, capsys):
    document = squad_file(context="Denver won. Carolina lost.")
    qas = document["data"][0]["paragraphs"][0]["qas"]
    qas += [dict(qas[0], id="q2", answers=[{"text": "Denver", "answer_start": 3}]),
            dict(qas[0], id="q3", answers=[{"text": "Carolina", "answer_start": 99}]),
            dict(qas[0], id="q4", answers=[{"text": "Denver", "answer_start": 5}, {"text": "Denver", "answer_start": 0}])]
    path = write(tmp_path / "misaligned.json", document)
    examples = read_squad(str(path), False, split="train")
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "3 answers have an answer_start that does not match" in err and "2 questions" in err
    assert [e.qas_id for e in examples if e.train_answer] == ["q1", "q4"]  # q4 falls back on its aligned answer
    assert read_squad(str(path), False, split="dev")[1].label == ("Denver",)  # still a gold text for scoring
