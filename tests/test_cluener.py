"""CLUENER2020 through run_ner.py's `cluener` task, on slices of the shared release."""

from __future__ import annotations

import json
import pathlib

import keras
import pytest

from bert_tf.errors import DataError
from fine_tune.cluener import read_cluener, spans_of, spans_to_tags, tags_to_label
from tests.conftest import shared_file
from tests.test_fine_tune_tasks import error_of, fine_tune

CHINESE = "vocab/google_zh_vocab.txt"


@pytest.fixture(autouse=True)
def _fresh_keras_session():
    yield
    keras.backend.clear_session()


def lines_of(name: str, start: int, count: int) -> list[str]:
    lines = shared_file(f"zh/cluener2020/{name}").read_text(encoding="utf-8").splitlines()
    return lines[start : start + count]


def sorted_label(label: dict) -> dict:
    return {kind: {entity: sorted(spans) for entity, spans in entities.items()} for kind, entities in label.items()}


def test_gold_spans_survive_tags_and_back_exactly():
    # Lines 1-1500 of train.json and all of dev.json (line 1507 of train.json nests a
    # company in a book title, which flat tags cannot hold: see the next test).
    lines = lines_of("train.json", 0, 1500) + lines_of("dev.json", 0, 1343)
    entities = 0
    for number, line in enumerate(lines, 1):
        record = json.loads(line)
        spans = spans_of(record["label"], record["text"], f"line {number}")
        tags, nested = spans_to_tags(spans, len(record["text"]))
        assert nested == 0
        assert sorted_label(tags_to_label(tags, record["text"])) == sorted_label(record["label"]), line
        entities += len(spans)
    assert entities == 6525  # every [start, end] of those lines


def test_nested_span_keeps_the_outer_entity(tmp_path):
    path = tmp_path / "train.json"
    path.write_text("\n".join(lines_of("train.json", 1506, 1)) + "\n", encoding="utf-8")
    (record,), dropped = read_cluener(str(path))
    text = "".join(record.words)
    # The book title [15, 34] holds the companies 招商银行 [16, 19] and 永隆银行 [23, 26].
    assert dropped == 2
    assert tags_to_label(record.label, text) == {"book": {"《招商银行：投资永隆银行浮亏逾百亿港元》": [[15, 34]]}}


