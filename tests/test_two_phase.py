"""Two-phase pre-training as a user runs it (the original README's recipe: most steps at a
short sequence length, the rest at a long one), on a slice of the shared English Wikipedia:
WikiExtractor articles -> `prepare_corpus` -> `create_pretraining_data.py` at seq 32 and
64 -> phase 1 -> phase 2 in a new output dir, with `--init_checkpoint_state=weights` (the
original's `--init_checkpoint`) and `all` (step, Adam moments and schedule carried).

The facts checked are worked out by hand from AdamWeightDecay's update (no bias
correction, as the original):

    m1 = 0.9 m0 + 0.1 g,   v1 = 0.999 v0 + 0.001 g^2,   w1 = w0 - lr m1 / (sqrt(v1) + 1e-6)

for a variable without weight decay (a bias). From two checkpoints, one step apart, `g`
follows from the `m`s, which must then give the `v`s: with the moments phase 1 saved as
`m0`, `v0` when they are carried, with zeros when they are not; and `lr` follows from
the weights. The schedule: peak 1e-3, 2 warm-up steps, linear decay counted from step 0
to the run's `--num_train_steps`.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import BertConfig, BertEncoder, checkpoints
from bert_tf.flags import parse
from bert_tf.training import PretrainingRun
from bert_tf.training import cli as run_pretraining
from tests.conftest import PROJECT, require_module, shared_file
from tests.pretraining_helpers import fails_with

ENWIKI = "pretrain/enwiki/wiki_00"
ARTICLES = 60  # the first 60 articles of wiki_00: 6 are kept (54 are empty), 127 / 70 instances
VOCAB = "vocab/google_uncased_en_vocab.txt"
PEAK, WARMUP, BATCH = 1e-3, 2, 4
PHASE1_STEPS = 6  # at seq 32; phase 2 at seq 64 then runs to TOTAL_STEPS when carrying
TOTAL_STEPS = 10
PHASE1 = {"max_seq_length": 32, "max_predictions_per_seq": 5}
PHASE2 = {"max_seq_length": 64, "max_predictions_per_seq": 10}
BIAS = "model/mlm_output_bias/bias/.ATTRIBUTES/VARIABLE_VALUE"  # no weight decay; 30,522 values
STEP = "global_step/.ATTRIBUTES/VARIABLE_VALUE"
ITERATIONS = "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"


# === Data and phase 1 ===
def articles(count: int) -> str:
    """The first `count` articles of the shared WikiExtractor file, as it has them."""
    lines = shared_file(ENWIKI).read_text(encoding="utf-8").splitlines(keepends=True)
    ends = [number for number, line in enumerate(lines) if line.startswith("</doc>")]
    return "".join(lines[: ends[count - 1] + 1])


def make_records(corpus: pathlib.Path, output: pathlib.Path, max_seq_length: int, max_predictions_per_seq: int) -> str:
    result = PROJECT.run(
        "create_pretraining_data.py", f"--input_file={corpus}", f"--output_file={output}",
        f"--vocab_file={shared_file(VOCAB)}", f"--max_seq_length={max_seq_length}",
        f"--max_predictions_per_seq={max_predictions_per_seq}", "--dupe_factor=2", "--noprogress",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return str(output)


def phase_flags(data: str, output_dir: pathlib.Path, config: str, shape: dict[str, int], **more) -> list[str]:
    values = {
        "input_file": data, "output_dir": output_dir, "bert_config_file": config, **shape,
        "train_batch_size": BATCH, "learning_rate": PEAK, "num_warmup_steps": WARMUP,
        "save_checkpoints_steps": 1, "iterations_per_loop": 1, **more,
    }  # fmt: skip
    return ["--do_train", *(f"--{name}={value}" for name, value in values.items())]


@pytest.fixture(scope="module")
def phases(tmp_path_factory) -> dict[str, object]:
    """The two phases' records, a tiny BERT with Google's vocabulary, and phase 1 trained."""
    require_module("sentencex", "the sentence segmenter of prepare_corpus")
    root = tmp_path_factory.mktemp("two_phase")
    (root / "wiki_00").write_text(articles(ARTICLES), encoding="utf-8")
    corpus = root / "corpus.txt"
    result = PROJECT.run("-m", "data_prep.prepare_corpus", f"--input_file={root / 'wiki_00'}",
                         f"--output_file={corpus}", "--input_format=wikiextractor")  # fmt: skip
    assert result.returncode == 0, result.stderr
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)  # fmt: skip
    config.to_json_file(root / "bert_config.json")
    setup = {
        "root": root,
        "config": str(root / "bert_config.json"),
        "short": make_records(corpus, root / "seq32.tfrecord", **PHASE1),
        "long": make_records(corpus, root / "seq64.tfrecord", **PHASE2),
        "phase1": root / "phase1",
    }
    flags = phase_flags(setup["short"], setup["phase1"], setup["config"], PHASE1, num_train_steps=PHASE1_STEPS,
                        save_checkpoints_steps=3, iterations_per_loop=3)  # fmt: skip
    assert run_pretraining.main(flags) == 0
    setup["phase1_final"] = tf.train.load_checkpoint(str(setup["phase1"] / f"ckpt-{PHASE1_STEPS}"))
    return setup


def phase2_flags(phases, output_dir: pathlib.Path, state: str | None, **more) -> list[str]:
    init = {"init_checkpoint": phases["phase1"], **({"init_checkpoint_state": state} if state else {})}
    return phase_flags(phases["long"], output_dir, phases["config"], PHASE2, **init, **more)


# === What phase 2 starts from ===
def started(flags: list[str], scratch: pathlib.Path,
            log: list[str]) -> tuple[PretrainingRun, tf.train.CheckpointReader]:  # fmt: skip
    """Phase 2 set up as run_pretraining.py sets it up (its lines into `log`), before its
    first step, and its model and optimiser written as a checkpoint (to compare with
    phase 1's by name)."""
    parse(run_pretraining.FLAGS, flags)
    session = PretrainingRun(run_pretraining.options_from_flags(run_pretraining.FLAGS), log=log.append)
    session.restore()
    path = tf.train.Checkpoint(model=session.model, optimizer=session.optimizer).write(str(scratch / "start"))
    return session, tf.train.load_checkpoint(path)


def tensors(reader: tf.train.CheckpointReader, prefix: str) -> dict[str, np.ndarray]:
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map() if name.startswith(prefix)}


