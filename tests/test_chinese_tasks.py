"""The Chinese downstream sets of the shared data through run_classifier.py, run_ner.py and
run_squad.py: ChnSentiCorp, TNEWS, Weibo NER, People's Daily (split), DRCD.

Each task trains a tiny model for one short epoch on a small slice of the real shared
file and is scored; the test recomputes the score from the prediction files written,
with an independent reference (seqeval for NER, the gold labels for accuracy, the
Chinese metric's own definition for DRCD), so the score is the one the files hold.
CLUENER2020 has its own tests (tests/test_cluener.py).
"""

from __future__ import annotations

import json
import pathlib
import shutil

import keras
import numpy as np
import pytest

from fine_tune.cli import parse_args, run
from fine_tune.export import main as export_main
from fine_tune.predictor import load_task_model
from fine_tune.squad import evaluate
from fine_tune.squad.oracle import oracle_check
from fine_tune.squad.reader import read_squad
from fine_tune.tagging import ConllReader, iob1_to_iob2, is_iob1, read_conll, weibo_character
from tests.conftest import require_module, shared_file
from tests.test_fine_tune_tasks import error_of, fine_tune, read_rows, slice_of, submission, write_rows

CHINESE = "vocab/google_zh_vocab.txt"


@pytest.fixture(autouse=True)
def _fresh_keras_session():
    yield
    keras.backend.clear_session()


def chinese(family: str, task: str, data: pathlib.Path, out: pathlib.Path, *flags: str) -> dict:
    return fine_tune(family, task, data, out, "--learning_rate=3e-4", *flags, vocab=CHINESE)


def accuracy_of_file(predictions: pathlib.Path, gold: list[str]) -> float:
    rows = submission(predictions)
    assert len(rows) == len(gold)
    return sum(row[1] == label for row, label in zip(rows, gold)) / len(gold)


# === ChnSentiCorp ===
def test_chnsenticorp_trains_and_scores(tmp_path):
    data = tmp_path / "chnsenticorp"
    write_rows(data / "train.tsv", slice_of("zh/chnsenticorp/train.tsv", 0, 48))
    dev = slice_of("zh/chnsenticorp/dev.tsv", 0, 32)
    write_rows(data / "dev.tsv", dev)
    out = tmp_path / "out"
    report = chinese("classifier", "chnsenticorp", data, out, "--do_train", "--do_eval")
    assert report["labels"] == ["0", "1"] and set(report["eval"]) == {"dev_accuracy"}
    assert dev[0] == ["label", "text_a"]
    gold = [row[0] for row in dev[1:]]
    assert report["eval"]["dev_accuracy"] == pytest.approx(accuracy_of_file(out / "dev_predictions.tsv", gold))


# === TNEWS ===
def tnews_lines(name: str, start: int, count: int) -> list[str]:
    lines = shared_file(f"zh/tnews/{name}").read_text(encoding="utf-8").splitlines()
    return lines[start : start + count]


