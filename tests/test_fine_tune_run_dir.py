"""A fine-tuning run directory belongs to one run: training resumes only the run it holds,
an evaluation feeds the model as its training did, and flags that cannot work are one
sentence before anything starts.

The runs are tiny (the `tiny` preset, a few real MRPC rows or CoNLL-2003 sentences).
"""

from __future__ import annotations

import pathlib

import keras
import pytest

from fine_tune.cli import main, parse_args
from tests.conftest import shared_file
from tests.test_fine_tune_tasks import TINY, UNCASED, conll_slice, error_of, fine_tune, slice_of, write_rows

CASED = "vocab/google_cased_en_vocab.txt"


@pytest.fixture(autouse=True)
def _fresh_keras_session():
    yield
    keras.backend.clear_session()


def mrpc_run(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """(data dir, output dir) of a finished 2-step MRPC run."""
    data = tmp_path / "mrpc"
    write_rows(data / "train.tsv", slice_of("glue/MRPC/train.tsv", 0, 32))
    write_rows(data / "dev.tsv", slice_of("glue/MRPC/dev.tsv", 0, 8))
    out = tmp_path / "out"
    fine_tune("classifier", "mrpc", data, out, "--do_train")
    return data, out


def flags_of(task: str, data: pathlib.Path, out: pathlib.Path, *more: str, vocab: str = UNCASED) -> list[str]:
    return [f"--task={task}", f"--data_dir={data}", f"--output_dir={out}", f"--vocab_file={shared_file(vocab)}",
            *TINY, *more]


# === Training into a run dir ===
def test_training_resumes_only_the_run_it_holds(tmp_path, capsys):
    data, out = mrpc_run(tmp_path)
    capsys.readouterr()
    # Another task, another batch size: the checkpoint there is of another run.
    message = error_of(capsys, "classifier", flags_of("sst-2", data, out, "--do_train"))
    assert f"--output_dir {out} holds the checkpoint of a run with other settings (task was mrpc, now sst-2)" in message
    message = error_of(capsys, "classifier", [*flags_of("mrpc", data, out, "--do_train"), "--train_batch_size=8"])
    assert "(train_batch_size was 16, now 8)" in message and "give a new --output_dir" in message
    # Other training rows: another vocabulary gives other ids.
    message = error_of(capsys, "classifier", flags_of("mrpc", data, out, "--do_train", vocab=CASED))
    assert message == (f"error: --output_dir {out} holds the checkpoint of a run on other training rows (another "
                       "train file, vocabulary or split) which this run would resume; give that run's data, or a new "
                       "--output_dir.")
    # The same settings resume it (finished: nothing left to train), the data named by another path (the run
    # dir moved beside it, say); evaluation-only flags may change.
    keras.backend.clear_session()
    moved = tmp_path / "moved"
    data.rename(moved)
    assert main("classifier", [*flags_of("mrpc", moved, out, "--do_train", "--do_eval"), "--eval_batch_size=4"]) == 0
    assert "Trained 0 steps (resumed at step 2, to step 2)" in capsys.readouterr().out


def test_a_damaged_run_record_is_one_sentence(tmp_path, capsys):
    write_rows(tmp_path / "train.tsv", slice_of("glue/MRPC/train.tsv", 0, 4))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "fine_tune.json").write_text("")
    message = error_of(capsys, "classifier", flags_of("mrpc", tmp_path, tmp_path / "out", "--do_train"))
    assert message.startswith(f"error: {tmp_path / 'out' / 'fine_tune.json'} is damaged (JSONDecodeError: ")
    assert message.endswith("); rerun the training that wrote it, or remove it.")


# === Evaluating a run dir ===
def test_an_evaluation_takes_the_settings_the_run_was_trained_with(tmp_path, capsys):
    data = tmp_path / "conll"
    data.mkdir()
    for name, documents in (("eng.train", 2), ("eng.testa", 1)):
        (data / name).write_text(conll_slice(f"conll2003/{name}", documents), encoding="utf-8")
    out = tmp_path / "out"
    fine_tune("ner", "conll2003", data, out, "--do_train", "--nodo_lower_case", "--document_context",
              "--max_seq_length=32", vocab=CASED)
    # Without --nodo_lower_case, --max_seq_length or --document_context: the run's own.
    task_config, run_config = parse_args("ner", [f"--data_dir={data}", f"--output_dir={out}", "--do_eval"])
    assert (run_config.do_lower_case, run_config.max_seq_length, task_config.document_context) == (False, 32, True)
    assert task_config.data_dir == str(data)
    # What the command line gives wins, except a casing the model was not trained with.
    task_config, run_config = parse_args("ner", [f"--data_dir={data}", f"--output_dir={out}", "--do_eval",
                                                 "--max_seq_length=48", "--nodocument_context"])
    assert (run_config.max_seq_length, task_config.document_context) == (48, False)
    message = error_of(capsys, "ner", [f"--data_dir={data}", f"--output_dir={out}", "--do_eval", "--do_lower_case"])
    assert message == (f"error: The model in {out} was trained with do_lower_case=False; evaluate it with the same "
                       "casing (--nodo_lower_case).")


