"""`fine_tune.export` (`bert-export`): a tiny model fine-tuned for a few steps, exported, then run
in a fresh `python -I` that can import only tensorflow and tensorflow_text, against the Keras model."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.tokenization import FullTokenizer
from fine_tune.cli import parse_args, run
from fine_tune.export import export, main
from fine_tune.features import PairExample, PairFeaturiser
from fine_tune.heads import softmax
from fine_tune.metrics import chunks
from fine_tune.tagging import TaggedSentence, TaggingFeaturiser, TaggingHead, read_conll
from fine_tune.run_dir import load_run
from fine_tune.trainer import save_weights
from fine_tune.predictor import load_task_model, split_words
from tests.conftest import (predictor_xla_functions, require_module, saved_xla_functions, shared_file,
                            without_progress_bars)
from tests.test_squad_run import dev_slice, squad

UNCASED = "vocab/google_uncased_en_vocab.txt"
# Loads the export with nothing of this repository importable, and prints its answers as JSON.
FRESH_SCRIPT = """
import importlib.util, json, sys
for name in ("bert_tf", "fine_tune", "data_prep", "bench"):
    assert importlib.util.find_spec(name) is None, name + " is importable"
import tensorflow as tf
import tensorflow_text  # registers the tokenizer's ops
export_dir, requests = sys.argv[1], json.load(open(sys.argv[2], encoding="utf-8"))
serve = tf.saved_model.load(export_dir).signatures["serving_default"]
outputs = serve(**{name: tf.constant(texts) for name, texts in requests.items()})
decode = lambda value: [decode(v) for v in value] if isinstance(value, list) else value.decode("utf-8")
print(json.dumps({name: value.numpy().tolist() if value.dtype != tf.string else decode(value.numpy().tolist())
                  for name, value in outputs.items()}))