def write_tnews(folder: pathlib.Path, train: list[str], dev: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.json").write_text("\n".join(train) + "\n", encoding="utf-8")
    (folder / "dev.json").write_text("\n".join(dev) + "\n", encoding="utf-8")
    (folder / "labels.json").write_bytes(shared_file("zh/tnews/labels.json").read_bytes())


def test_tnews_labels_from_labels_json_and_accuracy(tmp_path):
    data = tmp_path / "tnews"
    dev = tnews_lines("dev.json", 0, 40)
    write_tnews(data, tnews_lines("train.json", 0, 64), dev)
    out = tmp_path / "out"
    report = chinese("classifier", "tnews", data, out, "--do_train", "--do_eval")
    # labels.json's 15 codes in its order (105 and 111 are not TNEWS labels), whatever the slice holds.
    assert report["labels"] == ["100", "101", "102", "103", "104", "106", "107", "108", "109", "110", "112", "113",
                                "114", "115", "116"]  # fmt: skip
    gold = [json.loads(line)["label"] for line in dev]
    assert report["eval"]["dev_accuracy"] == pytest.approx(accuracy_of_file(out / "dev_predictions.tsv", gold))
    assert len(read_rows(out / "dev_results.tsv")[0]) == 15  # one probability a label
    # The finished run predicts and exports without the data dir it trained from (a
    # missing labels.json failed loading; the export asked the reader for file layouts it has not).
    shutil.rmtree(data)
    texts = [json.loads(line)["sentence"] for line in dev]
    predicted = load_task_model(out).predict(texts)
    assert [p.label for p in predicted] == [row[1] for row in submission(out / "dev_predictions.tsv")]
    assert export_main([f"--model_dir={out}", f"--export_dir={tmp_path / 'export'}"]) == 0
    exported = load_task_model(tmp_path / "export").predict(texts)
    assert [p.label for p in exported] == [p.label for p in predicted]
    np.testing.assert_allclose([p.probabilities for p in exported], [p.probabilities for p in predicted], atol=1e-5)


def test_tnews_bad_json_line_names_file_and_line(tmp_path, capsys):
    train = tnews_lines("train.json", 0, 5)
    train[3] = train[3][:-1]  # the closing brace lost
    write_tnews(tmp_path, train, tnews_lines("dev.json", 0, 2))
    argv = ["--task=tnews", f"--data_dir={tmp_path}", f"--output_dir={tmp_path / 'out'}",
            f"--vocab_file={shared_file(CHINESE)}", "--preset=tiny", "--do_train"]
    message = error_of(capsys, "classifier", argv)
    assert message.startswith(f"error: {tmp_path / 'train.json'} line 4 is not a JSON object: ")
    assert not (tmp_path / "out").exists()


def test_tnews_label_missing_from_labels_json_names_the_line(tmp_path, capsys):
    train = tnews_lines("train.json", 0, 5)
    train[2] = train[2].replace('"label": "', '"label": "9', 1)
    write_tnews(tmp_path, train, tnews_lines("dev.json", 0, 2))
    argv = ["--task=tnews", f"--data_dir={tmp_path}", f"--output_dir={tmp_path / 'out'}",
            f"--vocab_file={shared_file(CHINESE)}", "--preset=tiny", "--do_train"]
    message = error_of(capsys, "classifier", argv)
    assert f"{tmp_path / 'train.json'} line 3: unknown label '9" in message


# === NER: Weibo and People's Daily ===
def sentences_of(relative: str) -> list[str]:
    """The blank-line-separated sentences of a shared one-character-a-line file."""
    return [block for block in shared_file(relative).read_text(encoding="utf-8").split("\n\n") if block.strip()]


def write_sentences(path: pathlib.Path, sentences: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join(sentences) + "\n\n", encoding="utf-8")


def seqeval_scores(predictions: pathlib.Path) -> dict[str, float]:
    """seqeval's entity scores (its default, conlleval mode) of a predictions file: gold second to last."""
    require_module("seqeval", "the reference entity-level scorer")
    from seqeval.metrics import f1_score, precision_score, recall_score

    gold, predicted = [], []
    for block in predictions.read_text(encoding="utf-8").split("\n\n"):
        lines = [line.split() for line in block.splitlines() if line.strip()]
        if lines:
            gold.append([cells[-2] for cells in lines])
            predicted.append([cells[-1] for cells in lines])
    return {"precision": precision_score(gold, predicted), "recall": recall_score(gold, predicted),
            "f1": f1_score(gold, predicted)}  # fmt: skip


def assert_scores_are_seqeval(report: dict[str, float], prefix: str, predictions: pathlib.Path) -> None:
    expected = seqeval_scores(predictions)
    for name, value in expected.items():
        assert report[f"{prefix}_{name}"] == pytest.approx(value), name


def test_weibo_characters_are_the_words_and_the_files_bio():
    sentences = read_conll(str(shared_file("zh/weibo_ner/weiboNER_2nd_conll.dev")), weibo_character)
    words = [word for sentence in sentences for word in sentence.words]
    # A line is a character and its place in its word ("口0 腔1 溃2 疡3"), but for 16
    # lines whose emoji the release lost as two U+FFFD: one character a word.
    columns = [cells[0] for sentence in sentences for cells in sentence.lines]
    assert sum(not column[1:].isdigit() for column in columns) == columns.count("\ufffd\ufffd0") == 16
    assert len(words) == 14509 and all(len(word) == 1 for word in words)
    assert "".join(words[:9]) == "口腔溃疡加上这玩意"
    # BIO, with 10 slips (an entity starting with I-) in train: not CoNLL-2003's IOB1.
    weibo = read_conll(str(shared_file("zh/weibo_ner/weiboNER_2nd_conll.train")), weibo_character)
    slips = sum(a != b for s in weibo for a, b in zip(s.label, iob1_to_iob2(s.label)))
    assert slips == 10 and not is_iob1([s.label for s in weibo])
    assert is_iob1([s.label for s in read_conll(str(shared_file("conll2003/eng.testa")))])


def test_weibo_ner_train_dev_and_test(tmp_path):
    data = tmp_path / "weibo"
    for name, count in (("train", 80), ("dev", 24), ("test", 24)):
        file = f"weiboNER_2nd_conll.{name}"
        write_sentences(data / file, sentences_of(f"zh/weibo_ner/{file}")[:count])
    out = tmp_path / "out"
    report = chinese("ner", "weibo_ner", data, out, "--do_train", "--do_eval", "--do_predict")
    # All 17 tags, though the 80 training sentences lack GPE.NOM (and the full file has them all).
    assert report["labels"] == list(ConllReader({}, "iob2").labels_in(
        read_conll(str(shared_file("zh/weibo_ner/weiboNER_2nd_conll.train")))))
    assert "B-GPE.NOM" not in (data / "weiboNER_2nd_conll.train").read_text("utf-8")
    assert_scores_are_seqeval(report["eval"], "dev", out / "dev_predictions.txt")
    assert_scores_are_seqeval(report["test"], "test", out / "test_predictions.txt")
    # The written lines are the file's, plus the predicted tag, in BIO (no IOB1 rewrite).
    source = [line for line in (data / "weiboNER_2nd_conll.test").read_text("utf-8").splitlines() if line.strip()]
    written = [line for line in (out / "test_predictions.txt").read_text("utf-8").splitlines() if line.strip()]
    assert [line.rsplit(" ", 1)[0] for line in written] == [" ".join(line.split()) for line in source]


def test_peoples_daily_split_is_every_fifth_sentence():
    from fine_tune.config import RunConfig
    from fine_tune.registry import build_task
    from fine_tune.tagging import PeoplesDailyConfig

    folder = str(shared_file("zh/peoples_daily_ner"))
    task = build_task(PeoplesDailyConfig("peoples_daily", folder, split_dev_every=5), RunConfig("", do_train=True))
    train = task.reader.read(folder, "train")[0].examples
    dev = task.reader.read(folder, "dev")[0].examples
    raw = sentences_of("zh/peoples_daily_ner/example.dev")
    assert (len(train), len(dev), len(raw)) == (1855, 463, 2318)
    # Dev: the file's 5th, 10th, ... sentences; train: the rest, in order.
    characters = ["".join(line.split()[0] for line in block.splitlines()) for block in raw]
    assert ["".join(s.words) for s in dev] == characters[4::5]
    assert ["".join(s.words) for s in train] == [c for k, c in enumerate(characters) if k % 5 != 4]


def test_peoples_daily_trains_and_scores_on_its_dev_file_alone(tmp_path, capsys):
    data = tmp_path / "pd"
    write_sentences(data / "example.dev", sentences_of("zh/peoples_daily_ner/example.dev")[:100])
    flags = ["--task=peoples_daily", f"--data_dir={data}", f"--output_dir={tmp_path / 'refused'}",
             f"--vocab_file={shared_file(CHINESE)}", "--preset=tiny", "--do_train"]
    assert "add --split_dev_every=5" in error_of(capsys, "ner", flags)
    out = tmp_path / "out"
    report = chinese("ner", "peoples_daily", data, out, "--split_dev_every=5", "--do_train", "--do_eval")
    assert {"B-LOC", "B-ORG", "B-PER"} <= set(report["labels"])
    assert_scores_are_seqeval(report["eval"], "dev", out / "dev_predictions.txt")
    written = (out / "dev_predictions.txt").read_text("utf-8").split("\n\n")
    assert len([block for block in written if block.strip()]) == 20


# === DRCD through run_squad.py ===
# The 6 answers of DRCD_dev that start or end inside a run of Latin letters and digits
# (by hand: "8" of "81人", "128" of "128KB", "273.15" after "−", "50" before "～").
INSIDE_A_WORD = {"273.15": 2, "50": 1, "8": 2, "128": 1}


def test_every_drcd_dev_answer_maps_to_its_exact_words():
    examples = read_squad(str(shared_file("zh/drcd/DRCD_dev.json")), False)
    exact, inside = 0, {}
    for example in examples:
        for answer in example.answers:
            assert answer.aligned, (example.qas_id, answer.text)  # every answer_start points at its text
            text = example.paragraph.text(answer.first_word, answer.last_word)
            if text == answer.text:
                exact += 1
            else:
                assert answer.text in text, (text, answer.text)
                inside[answer.text] = inside.get(answer.text, 0) + 1
    assert (exact, inside) == (7048 - 6, INSIDE_A_WORD)


def drcd_slice(relative: str, path: pathlib.Path, articles: int, paragraphs: int) -> pathlib.Path:
    document = json.loads(shared_file(relative).read_text(encoding="utf-8"))
    document["data"] = [dict(article, paragraphs=article["paragraphs"][:paragraphs])
                        for article in document["data"][:articles]]  # fmt: skip
    path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    return path


def test_drcd_oracle_answers_come_back_exactly(tmp_path):
    path = drcd_slice("zh/drcd/DRCD_dev.json", tmp_path / "dev.json", articles=20, paragraphs=3)
    report = oracle_check(str(path), str(shared_file(CHINESE)), False)
    # Two misses, by hand: an answer of 34 characters, above --max_answer_length=30
    # WordPieces; "273.15" in "0K=−273.15℃", where "−273" is one word (U+2212 is a math
    # symbol, not punctuation) whose WordPieces (−, ##27, ##3) cannot be cut at "2".
    assert [(f["id"], f["predicted"], f["why"]) for f in report.failures] == [
        ("1160-13-2", "empty", "answer longer than max_answer_length"),
        ("1172-3-3", "−273.15℃", "answer text not mapped back exactly (whole words returned)")]
    assert report.questions == 144 and report.scores["exact_match"] == pytest.approx(142 / 144 * 100)


def test_drcd_fine_tunes_and_reports_the_chinese_metric(tmp_path):
    train = drcd_slice("zh/drcd/DRCD_dev.json", tmp_path / "DRCD_dev.json", articles=6, paragraphs=2)
    test = drcd_slice("zh/drcd/DRCD_test.json", tmp_path / "DRCD_test.json", articles=4, paragraphs=2)
    out = tmp_path / "out"
    argv = ["--task=drcd", f"--data_dir={tmp_path}", f"--output_dir={out}", f"--vocab_file={shared_file(CHINESE)}",
            "--preset=tiny", "--max_seq_length=128", "--doc_stride=48", "--max_query_length=32",
            "--train_batch_size=16", "--predict_batch_size=64", "--num_train_epochs=1", "--learning_rate=1e-4",
            "--do_train", "--train_file=DRCD_dev.json", "--do_predict", "--predict_file=DRCD_test.json"]
    report = run(*parse_args("squad", argv))
    predictions = json.loads((out / "predictions.json").read_text(encoding="utf-8"))
    dataset = json.loads(test.read_text(encoding="utf-8"))["data"]
    contexts = {qa["id"]: p["context"] for a in dataset for p in a["paragraphs"] for qa in p["qas"]}
    assert set(predictions) == set(contexts)
    # No spaces put between characters ("empty": the original's answer when no span is valid).
    answered = {qas_id: text for qas_id, text in predictions.items() if text != "empty"}
    assert answered and all(text in contexts[qas_id] for qas_id, text in answered.items())
    assert report["test"] == {f"predict_{k}": v for k, v in evaluate.evaluate_chinese(dataset, predictions).items()}
    assert json.loads((out / "fine_tune.json").read_text())["task"] == "drcd"


def test_chinese_metric_by_hand():
    data = [{"paragraphs": [{"qas": [{"id": "a", "answers": [{"text": "1956年7月"}, {"text": "1956年"}]},
                                     {"id": "b", "answers": [{"text": "《八篇書》"}]},
                                     {"id": "c", "answers": [{"text": "蘇利南"}]}]}]}]  # fmt: skip
    # a: EM with its second answer; b: punctuation aside equal; c: "利南語" shares the run "利南" (2 of 3 each way).
    scores = evaluate.evaluate_chinese(data, {"a": "1956年", "b": "八篇書", "c": "利南語"})
    assert scores["exact_match"] == pytest.approx(200 / 3)
    assert scores["f1"] == pytest.approx((1 + 1 + 2 / 3) / 3 * 100)
    # v1.1 reads each unspaced answer as one token and keeps 《》: only "a" scores.
    assert evaluate.evaluate_v1(data, {"a": "1956年", "b": "八篇書", "c": "利南語"})["f1"] == pytest.approx(100 / 3)


def test_drcd_refuses_version_2(tmp_path, capsys):
    argv = ["--task=drcd", f"--output_dir={tmp_path / 'out'}", f"--vocab_file={shared_file(CHINESE)}",
            "--preset=tiny", "--do_predict", "--predict_file=x.json", "--version_2_with_negative"]
    assert "drop --version_2_with_negative" in error_of(capsys, "squad", argv)