def write_split(folder: pathlib.Path, name: str, lines: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_cluener_end_to_end_writes_predictions_in_its_format(tmp_path):
    data = tmp_path / "cluener"
    write_split(data, "train.json", lines_of("train.json", 0, 48))
    write_split(data, "dev.json", lines_of("dev.json", 0, 16))
    # CLUE's test file: an "id", no "label".
    test = [json.dumps({"id": k, "text": json.loads(line)["text"]}, ensure_ascii=False)
            for k, line in enumerate(lines_of("dev.json", 16, 8))]
    write_split(data, "test.json", test)
    out = tmp_path / "out"
    report = fine_tune("ner", "cluener", data, out, "--do_train", "--do_eval", "--do_predict",
                       "--learning_rate=3e-4", vocab=CHINESE)
    assert {"B-name", "I-name", "B-company", "B-game", "B-organization"} <= set(report["labels"])
    assert set(report["eval"]) == {"dev_precision", "dev_recall", "dev_f1"}
    for name, source in [("dev", lines_of("dev.json", 0, 16)), ("test", test)]:
        written = [json.loads(line) for line in (out / f"{name}_predictions.json").read_text("utf-8").splitlines()]
        originals = [json.loads(line) for line in source]
        assert [w["text"] for w in written] == [o["text"] for o in originals]
        assert [w.get("id") for w in written] == [o.get("id") for o in originals]
        # Every predicted span is its entity's text: the file reads back as CLUENER.
        read_cluener(str(out / f"{name}_predictions.json"))


def test_a_train_subset_keeps_the_whole_train_sets_labels(tmp_path):
    """--max_train_examples=3 once took the labels from those 3 lines only, and the dev set's
    other entity types were then refused as unknown labels."""
    data = tmp_path / "cluener"
    write_split(data, "train.json", lines_of("train.json", 0, 48))
    write_split(data, "dev.json", lines_of("dev.json", 0, 16))
    subset = fine_tune("ner", "cluener", data, tmp_path / "subset", "--do_train", "--do_eval",
                       "--max_train_examples=3", vocab=CHINESE)

    def types(lines: list[str]) -> set[str]:
        return {kind for line in lines for kind in json.loads(line)["label"]}

    assert types(lines_of("train.json", 0, 3)) < types(lines_of("train.json", 0, 48))
    assert {label[2:] for label in subset["labels"] if label != "O"} == types(lines_of("train.json", 0, 48))
    assert set(subset["eval"]) == {"dev_precision", "dev_recall", "dev_f1"}


def test_span_not_matching_its_entity_names_file_line_and_span(tmp_path, capsys):
    lines = lines_of("train.json", 0, 3)
    record = json.loads(lines[1])  # 生生不息CSOL生化狂潮让你填弹狂扫: game CSOL [4, 7]
    record["label"]["game"] = {"CSOL": [[5, 8]]}
    lines[1] = json.dumps(record, ensure_ascii=False)
    write_split(tmp_path, "train.json", lines)
    argv = ["--task=cluener", f"--data_dir={tmp_path}", f"--output_dir={tmp_path / 'out'}",
            f"--vocab_file={shared_file(CHINESE)}", "--preset=tiny", "--do_train"]
    message = error_of(capsys, "ner", argv)
    assert f"{tmp_path / 'train.json'} line 2: the game span [5, 8] covers 'SOL生', not its entity 'CSOL'" in message
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


TEXT = "浙商银行企业信贷部叶老桂博士"


@pytest.mark.parametrize("line,message", [
    ({"text": TEXT, "label": {"company": [[0, 3]]}},
     "the \"label\" entry 'company' must be an object {entity: [[start, end], ...]}, not [[0, 3]]."),
    ({"text": TEXT, "label": {"company": {"浙商银行": None}}},
     "the company spans of '浙商银行' must be a list of [start, end], not null."),
    ({"text": TEXT, "label": {"company": {"浙商银行": [0, 3]}}}, "the company span 0 of '浙商银行' is not [start, end]."),
    ({"text": TEXT, "label": {"name": {"叶老桂": [[9, 14]]}}},
     "the name span [9, 14] of '叶老桂' is outside the text of 14 characters."),
    ({"text": TEXT, "label": {"name": {"叶老桂": [[11, 9]]}}},
     "the name span [11, 9] of '叶老桂' starts after it ends; give [start, end] with end inclusive."),
    ({"label": {}}, 'has no "text" string; CLUENER lines are {"text": ..., "label": ...}.'),
])
def test_malformed_lines_are_one_sentence_naming_file_and_line(tmp_path, line, message):
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"text": TEXT}, ensure_ascii=False) + "\n" + json.dumps(line, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    with pytest.raises(DataError) as error:
        read_cluener(str(path))
    assert str(error.value) in (f"{path} line 2: {message}", f"{path} line 2 {message}")


def test_a_file_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "train.json"
    path.write_bytes(json.dumps({"text": "好"}).encode() + b"\n" + json.dumps({"text": TEXT}, ensure_ascii=False)
                     .encode("gbk") + b"\n")  # fmt: skip
    with pytest.raises(DataError, match=rf"^{path} line 2 is not UTF-8 text \(invalid continuation byte at byte 10 "
                                        r"of the line\); convert the file to UTF-8\.$"):
        read_cluener(str(path))


def test_overlapping_spans_keep_the_first_and_are_counted(tmp_path):
    # 企业信贷 [4, 7] and 信贷部 [6, 8] overlap without nesting; the same span under two types too.
    label = {"organization": {"企业信贷": [[4, 7]], "信贷部": [[6, 8]]}, "company": {"浙商银行": [[0, 3]]},
             "name": {"浙商银行": [[0, 3]]}}
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"text": TEXT, "label": label}, ensure_ascii=False) + "\n", encoding="utf-8")
    (record,), dropped = read_cluener(str(path))
    assert dropped == 2
    assert tags_to_label(record.label, TEXT) == {"company": {"浙商银行": [[0, 3]]}, "organization": {"企业信贷": [[4, 7]]}}