"""


def fine_tune(task: str, data: pathlib.Path, out: pathlib.Path, rows: dict[str, list[str]], *flags: str) -> None:
    data.mkdir(parents=True, exist_ok=True)
    for split, lines in rows.items():
        (data / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    run(*parse_args("classifier", [
        f"--task={task}", f"--data_dir={data}", f"--output_dir={out}", f"--vocab_file={shared_file(UNCASED)}",
        "--preset=tiny", "--max_seq_length=32", "--train_batch_size=16", "--num_train_epochs=1",
        "--learning_rate=1e-3", "--do_train", *flags,
    ]))
    keras.backend.clear_session()


def glue_rows(folder: str, count: int) -> list[str]:
    return shared_file(f"glue/{folder}/train.tsv").read_text(encoding="utf-8-sig").splitlines()[: count + 1]


@pytest.fixture(scope="module")
def mrpc(tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path]:
    """(run dir, export dir) of MRPC fine-tuned for 3 steps on 48 real pairs."""
    root = tmp_path_factory.mktemp("mrpc")
    fine_tune("mrpc", root / "data", root / "run", {"train": glue_rows("MRPC", 48)})
    assert main([f"--model_dir={root / 'run'}", f"--export_dir={root / 'export'}", f"--hub_dir={root / 'hub'}"]) == 0
    return root / "run", root / "export"


def keras_probabilities(run_dir: pathlib.Path, pairs: list[tuple[str, str]]) -> np.ndarray:
    """The Keras task model on the featuriser's ids (run_classifier.py's path)."""
    loaded = load_run(str(run_dir))
    tokenizer = FullTokenizer(loaded.vocab_file, do_lower_case=loaded.do_lower_case)
    examples = [PairExample(str(i), a, b, None) for i, (a, b) in enumerate(pairs)]
    features = PairFeaturiser()(examples, tokenizer, loaded.max_seq_length, loaded.labels)
    length = max(features.lengths)
    ids, types, mask = (np.zeros((len(pairs), length), np.int32) for _ in range(3))
    for row, (w, t) in enumerate(zip(features.sequences["input_word_ids"], features.sequences["input_type_ids"])):
        ids[row, : len(w)], types[row, : len(t)], mask[row, : len(w)] = w, t, 1
    logits = loaded.model({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}, training=False)
    return softmax(np.asarray(logits))


def run_fresh(export_dir: pathlib.Path, requests: dict[str, list[str]], tmp_path: pathlib.Path) -> dict:
    folder = tmp_path / "fresh"
    folder.mkdir()
    (folder / "check.py").write_text(FRESH_SCRIPT, encoding="utf-8")
    (folder / "requests.json").write_text(json.dumps(requests), encoding="utf-8")
    result = subprocess.run([sys.executable, "-I", "check.py", str(export_dir), "requests.json"], cwd=folder,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_export_answers_as_the_keras_model_in_a_fresh_python(mrpc, tmp_path):
    run_dir, export_dir = mrpc
    dev = [line.split("\t") for line in glue_rows("MRPC", 24)[1:]]
    pairs = [(row[3], row[4]) for row in dev]
    long = " ".join(["a very long sentence that must be truncated"] * 20)
    pairs += [("", ""), ("Héllo wörld, naïve café!", "中文 text\u00a0with odd spaces"), (long, long), (long, "short")]
    answers = run_fresh(export_dir, {"text_a": [a for a, _ in pairs], "text_b": [b for _, b in pairs]}, tmp_path)
    expected = keras_probabilities(run_dir, pairs)
    np.testing.assert_allclose(answers["probabilities"], expected, atol=1e-5)
    labels = load_run(str(run_dir)).labels
    assert answers["label_id"] == expected.argmax(axis=1).tolist()
    # Cut by max_seq_length: counted with the original's tokenizer ([CLS] A [SEP] B [SEP]).
    loaded = load_run(str(run_dir))
    tokenizer = FullTokenizer(loaded.vocab_file, do_lower_case=loaded.do_lower_case)
    too_long = [len(tokenizer.tokenize(a)) + len(tokenizer.tokenize(b)) + 3 > loaded.max_seq_length for a, b in pairs]
    assert answers["truncated"] == too_long and 0 < sum(too_long) < len(pairs)
    assert answers["label"] == [labels[i] for i in expected.argmax(axis=1)]
    assert sorted((export_dir / "assets").iterdir()) == sorted(
        export_dir / "assets" / name for name in ("bert_export.json", "labels.txt", "vocab.txt"))
    assert (export_dir / "assets" / "labels.txt").read_text().split() == list(labels)


def test_an_empty_batch_gets_empty_answers(mrpc):
    # It failed in the model ("slice index 0 of dimension 1 out of bounds": no [CLS] column).
    served = tf.saved_model.load(str(mrpc[1])).signatures["serving_default"]
    answers = served(text_a=tf.constant([], tf.string), text_b=tf.constant([], tf.string))
    assert answers["probabilities"].shape == (0, 2) and answers["label"].shape == (0,)


def test_saved_model_cli_lists_string_inputs(mrpc):
    cli = shutil.which("saved_model_cli", path=os.path.dirname(sys.executable))
    shown = subprocess.run([cli, "show", "--dir", str(mrpc[1]), "--all"], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}).stdout
    signature = shown[shown.index("signature_def['serving_default']"):]
    for name in ("text_a", "text_b"):
        assert f"inputs['{name}'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)" in signature
    outputs = (("label", "DT_STRING"), ("label_id", "DT_INT32"), ("probabilities", "DT_FLOAT"), ("truncated", "DT_BOOL"))
    for name, dtype in outputs:
        assert f"outputs['{name}'] tensor_info:\n        dtype: {dtype}" in signature


def test_an_existing_export_dir_needs_overwrite(mrpc, capsys):
    run_dir, export_dir = mrpc
    before = (export_dir / "saved_model.pb").stat().st_mtime_ns
    assert main([f"--model_dir={run_dir}", f"--export_dir={export_dir}"]) == 1
    assert capsys.readouterr().err == f"error: --export_dir {export_dir} already exists; pass --overwrite to replace it.\n"
    assert (export_dir / "saved_model.pb").stat().st_mtime_ns == before
    assert main([f"--model_dir={run_dir}", f"--export_dir={export_dir}", "--overwrite"]) == 0
    assert (export_dir / "saved_model.pb").stat().st_mtime_ns != before
    assert sorted(p.name for p in export_dir.parent.iterdir()) == ["data", "export", "hub", "run"]  # no temporary left


def test_a_failed_export_keeps_the_old_one_and_leaves_no_temporary(mrpc, monkeypatch, capsys):
    """A save that fails half-way (the disk fills) leaves the previous export and hub folder as
    they were: each is written under a temporary name and renamed only when complete."""
    import tensorflow as tf

    from bert_tf import hub_export

    run_dir, export_dir = mrpc
    hub_dir = export_dir.parent / "hub"
    graphs = [export_dir / "saved_model.pb", hub_dir / "preprocess" / "saved_model.pb",
              hub_dir / "encoder" / "saved_model.pb"]
    before = [graph.stat().st_mtime_ns for graph in graphs]
    real_save = tf.saved_model.save

    def save_then_fill_the_disk(root, path, signatures=None):
        (pathlib.Path(path) / "saved_model.pb").write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tf.saved_model, "save", save_then_fill_the_disk)
    with pytest.raises(OSError, match="No space left"):  # in the task's export
        export(str(run_dir), str(export_dir), overwrite=True, hub_dir=str(hub_dir))
    monkeypatch.setattr(tf.saved_model, "save", real_save)

    def fail_after_preprocessing(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hub_export, "export_encoder", fail_after_preprocessing)
    with pytest.raises(OSError, match="No space left"):  # the task's export is new, the hub folder's second half fails
        export(str(run_dir), str(export_dir), overwrite=True, hub_dir=str(hub_dir))
    assert graphs[0].stat().st_mtime_ns != before[0]
    assert [graph.stat().st_mtime_ns for graph in graphs[1:]] == before[1:]
    assert sorted(p.name for p in export_dir.parent.iterdir()) == ["data", "export", "hub", "run"]
    assert sorted(p.name for p in hub_dir.iterdir()) == ["encoder", "preprocess"]
    assert load_task_model(export_dir).predict(("A man.", "A man.")).label in ("0", "1")


def test_an_existing_hub_dir_needs_overwrite(mrpc, tmp_path, capsys):
    run_dir, export_dir = mrpc
    hub_dir = export_dir.parent / "hub"
    assert main([f"--model_dir={run_dir}", f"--export_dir={tmp_path / 'new'}", f"--hub_dir={hub_dir}"]) == 1
    assert capsys.readouterr().err == f"error: --hub_dir {hub_dir} already exists; pass --overwrite to replace it.\n"
    assert not (tmp_path / "new").exists()


def test_overlapping_folders_are_refused_before_anything_is_replaced(mrpc, tmp_path, capsys):
    """--export_dir over the run itself (with --overwrite it deleted the fine-tuned weights), or
    --hub_dir over --export_dir (the second folder written replaced the first), is refused."""
    run_dir, export_dir = mrpc
    files = sorted(str(p) for p in run_dir.parent.rglob("*"))
    for flags, message in [
        ([f"--export_dir={run_dir}"], f"--export_dir {run_dir} holds --model_dir {run_dir}; give a folder outside "
                                      "the run."),
        ([f"--export_dir={run_dir.parent}"], f"--export_dir {run_dir.parent} holds --model_dir {run_dir}; give a "
                                             "folder outside the run."),
        ([f"--export_dir={export_dir}", f"--hub_dir={export_dir}"], f"--hub_dir {export_dir} and --export_dir "
                                                                    f"{export_dir} overlap; give two separate folders."),
        ([f"--export_dir={export_dir}", f"--hub_dir={export_dir / 'hub'}"], f"--hub_dir {export_dir / 'hub'} and "
                                                                            f"--export_dir {export_dir} overlap; give "
                                                                            "two separate folders."),
    ]:
        assert main([f"--model_dir={run_dir}", *flags, "--overwrite"]) == 1
        assert capsys.readouterr().err == f"error: {message}\n"
    blocked = run_dir / "fine_tune.json" / "export"
    assert main([f"--model_dir={run_dir}", f"--export_dir={blocked}"]) == 1
    assert capsys.readouterr().err == (f"error: --export_dir {blocked} cannot be made: {run_dir / 'fine_tune.json'} "
                                       "is a file, not a folder.\n")  # was a FileExistsError
    assert sorted(str(p) for p in run_dir.parent.rglob("*")) == files


def test_bad_model_dirs_are_one_sentence(mrpc, tmp_path, capsys):
    run_dir = mrpc[0]

    def error(model_dir) -> str:
        assert main([f"--model_dir={model_dir}", f"--export_dir={tmp_path / 'export'}"]) == 1
        assert not (tmp_path / "export").exists()
        return capsys.readouterr().err

    assert "is not a folder" in error(tmp_path / "nothing")
    incomplete = tmp_path / "incomplete"
    shutil.copytree(run_dir, incomplete, ignore=shutil.ignore_patterns("*.h5", "checkpoints"))
    assert error(incomplete) == (f"error: {incomplete} is not a finished fine-tuning run (neither model.weights.h5 "
                                 "nor best/model.weights.h5 is there); give the --output_dir of a run_classifier.py, "
                                 "run_ner.py or run_squad.py run that trained (--do_train).\n")
    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    record = json.loads((other / "fine_tune.json").read_text())
    # A tagger's record over a classifier's weights, with the same shapes (dense(2) on
    # pooled_output and on sequence_output): only the weights file's stamp tells them apart.
    ner = {**record, "family": "ner", "task": "conll2003", "task_config": {"task": "conll2003", "data_dir": None},
           "labels": ["O", "B-PER"]}
    (other / "fine_tune.json").write_text(json.dumps(ner))
    assert error(other) == (f"error: {other / 'model.weights.h5'} holds the weights of a classifier model, but "
                            "bert_config.json and fine_tune.json beside it make a tagger; the run dir's files come "
                            "from different runs.\n")
    (other / "fine_tune.json").write_text("{not json")
    assert "fine_tune.json is damaged (JSONDecodeError" in error(other)
    (other / "fine_tune.json").write_text(json.dumps({**record, "labels": ["0", "1", "2"]}))
    assert "does not fit the model" in error(other)


def test_run_scripts_refuse_an_export_dir_they_cannot_write_before_training(tmp_path, capsys):
    from fine_tune.cli import main as command

    (tmp_path / "taken").mkdir()
    common = [f"--output_dir={tmp_path / 'run'}", "--preset=tiny", f"--vocab_file={shared_file(UNCASED)}",
              "--do_train"]
    assert command("classifier", ["--task=mrpc", f"--data_dir={tmp_path}", f"--export_dir={tmp_path / 'taken'}",
                                  *common]) == 1
    assert capsys.readouterr().err == (f"error: --export_dir {tmp_path / 'taken'} already exists; remove it or give "
                                       "a new folder.\n")
    assert command("squad", [f"--train_file={tmp_path / 'train.json'}", f"--export_dir={tmp_path / 'taken'}",
                             *common]) == 1
    assert capsys.readouterr().err == (f"error: --export_dir {tmp_path / 'taken'} already exists; remove it or give "
                                       "a new folder.\n")
    holder = tmp_path / "new"  # the run would be made inside the export, which the export then replaces
    assert command("classifier", ["--task=mrpc", f"--data_dir={tmp_path}", f"--export_dir={holder}",
                                  *common, f"--output_dir={holder / 'run'}"]) == 1
    assert capsys.readouterr().err == (f"error: --export_dir {holder} would hold --output_dir {holder / 'run'}; give "
                                       "a folder outside the run.\n")
    assert not (tmp_path / "run").exists() and not holder.exists()


def test_the_fine_tuned_encoder_in_tf_hub_layout(mrpc):
    """`--hub_dir`: the run's encoder, loaded by `hub.KerasLayer`, gives the task model's encoder outputs."""
    require_module("tensorflow_hub", "the TF Hub export is loaded through hub.KerasLayer")
    import tensorflow as tf
    import tensorflow_hub as hub

    from bert_tf.hub_export import task_encoder

    hub_dir = mrpc[0].parent / "hub"
    inputs = hub.KerasLayer(str(hub_dir / "preprocess"))(tf.constant(["A sentence.", "Another one, longer."]))
    outputs = hub.KerasLayer(str(hub_dir / "encoder"))(inputs)
    expected = task_encoder(load_run(str(mrpc[0])).model)(inputs, training=False)
    np.testing.assert_allclose(outputs["pooled_output"].numpy(), np.asarray(expected["pooled_output"]), atol=1e-5)


def test_load_task_model_predicts_through_an_export_as_through_the_run_dir(mrpc, capsys):
    run_dir, export_dir = mrpc
    from_run, from_export = load_task_model(run_dir), load_task_model(export_dir)
    assert (from_export.kind, from_export.labels, from_export.takes_pairs) == ("classifier", from_run.labels, True)
    pairs = [(row[3], row[4]) for row in (line.split("\t") for line in glue_rows("MRPC", 24)[1:])] + [("", "")]
    capsys.readouterr()
    expected = from_run.predict(pairs)
    note = without_progress_bars(capsys.readouterr().err)
    got = from_export.predict(pairs)
    assert without_progress_bars(capsys.readouterr().err) == note and note.startswith("note: ")  # the same truncation note
    assert [c.label for c in got] == [c.label for c in expected]
    assert [c.label_id for c in got] == [c.label_id for c in expected]
    np.testing.assert_allclose([c.probabilities for c in got], [c.probabilities for c in expected], atol=1e-5)
    assert from_export.predict(pairs[0]) == got[0]
    for call, message in (
        (lambda: from_export.predict("one text"), "input 0 is one text, but mrpc classifies pairs"),
        (lambda: from_export.embed("a text"), "holds the task's outputs, not the encoder's features"),
        (lambda: from_export.answer("Who?", "Me."), f"{export_dir} holds a classifier (mrpc, from run_classifier.py); "
                                                     "answer() needs a model fine-tuned by run_squad.py."),
        (lambda: load_task_model(export_dir, null_score_diff_threshold=1.0), "whose settings were fixed when it was "
                                                                            "exported; load its run dir to change"),
    ):
        with pytest.raises(BertTfError, match=re.escape(message)):
            call()


def test_a_bf16_export_answers_as_the_bf16_predictor(mrpc, tmp_path):
    """`bert-export --mixed_precision=bf16`: the export computes in bfloat16 as
    `load_task_model(run_dir, mixed_precision="bf16")` does, and records it."""
    run_dir = mrpc[0]
    assert main([f"--model_dir={run_dir}", f"--export_dir={tmp_path / 'bf16'}", "--mixed_precision=bf16"]) == 0
    assert json.loads((tmp_path / "bf16" / "assets" / "bert_export.json").read_text())["mixed_precision"] == "bf16"
    pairs = [(row[3], row[4]) for row in (line.split("\t") for line in glue_rows("MRPC", 24)[1:])]
    exported = [c.probabilities for c in load_task_model(tmp_path / "bf16").predict(pairs)]
    bf16 = [c.probabilities for c in load_task_model(run_dir, mixed_precision="bf16").predict(pairs)]
    fp32 = [c.probabilities for c in load_task_model(mrpc[1]).predict(pairs)]
    np.testing.assert_allclose(exported, bf16, atol=2e-3)
    assert not np.array_equal(exported, fp32)  # it computes in bf16
    with pytest.raises(BertTfError, match=r"exported; load its run dir to change mixed_precision\.$"):
        load_task_model(tmp_path / "bf16", mixed_precision="bf16")


def test_an_xla_export_answers_as_the_keras_model_in_a_fresh_python(mrpc, tmp_path):
    """`bert-export --jit_compile`: the model runs through XLA in the served graph, and a fresh
    TF-only process gets the Keras model's answers (as does `load_task_model(jit_compile=True)`);
    recorded in bert_export.json, fixed for the export."""
    run_dir = mrpc[0]
    assert main([f"--model_dir={run_dir}", f"--export_dir={tmp_path / 'xla'}", "--jit_compile"]) == 0
    assert json.loads((tmp_path / "xla" / "assets" / "bert_export.json").read_text())["jit_compile"] is True
    assert saved_xla_functions(tmp_path / "xla") > 0 == saved_xla_functions(mrpc[1])
    pairs = [(row[3], row[4]) for row in (line.split("\t") for line in glue_rows("MRPC", 24)[1:])]
    long = " ".join(["a very long sentence that must be truncated"] * 20)
    pairs += [("", ""), (long, "short")]
    answers = run_fresh(tmp_path / "xla", {"text_a": [a for a, _ in pairs], "text_b": [b for _, b in pairs]}, tmp_path)
    expected = keras_probabilities(run_dir, pairs)
    np.testing.assert_allclose(answers["probabilities"], expected, atol=1e-5)
    predictor = load_task_model(run_dir, jit_compile=True)
    np.testing.assert_allclose([c.probabilities for c in predictor.predict(pairs)], expected, atol=1e-5)
    assert predictor_xla_functions(predictor) > 0
    with pytest.raises(BertTfError, match=r"exported; load its run dir to change jit_compile\.$"):
        load_task_model(tmp_path / "xla", jit_compile=True)
    with pytest.raises(BertTfError, match=r"^--jit_compile is how a SavedModel serves; --format=hf writes weights"):
        export(str(run_dir), str(tmp_path / "hf"), format="hf", jit_compile=True)


def test_a_corrupt_export_is_one_sentence(mrpc, tmp_path, capsys):
    from fine_tune.batch_predict import main as predict_main

    expected = ("is not a complete bert-export SavedModel", "export the run again with bert-export --overwrite.")
    for damage in ("truncated saved_model.pb", "no variables", "no bert_export.json", "bert_export.json without keys",
                   "truncated labels.txt"):
        broken = tmp_path / damage.replace(" ", "_")
        shutil.copytree(mrpc[1], broken)
        if damage == "truncated saved_model.pb":
            graph = broken / "saved_model.pb"
            graph.write_bytes(graph.read_bytes()[:1000])
        elif damage == "no variables":
            shutil.rmtree(broken / "variables")
        elif damage == "truncated labels.txt":  # the signature would answer "" for the lost label ids
            (broken / "assets" / "labels.txt").write_text("0\n")
        elif damage == "no bert_export.json":
            (broken / "assets" / "bert_export.json").unlink()
        else:  # valid JSON, but not what predicting reads
            info = json.loads((broken / "assets" / "bert_export.json").read_text())
            (broken / "assets" / "bert_export.json").write_text(json.dumps({"task": info["task"]}))
        with pytest.raises(BertTfError) as error:
            load_task_model(broken)
        message = str(error.value)
        assert message.startswith(f"{broken} {expected[0]} (") and message.endswith(expected[1]), message
        assert "\n" not in message
        (tmp_path / "in.tsv").write_text("a\tb\n", encoding="utf-8")
        assert predict_main([f"--model_dir={broken}", f"--input_file={tmp_path / 'in.tsv'}",
                             f"--output_file={tmp_path / 'out.jsonl'}"]) == 1
        assert capsys.readouterr().err.startswith(f"error: {broken} {expected[0]}")
        assert not (tmp_path / "out.jsonl").exists()


def test_a_regression_task_exports_its_score(tmp_path):
    """STS-B: `score` in the signature, equal to the regression head's output; exported by the
    run script itself (`--export_dir`)."""
    import tensorflow as tf

    fine_tune("sts-b", tmp_path / "data", tmp_path / "run", {"train": glue_rows("STS-B", 32)},
              f"--export_dir={tmp_path / 'export'}")
    serve = tf.saved_model.load(str(tmp_path / "export")).signatures["serving_default"]
    pairs = [("A man is playing a guitar.", "A man plays the guitar."), ("", "A dog runs.")]
    outputs = serve(text_a=tf.constant([a for a, _ in pairs]), text_b=tf.constant([b for _, b in pairs]))
    assert sorted(outputs) == ["score", "truncated"]
    assert outputs["truncated"].numpy().tolist() == [False, False]  # 12 and 7 WordPieces, max_seq_length 32
    loaded = load_run(str(tmp_path / "run"))
    assert loaded.is_regression and not (tmp_path / "export" / "assets" / "labels.txt").exists()
    tokenizer = FullTokenizer(loaded.vocab_file, do_lower_case=True)
    features = PairFeaturiser(regression=True)([PairExample(str(i), a, b, None) for i, (a, b) in enumerate(pairs)],
                                               tokenizer, loaded.max_seq_length, ())
    for row, (ids, types) in enumerate(zip(features.sequences["input_word_ids"], features.sequences["input_type_ids"])):
        score = loaded.model({"input_word_ids": ids[None], "input_mask": np.ones_like(ids)[None],
                              "input_type_ids": types[None]}, training=False)
        np.testing.assert_allclose(outputs["score"].numpy()[row], np.asarray(score)[0, 0], atol=1e-5)


@pytest.mark.parametrize("document_context", [False, True])
def test_ner_tags_every_word_and_finds_entities_in_a_fresh_python(tmp_path, document_context):
    """CoNLL-2003, windows of 16 WordPieces: the export's tags equal TaggingHead.decode's on the featuriser's
    rows; its entities are conlleval's chunks of those tags, with the words' character offsets. With
    --document_context each window is filled with the text's own words around it (the export tagged each
    window alone: other tags than the run dir's on every text longer than a window)."""
    sentences = read_conll(str(shared_file("conll2003/eng.train")))[:64]
    data = tmp_path / "data"
    data.mkdir()
    lines = [line for s in sentences for line in [" ".join(cells) for cells in s.lines] + [""]]
    (data / "eng.train").write_text("\n".join(lines), encoding="utf-8")
    run(*parse_args("ner", [f"--data_dir={data}", f"--output_dir={tmp_path / 'run'}",
                           f"--vocab_file={shared_file('vocab/google_cased_en_vocab.txt')}", "--nodo_lower_case",
                           "--preset=tiny", "--max_seq_length=16", "--train_batch_size=32", "--num_train_epochs=1",
                           "--learning_rate=1e-5", "--do_train", f"--document_context={document_context}"]))
    keras.backend.clear_session()
    # A few steps teach a tiny model only "O": a random, large head gives every tag, so entities of
    # every shape (B-X I-X, I-X after O, a type change) get read.
    tagger = load_run(str(tmp_path / "run")).model
    head = tagger.get_layer("logits")
    head.kernel.assign(np.random.default_rng(0).normal(0, 3, head.kernel.shape).astype(np.float32))
    save_weights(tagger, str(tmp_path / "run"))
    assert main([f"--model_dir={tmp_path / 'run'}", f"--export_dir={tmp_path / 'export'}"]) == 0

    # Raw text, as TF Serving gets it: words are cut at punctuation and CJK characters too (they were cut at
    # whitespace only: "Paris," was a word, a Chinese sentence one word).
    texts = [" ".join(s.words) for s in sentences[:24]] + ["", "Héllo   Wörld\u00a0中文", "He flew to (London) from "
             "Germany's capital, met Peter Blackburn.", "我在北京大学工作，住在上海。"]
    answers = run_fresh(tmp_path / "export", {"text": texts}, tmp_path)

    loaded = load_run(str(tmp_path / "run"))
    tokenizer = FullTokenizer(loaded.vocab_file, do_lower_case=False)
    cut = [[t[start:end] for start, end in split_words(t)] for t in texts]
    assert cut[-1][:3] == ["我", "在", "北"] and "(" in cut[-2] and "," in cut[-2]
    examples = [TaggedSentence(str(i), tuple(words), None, (), i, None, "") for i, words in enumerate(cut)]
    features = TaggingFeaturiser(document_context)(examples, tokenizer, 16, loaded.labels)
    assert len(features) > len(texts)  # some sentences need several windows
    outputs = [np.asarray(loaded.model({"input_word_ids": ids[None], "input_mask": np.ones_like(ids)[None],
                                        "input_type_ids": np.zeros_like(ids)[None]}, training=False))[0]
               for ids in features.sequences["input_word_ids"]]
    expected = TaggingHead().decode(examples, features, outputs, loaded.labels)
    for row, (text, tags) in enumerate(zip(texts, expected)):
        n = answers["num_words"][row]
        assert answers["tags"][row][:n] == list(tags)
        words = [text[a:b] for a, b in zip(answers["word_start"][row][:n], answers["word_end"][row][:n])]
        assert words == cut[row]
        spans = split_words(text)
        want = [(c.type, text[spans[c.start][0] : spans[c.end - 1][1]]) for c in chunks(tags)]
        m = answers["num_entities"][row]
        got = list(zip(answers["entity_type"][row][:m], answers["entity_text"][row][:m]))
        assert got == want
        for start, end, entity in zip(answers["entity_start"][row][:m], answers["entity_end"][row][:m],
                                      answers["entity_text"][row][:m]):
            assert text[start:end] == entity
    assert sum(answers["num_entities"]) > 3 * len(texts)
    # load_task_model on the export: the run dir's taggings, raw text (cut at punctuation too) and pre-split words.
    # Control characters Python splits at stay inside a word (the original deletes them); U+2028 ends one.
    raw = texts + ["EU rejects German-made cars, (Brussels) said.", "Form\x0cfeed\x85next\x1cline\x0bEU ok\u2028new\u2029line"]
    from_export = load_task_model(tmp_path / "export")
    assert from_export.predict(raw) == load_task_model(tmp_path / "run").predict(raw)
    # Words already cut (its tag_words signature): CoNLL's "U.S."-like words stay whole, so may a word with a
    # space or none at all.
    words = [tuple(sentences[0].words), ("x", "a b", "", "U.S.-based"), ()]
    assert from_export.predict(words) == load_task_model(tmp_path / "run").predict(words)
    if document_context:  # through XLA (`--jit_compile`), exported and in Python: the same taggings
        export(str(tmp_path / "run"), str(tmp_path / "xla"), jit_compile=True)
        assert saved_xla_functions(tmp_path / "xla") > 0
        expected = load_task_model(tmp_path / "run").predict(raw)
        assert load_task_model(tmp_path / "xla").predict(raw) == expected
        predictor = load_task_model(tmp_path / "run", jit_compile=True)
        assert predictor.predict(raw) == expected and predictor_xla_functions(predictor) > 0