def test_an_evaluation_with_another_task_is_refused(tmp_path, capsys):
    data, out = mrpc_run(tmp_path)
    sst = tmp_path / "sst"
    write_rows(sst / "dev.tsv", slice_of("glue/SST-2/dev.tsv", 0, 8))
    message = error_of(capsys, "classifier", [f"--task=sst-2", f"--data_dir={sst}", f"--output_dir={out}", "--do_eval"])
    assert message == (f"error: --output_dir {out} holds a model fine-tuned for --task_name=mrpc with "
                       "run_classifier.py, not for sst-2; evaluate it as that, or give the --output_dir of a sst-2 run.")
    assert not (out / "eval_results.txt").exists()
    # Nothing to take the task from: it is required.
    message = error_of(capsys, "classifier", [f"--data_dir={sst}", f"--output_dir={tmp_path / 'typo'}", "--do_eval"])
    assert message.startswith("error: --task_name is required; valid tasks: ax, chnsenticorp, cola")


# === Flags and data that cannot work ===
@pytest.mark.parametrize(("flag", "expected"), [
    ("--iterations_per_loop=0", "--iterations_per_loop must be at least 1, got 0."),
    ("--save_checkpoints_steps=0", "--save_checkpoints_steps must be at least 1, got 0."),
    ("--eval_steps=-1", "--eval_steps must not be negative (0: once per epoch), got -1."),
    ("--max_train_examples=-5", "--max_train_examples must not be negative (0: all), got -5."),
    ("--num_train_epochs=0", "--num_train_epochs must be positive, got 0.0."),
    ("--num_train_epochs=-1", "--num_train_epochs must be positive, got -1.0."),
    ("--warmup_proportion=2", "--warmup_proportion is a fraction of the training steps, from 0 to 1; got 2.0."),
    ("--learning_rate=-1e-5", "--learning_rate must not be negative, got -1e-05."),
])  # fmt: skip
def test_a_setting_that_cannot_work_is_one_sentence(tmp_path, capsys, flag, expected):
    write_rows(tmp_path / "train.tsv", slice_of("glue/MRPC/train.tsv", 0, 4))
    assert error_of(capsys, "classifier", flags_of("mrpc", tmp_path, tmp_path / "out", "--do_train", flag)) == (
        f"error: {expected}"
    )


def test_an_output_dir_that_is_a_file_is_one_sentence(tmp_path, capsys):
    write_rows(tmp_path / "train.tsv", slice_of("glue/MRPC/train.tsv", 0, 4))
    (tmp_path / "out").write_text("not a folder")
    message = error_of(capsys, "classifier", flags_of("mrpc", tmp_path, tmp_path / "out", "--do_train"))
    assert message == f"error: --output_dir {tmp_path / 'out'} is a file; give a folder."


def test_a_line_that_is_not_utf8_or_holds_a_carriage_return_is_named(tmp_path, capsys):
    rows = slice_of("glue/MRPC/train.tsv", 0, 6)
    write_rows(tmp_path / "train.tsv", rows)
    lines = (tmp_path / "train.tsv").read_bytes().split(b"\n")
    lines[4] = lines[4][:3] + "é".encode("latin-1") + lines[4][3:]
    (tmp_path / "train.tsv").write_bytes(b"\n".join(lines))
    message = error_of(capsys, "classifier", flags_of("mrpc", tmp_path, tmp_path / "out", "--do_train"))
    assert message == (f"error: {tmp_path / 'train.tsv'} line 5 is not UTF-8 text (invalid continuation byte at "
                       "byte 3 of the line); convert the file to UTF-8.")
    write_rows(tmp_path / "train.tsv", rows)
    lines = (tmp_path / "train.tsv").read_bytes().split(b"\n")
    lines[3] = lines[3].replace(b" ", b"\r", 1)
    (tmp_path / "train.tsv").write_bytes(b"\n".join(lines))
    message = error_of(capsys, "classifier", flags_of("mrpc", tmp_path, tmp_path / "out", "--do_train"))
    assert message == f"error: {tmp_path / 'train.tsv'} line 4 holds a carriage return inside the row; remove it."
    conll = tmp_path / "conll"
    conll.mkdir()
    (conll / "eng.train").write_bytes("-DOCSTART- -X- O O\n\nEU NNP I-NP I-ORG\nK\xf6ln NNP I-NP I-LOC\n"
                                      .encode("latin-1"))
    message = error_of(capsys, "ner", flags_of("conll2003", conll, tmp_path / "ner", "--do_train", vocab=CASED))
    assert f"{conll / 'eng.train'} line 4 is not UTF-8 text" in message


def test_an_unknown_tag_is_named_as_the_file_has_it_on_its_own_line(tmp_path, capsys):
    conll = tmp_path / "conll"
    conll.mkdir()
    (conll / "eng.train").write_text("-DOCSTART- -X- O O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\n"
                                     "German JJ I-NP I-MISC\nPeter NNP I-NP I-PER\nin IN I-PP O\n"
                                     "Bonn NNP I-NP I-LOC\n", encoding="utf-8")
    # Line 10 holds an I-FOO that starts an entity: IOB2 training calls it B-FOO.
    (conll / "eng.testa").write_text("-DOCSTART- -X- O O\n\nPeter NNP I-NP I-PER\nBlackburn NNP I-NP I-PER\n\n"
                                     "BRUSSELS NNP I-NP I-LOC\n1996-08-22 CD I-NP O\n\nThe DT I-NP O\n"
                                     "Foo NNP I-NP I-FOO\n", encoding="utf-8")
    message = error_of(capsys, "ner", flags_of("conll2003", conll, tmp_path / "out", "--do_train", "--do_eval",
                                               vocab=CASED))
    assert message.startswith(f"error: {conll / 'eng.testa'} line 10: unknown label 'I-FOO'; ")