def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want) and got
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def bias_state(reader: tf.train.CheckpointReader) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(w, m, v) of the masked-LM output bias. Its shape (the vocabulary's) is its own:
    of the two optimiser slots of that shape, `m` is the first (AdamWeightDecay builds
    every `m` before every `v`)."""
    shapes = reader.get_variable_to_shape_map()
    slots = sorted((name for name in shapes if name.startswith("optimizer/_variables/") and shapes[name] == [30522]),
                   key=lambda name: int(name.split("/")[2]))  # fmt: skip
    assert len(slots) == 2, slots
    return reader.get_tensor(BIAS), reader.get_tensor(slots[0]), reader.get_tensor(slots[1])


def one_step(before: tuple[np.ndarray, ...], after: tf.train.CheckpointReader) -> float:
    """The learning rate of the update from `before` (w, m, v) to the checkpoint `after`,
    once `after`'s `v` is checked against the one `before`'s moments and the gradient
    (from the `m`s) give."""
    (w0, m0, v0), (w1, m1, v1) = before, bias_state(after)
    gradient = (m1 - 0.9 * m0) / 0.1
    np.testing.assert_allclose(v1, 0.999 * v0 + 0.001 * gradient**2, rtol=1e-3, atol=1e-4 * float(np.abs(v1).max()))
    direction = m1 / (np.sqrt(v1) + 1e-6)
    usable = np.abs(direction) > 0.1  # elements whose step is well above float32 rounding
    assert usable.sum() > 100, usable.sum()
    rates = (w0 - w1)[usable] / direction[usable]
    np.testing.assert_allclose(rates, np.median(rates), rtol=1e-3, atol=1e-9)  # one learning rate for all
    return float(np.median(rates))


def checkpoint(output_dir: pathlib.Path, step: int) -> tf.train.CheckpointReader:
    return tf.train.load_checkpoint(str(output_dir / f"ckpt-{step}"))


def test_weights_mode_starts_at_step_0_with_zero_moments_and_a_new_warm_up(phases, tmp_path, capsys):
    phase1 = phases["phase1_final"]
    output = tmp_path / "phase2"

    session, start = started(phase2_flags(phases, output, "weights", num_train_steps=3), tmp_path, [])
    assert int(session.global_step.numpy()) == 0 and int(session.optimizer.iterations.numpy()) == 0
    assert float(session.optimizer.learning_rate) == 0.0  # warm-up at step 0: PEAK * 0 / WARMUP
    moments = tensors(start, "optimizer/_variables/")
    assert len(moments) == 2 * len(session.model.trainable_variables)
    assert not any(value.any() for value in moments.values())
    assert_same(tensors(start, "model/"), tensors(phase1, "model/"))

    assert run_pretraining.main(phase2_flags(phases, output, None, num_train_steps=3)) == 0  # the default
    assert f"Initialised from training checkpoint {phases['phase1']}{os.sep}ckpt-{PHASE1_STEPS}." in (
        capsys.readouterr().out
    )
    first, second = checkpoint(output, 1), checkpoint(output, 2)
    assert int(first.get_tensor(STEP)) == 1 and int(first.get_tensor(ITERATIONS)) == 1
    # Step 1: moments from zero, not phase 1's; learning rate 0, so no weight moves.
    w0, m0, _ = bias_state(phase1)
    assert m0.any()
    assert one_step((w0, np.zeros_like(m0), np.zeros_like(m0)), first) == 0.0
    assert_same(tensors(first, "model/"), tensors(phase1, "model/"))
    # Step 2: phase 2's own warm-up, PEAK * 1 / WARMUP.
    assert one_step(bias_state(first), second) == pytest.approx(PEAK * 1 / WARMUP, rel=1e-3)


def test_all_mode_carries_step_moments_and_schedule_but_not_the_input_position(phases, tmp_path, capsys):
    phase1 = phases["phase1_final"]
    output = tmp_path / "phase2"
    flags = phase2_flags(phases, output, "all", num_train_steps=TOTAL_STEPS)

    log: list[str] = []
    session, start = started(flags, tmp_path, log)
    assert int(session.global_step.numpy()) == PHASE1_STEPS
    assert int(session.optimizer.iterations.numpy()) == PHASE1_STEPS
    # The schedule of the whole run at step 6 (after warm-up): PEAK * (1 - 6 / 10).
    first_rate = PEAK * (1 - PHASE1_STEPS / TOTAL_STEPS)
    assert float(session.optimizer.learning_rate) == pytest.approx(first_rate, rel=1e-6)
    assert int(session.examples.numpy()) == PHASE1_STEPS * BATCH
    assert_same(tensors(start, "optimizer/_variables/"), tensors(phase1, "optimizer/_variables/"))
    assert_same(tensors(start, "model/"), tensors(phase1, "model/"))

    # Trained as run_pretraining.py trains it, and stopped at step 8.
    stopped = PHASE1_STEPS + 2
    session.write_config()
    session.train(until=stopped)
    assert f"Carried step {PHASE1_STEPS}, the optimiser state and the learning-rate schedule" in log[0]
    assert not any("Warning" in line for line in log), log  # phase 1 ran to its end
    assert not any("skipping" in line for line in log), log  # its input starts at its beginning, not 6 batches in
    assert [line.split()[1] for line in log if line.startswith("step ")] == ["7/10", "8/10"]
    first = checkpoint(output, PHASE1_STEPS + 1)
    assert int(first.get_tensor(STEP)) == PHASE1_STEPS + 1 and int(first.get_tensor(ITERATIONS)) == PHASE1_STEPS + 1
    # Step 7 starts from phase 1's moments, at the rate of step 6 of the schedule.
    assert one_step(bias_state(phase1), first) == pytest.approx(first_rate, rel=1e-3)

    # Restarted with its input position lost: it skips the 2 batches phase 2 had read, not 8.
    for position in (output / "input_state").glob("*/worker-*/input-*"):
        position.unlink()
    assert run_pretraining.main(flags) == 0
    out = capsys.readouterr().out
    assert f"Resuming from {output}{os.sep}ckpt-{stopped} at step {stopped}." in out
    assert f"No saved position of this input at step {stopped}: skipping 2 batches of it." in out
    final = checkpoint(output, TOTAL_STEPS)
    assert int(final.get_tensor("examples/.ATTRIBUTES/VARIABLE_VALUE")) == TOTAL_STEPS * BATCH
    resumed = one_step(bias_state(checkpoint(output, stopped)), checkpoint(output, stopped + 1))
    assert resumed == pytest.approx(PEAK * (1 - stopped / TOTAL_STEPS), rel=1e-3)


def test_all_mode_from_an_unfinished_phase_1_warns(phases, tmp_path):
    """Phase 1 stopped at step 3 of its 6 (killed, say): carried without a word, phase 2 went on with the
    schedule at step 3 and the user none the wiser."""
    earlier = phases["phase1"] / "ckpt-3"
    flags = [*phase2_flags(phases, tmp_path / "phase2", "all", num_train_steps=TOTAL_STEPS), f"--init_checkpoint={earlier}"]
    log: list[str] = []
    session, _ = started(flags, tmp_path, log)
    assert int(session.global_step.numpy()) == 3
    assert log[1] == (f"Warning: its run was to train to step {PHASE1_STEPS}, so this phase starts 3 steps early, with "
                      f"the schedule where step 3 left it; if that run was interrupted, resume it first (the same "
                      f"command on {phases['phase1']}).")


def test_all_mode_under_other_schedule_flags_warns_and_uses_them(phases, tmp_path):
    """Phase 2 given another peak rate and warm-up than phase 1's: the rate at the carried
    step is this run's schedule's (the original computes it from its flags and the step),
    and the log says which flags moved it."""
    flags = phase2_flags(phases, tmp_path / "phase2", "all", num_train_steps=TOTAL_STEPS, learning_rate=2 * PEAK,
                         num_warmup_steps=WARMUP + 1)  # fmt: skip
    log: list[str] = []
    session, _ = started(flags, tmp_path, log)
    assert float(session.optimizer.learning_rate) == pytest.approx(2 * PEAK * (1 - PHASE1_STEPS / TOTAL_STEPS), rel=1e-6)
    assert log[1:] == [f"Warning: the schedule goes on from step {PHASE1_STEPS} with this run's flags (learning_rate "
                       f"was {PEAK}, now {2 * PEAK}, num_warmup_steps was {WARMUP}, now {WARMUP + 1}); give its run's to "
                       "continue its schedule."]


# === Bad input: one sentence, exit status 1 ===
def test_rerunning_phase_1_dir_with_phase_2_records_is_refused(phases, capsys):
    before = sorted(os.listdir(phases["phase1"]))
    flags = phase_flags(phases["long"], phases["phase1"], phases["config"], PHASE2, num_train_steps=TOTAL_STEPS)
    fails_with(capsys, flags, f"--output_dir {phases['phase1']} holds a pre-training phase on records of "
               "max_seq_length 32 and max_predictions_per_seq 5, but this run reads 64 and 10",
               f"new --output_dir with --init_checkpoint={phases['phase1']}",
               "--init_checkpoint_state=all")  # fmt: skip
    assert sorted(os.listdir(phases["phase1"])) == before
    assert tf.train.latest_checkpoint(str(phases["phase1"])).endswith(f"ckpt-{PHASE1_STEPS}")


def test_all_mode_needs_a_training_checkpoint_that_has_not_reached_the_total(phases, tmp_path, capsys):
    out = tmp_path / "out"
    missing = tmp_path / "nothing"
    fails_with(capsys, [*phase2_flags(phases, out, "all"), f"--init_checkpoint={missing}"],
               f"--init_checkpoint {missing} does not exist.")  # fmt: skip
    weights_only = checkpoints.save(BertEncoder(BertConfig.from_json_file(phases["config"])), tmp_path / "hf", "hf")
    fails_with(capsys, [*phase2_flags(phases, out, "all"), f"--init_checkpoint={weights_only}"],
               f"--init_checkpoint {weights_only} is a hf checkpoint (weights only)",
               "pass --init_checkpoint_state=weights")  # fmt: skip
    fails_with(capsys, phase2_flags(phases, out, "all", num_train_steps=PHASE1_STEPS),
               f"is at step {PHASE1_STEPS}", f"--num_train_steps={PHASE1_STEPS} counts both phases")  # fmt: skip
    no_init = [flag for flag in phase2_flags(phases, out, "all") if not flag.startswith("--init_checkpoint=")]
    fails_with(capsys, no_init, "--init_checkpoint_state=all carries the state of --init_checkpoint")
    fails_with(capsys, phase2_flags(phases, out, "some"), "--init_checkpoint_state: invalid choice 'some'")
    assert not out.exists()  # each refused run removed the empty --output_dir it had made


def test_records_of_another_length_than_the_flags_name_the_file_and_both(phases, capsys):
    # Phase 2's records with phase 1's flags, and a phase-2 glob that caught a phase-1 file.
    out = phases["root"] / "mismatch"
    fails_with(capsys, phase_flags(phases["long"], out, phases["config"], PHASE1),
               f"{phases['long']} holds records of max_seq_length 64 and max_predictions_per_seq 10, "
               "but --max_seq_length=32 and --max_predictions_per_seq=5")  # fmt: skip
    both = f"{phases['long']},{phases['short']}"
    fails_with(capsys, phase_flags(both, out, phases["config"], PHASE2),
               f"{phases['short']} holds records of max_seq_length 32 and max_predictions_per_seq 5, "
               "but --max_seq_length=64 and --max_predictions_per_seq=10")  # fmt: skip
    fails_with(capsys, phase_flags(phases["long"], out, phases["config"], {**PHASE2, "max_predictions_per_seq": 20}),
               "max_seq_length 64 and max_predictions_per_seq 10", "--max_predictions_per_seq=20")  # fmt: skip
    assert not out.exists()  # refused before anything is written: no empty --output_dir left behind