# === SQuAD ===
@pytest.fixture(scope="module")
def squad_exports(tmp_path_factory) -> dict[str, tuple[pathlib.Path, pathlib.Path, pathlib.Path]]:
    """(data, run dir, export dir) of SQuAD v1.1 and v2.0 runs fine-tuned briefly on slices of the dev sets
    (max_seq_length 128, doc_stride 48: the contexts take several windows), exported by run_squad.py itself."""
    root = tmp_path_factory.mktemp("squad")
    runs = {}
    for name, relative, paragraphs, flags in (
        ("v1", "squad/dev-v1.1.json", 2, ()),
        ("v2", "squad/dev-v2.0.json", 5, ("--version_2_with_negative", "--null_score_diff_threshold=0.8")),
    ):
        data = dev_slice(relative, root / f"{name}.json", paragraphs)
        squad(root / name, "--do_train", f"--train_file={data}", f"--export_dir={root / f'{name}_export'}", *flags)
        keras.backend.clear_session()
        runs[name] = (data, root / name, root / f"{name}_export")
    return runs


def squad_pairs(data: pathlib.Path) -> list[tuple[str, str]]:
    document = json.loads(data.read_text(encoding="utf-8"))
    pairs = [(qa["question"], paragraph["context"]) for article in document["data"]
             for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    return pairs + [("Who?", ""), ("", "A context."), ("What?", "Café 1995-95 a\u00a0b \u5317\u4eac\u5e02 \u2603 x\x00y")]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_squad_answers_equal_the_python_predictor_in_a_fresh_python(squad_exports, version, tmp_path):
    data, run_dir, export_dir = squad_exports[version]
    pairs = squad_pairs(data)
    assert len(pairs) >= 30
    answers = run_fresh(export_dir, {"question": [q for q, _ in pairs], "context": [c for _, c in pairs]}, tmp_path)
    expected = load_task_model(run_dir).answer([q for q, _ in pairs], [c for _, c in pairs])
    assert answers["answer"] == [a.text for a in expected]
    assert list(zip(answers["start"], answers["end"])) == [(a.start, a.end) for a in expected]
    np.testing.assert_allclose(answers["score"], [a.score for a in expected], atol=1e-5)
    assert len(set(answers["answer"])) > 5  # a threshold in the middle of this tiny model's null score differences
    if version == "v2":
        assert answers["has_answer"] == [a.has_answer for a in expected]
        np.testing.assert_allclose(answers["null_score_diff"], [a.null_score_diff for a in expected], atol=1e-4)
    else:
        assert sorted(answers) == ["answer", "end", "score", "start"]
    through_export = load_task_model(export_dir).answer([q for q, _ in pairs], [c for _, c in pairs])
    assert [dataclasses.replace(a, score=0.0, null_score_diff=None) for a in through_export] == [
        dataclasses.replace(a, score=0.0, null_score_diff=None) for a in expected]
    np.testing.assert_allclose([a.score for a in through_export], [a.score for a in expected], atol=1e-5)
    info = json.loads((export_dir / "assets" / "bert_export.json").read_text())
    assert (info["family"], info["inputs"], info["task_config"]["doc_stride"]) == ("squad", ["question", "context"], 48)


def test_bert_export_setting_changes_the_served_threshold(squad_exports, tmp_path, capsys):
    """`bert-export --setting null_score_diff_threshold=1e9` (a threshold tuned after training)
    serves it: every question answered, as the Python predictor with that setting; a setting
    that is not NAME=VALUE, or not the task's, is one sentence and exports nothing."""
    data, run_dir, _ = squad_exports["v2"]
    pairs = squad_pairs(data)[:12]
    export_dir = tmp_path / "lenient"
    assert main([f"--model_dir={run_dir}", f"--export_dir={export_dir}", "--setting=null_score_diff_threshold=1e9"]) == 0
    served = load_task_model(export_dir).answer([q for q, _ in pairs], [c for _, c in pairs])
    expected = load_task_model(run_dir, null_score_diff_threshold=1e9).answer([q for q, _ in pairs], [c for _, c in pairs])
    assert all(a.has_answer for a in served) and [a.text for a in served] == [a.text for a in expected]
    assert json.loads((export_dir / "assets" / "bert_export.json").read_text())["task_config"][
        "null_score_diff_threshold"] == 1e9
    capsys.readouterr()
    for setting, message in (("threshold", "--setting 'threshold' is not NAME=VALUE."),
                             ("label_column=2", "'label_column' is not a setting of squad models")):
        assert main([f"--model_dir={run_dir}", f"--export_dir={tmp_path / 'no'}", f"--setting={setting}"]) == 1
        assert message in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


def test_an_xla_squad_export_answers_as_the_python_predictor(squad_exports, tmp_path):
    """`--jit_compile` (`SpanAnswerer` running the model through XLA), in a fresh TF-only process:
    the answers of the Python predictor, with or without XLA."""
    data, run_dir, _ = squad_exports["v2"]
    export(str(run_dir), str(tmp_path / "xla"), jit_compile=True)
    assert saved_xla_functions(tmp_path / "xla") > 0
    pairs = squad_pairs(data)
    answers = run_fresh(tmp_path / "xla", {"question": [q for q, _ in pairs], "context": [c for _, c in pairs]},
                        tmp_path)
    for jit_compile in (False, True):
        expected = load_task_model(run_dir, jit_compile=jit_compile).answer([q for q, _ in pairs],
                                                                            [c for _, c in pairs])
        assert answers["answer"] == [a.text for a in expected]
        assert answers["has_answer"] == [a.has_answer for a in expected]
        np.testing.assert_allclose(answers["score"], [a.score for a in expected], atol=1e-5)


def test_saved_model_cli_lists_the_squad_signature(squad_exports):
    cli = shutil.which("saved_model_cli", path=os.path.dirname(sys.executable))
    shown = subprocess.run([cli, "show", "--dir", str(squad_exports["v2"][2]), "--all"], capture_output=True,
                           text=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}).stdout
    signature = shown[shown.index("signature_def['serving_default']"):]
    for name in ("question", "context"):
        assert f"inputs['{name}'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)" in signature
    for name, dtype in (("answer", "DT_STRING"), ("start", "DT_INT32"), ("end", "DT_INT32"), ("score", "DT_FLOAT"),
                        ("has_answer", "DT_BOOL"), ("null_score_diff", "DT_FLOAT")):
        assert f"outputs['{name}'] tensor_info:\n        dtype: {dtype}" in signature
