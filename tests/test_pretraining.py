"""Pre-training: the train step against the plain computation, the job end to end, bad inputs."""

from __future__ import annotations

import os
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf import BertConfig, BertEncoder, BertPretrainer
from bert_tf.losses import pretraining_losses
from bert_tf.optimization import create_optimizer
from bert_tf.training import PretrainingTrainer, StepOptions
from bert_tf.training.inputs import MODEL_INPUTS, BatchPlan
from bert_tf.training.runloop import dtype_policy, in_precision
from bert_tf.data.reader import pretraining_dataset
from bert_tf.training import cli as run_pretraining
from tests.pretraining_helpers import (
    PREDICTIONS,
    SEQ,
    fails_with,
    run_entry_point,
    run_flags,
    write_config,
    write_records,
    write_vocab,
)

STEPS = 3
BATCH = 8


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("pretraining")
    return {
        "root": str(root),
        "data": write_records(root / "train.tfrecord", 160),
        "config": write_config(root / "bert_config.json"),
        "config_no_dropout": write_config(root / "bert_config_no_dropout.json", dropout=0.0),
    }


# === The train step ===
def batches(data: str, count: int) -> list[dict[str, tf.Tensor]]:
    dataset = pretraining_dataset(data, BATCH, SEQ, PREDICTIONS, is_training=False, drop_remainder=True)
    return list(dataset.take(count))


def build(config_file: str, accumulation: int = 1, jit: bool = False,
          mixed_precision: str = "none") -> PretrainingTrainer:  # fmt: skip
    keras.utils.set_random_seed(7)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        encoder = BertEncoder(BertConfig.from_json_file(config_file), dtype=dtype_policy(mixed_precision))
        model = BertPretrainer(in_precision(encoder, mixed_precision), PREDICTIONS)
        optimizer = create_optimizer("adamw", 1e-2, num_train_steps=10, num_warmup_steps=0)
        plan = BatchPlan(BATCH, accumulation_steps=accumulation)
        return PretrainingTrainer(strategy, model, optimizer, StepOptions(plan, mixed_precision == "fp16", jit))


def train(trainer: PretrainingTrainer, data: list) -> tuple[list[float], list[np.ndarray]]:
    """Per-step losses and the final weights after one step per batch."""
    iterator = iter(tf.data.Dataset.from_tensor_slices(_stack(data)))
    losses = [trainer.train(iterator, step, 1)["loss_sum"] for step in range(len(data))]
    return losses, [v.numpy() for v in trainer.model.trainable_variables]


def _stack(data: list) -> dict[str, tf.Tensor]:
    return {name: tf.stack([batch[name] for batch in data]) for name in data[0]}


@pytest.fixture(scope="module")
def reference(files):
    """Three steps of the plain `PretrainingTrainer` (one device, no accumulation, no XLA, no dropout)."""
    data = batches(files["data"], STEPS)
    return data, train(build(files["config_no_dropout"]), data)


def test_trainer_matches_the_original_loss_and_a_plain_keras_update(files, reference):
    data, (losses, weights) = reference
    keras.utils.set_random_seed(7)
    model = BertPretrainer(BertEncoder(BertConfig.from_json_file(files["config_no_dropout"])), PREDICTIONS)
    optimizer = create_optimizer("adamw", 1e-2, num_train_steps=10, num_warmup_steps=0)
    for batch, loss in zip(data, losses):
        with tf.GradientTape() as tape:
            outputs = model({name: batch[name] for name in MODEL_INPUTS}, training=True)
            expected = pretraining_losses(batch, outputs)["loss"]
        # The global-batch normalisation of the PretrainingTrainer is the original loss, to rounding.
        assert loss == pytest.approx(float(expected), rel=1e-5)
        # Dense gradients, as on the original's TPUs (one-hot embeddings): the global norm of
        # IndexedSlices would count repeated token-type ids apart.
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(expected, model.trainable_variables)]
        optimizer.apply(grads, model.trainable_variables)
    for got, want in zip(weights, model.trainable_variables):
        np.testing.assert_allclose(got, want.numpy(), atol=2e-5)


def test_gradient_accumulation_takes_the_same_step_as_the_whole_batch(files, reference):
    data, (losses, weights) = reference
    accumulated_losses, accumulated = train(build(files["config_no_dropout"], accumulation=4), data)
    np.testing.assert_allclose(accumulated_losses, losses, rtol=1e-5)
    for got, want in zip(accumulated, weights):
        np.testing.assert_allclose(got, want, atol=2e-5)


def test_train_step_compiles_with_xla_on_one_replica(files, reference):
    data, (losses, weights) = reference
    trainer = build(files["config_no_dropout"], jit=True)
    jit_losses, jit_weights = train(trainer, data)
    assert trainer._replica_step._jit_compile  # the whole step, update included
    np.testing.assert_allclose(jit_losses, losses, rtol=1e-4)
    for got, want in zip(jit_weights, weights):
        np.testing.assert_allclose(got, want, atol=1e-4)


def test_float16_overflow_skips_the_update_and_halves_the_loss_scale(files, reference):
    data, _ = reference
    trainer = build(files["config_no_dropout"], mixed_precision="fp16")
    before = [v.numpy() for v in trainer.model.trainable_variables]
    trainer.loss_scale.assign(2.0**100)  # the float16 backward pass overflows
    iterator = iter(tf.data.Dataset.from_tensor_slices(_stack(data)))
    stats = trainer.train(iterator, 0, 1)
    assert (stats["applied_steps"], stats["bad_steps"]) == (0.0, 0.0)
    assert trainer.loss_scale.numpy() == 2.0**99 and int(trainer.optimizer.iterations.numpy()) == 0
    for got, want in zip(trainer.model.trainable_variables, before):
        np.testing.assert_array_equal(got.numpy(), want)
    trainer.loss_scale.assign(2.0**10)
    stats = trainer.train(iterator, 1, 2)
    assert stats["applied_steps"] == 2.0 and np.isfinite(stats["loss_sum"])


def test_training_steps_match_transformers_and_torch_adamw(files, tmp_path):
    """From the same initial weights and batches, our steps (bias-corrected AdamW, warm-up
    then linear decay, clipping at 1.0) take HF `BertForPreTraining`'s steps under torch's
    AdamW and `get_linear_schedule_with_warmup`, HF's own losses: every step's loss agrees
    to float32 rounding, through warm-up and decay, and so do the final weights."""
    transformers, torch = pytest.importorskip("transformers"), pytest.importorskip("torch")
    from bert_tf.checkpoints import save

    steps, warmup, rate = 16, 4, 1e-2
    data = batches(files["data"], steps)
    keras.utils.set_random_seed(3)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = BertPretrainer(BertEncoder(BertConfig.from_json_file(files["config_no_dropout"])), PREDICTIONS)
        optimizer = create_optimizer("adamw", rate, steps, warmup, bias_correction=True, lr_decay="from_peak")
        trainer = PretrainingTrainer(strategy, model, optimizer, StepOptions(BatchPlan(BATCH)))
    theirs = transformers.BertForPreTraining.from_pretrained(save(model, tmp_path / "hf", "hf")).train()
    decayed = [p for n, p in theirs.named_parameters() if "bias" not in n and "LayerNorm" not in n]
    undecayed = [p for n, p in theirs.named_parameters() if "bias" in n or "LayerNorm" in n]
    torch_optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.01},
                                         {"params": undecayed, "weight_decay": 0.0}], lr=rate, eps=1e-6)  # fmt: skip
    schedule = transformers.get_linear_schedule_with_warmup(torch_optimizer, warmup, steps)

    initial = model.encoder.word_embeddings.embeddings.numpy()
    ours, hf = train(trainer, data)[0], []
    for batch in data:
        batch = {name: torch.from_numpy(value.numpy()).long() for name, value in batch.items()}
        labels = torch.full_like(batch["input_word_ids"], -100)  # HF scores the labelled positions only
        for row, (positions, ids, weights) in enumerate(
            zip(batch["masked_lm_positions"], batch["masked_lm_ids"], batch["masked_lm_weights"])
        ):
            real = weights > 0
            labels[row, positions[real]] = ids[real]
        loss = theirs(input_ids=batch["input_word_ids"], attention_mask=batch["input_mask"],
                      token_type_ids=batch["input_type_ids"], labels=labels,
                      next_sentence_label=batch["next_sentence_labels"].flatten()).loss  # fmt: skip
        loss.backward()
        torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0)
        torch_optimizer.step()
        schedule.step()
        torch_optimizer.zero_grad()
        hf.append(loss.item())
    np.testing.assert_allclose(ours, hf, rtol=2e-5)
    embeddings = theirs.bert.embeddings.word_embeddings.weight.detach().numpy()
    np.testing.assert_allclose(model.encoder.word_embeddings.embeddings.numpy(), embeddings, atol=2e-5)
    assert np.abs(embeddings - initial).max() > 1000 * 2e-5  # the steps moved the weights


def test_bfloat16_steps_train_with_float32_activations(files, reference):
    """--mixed_precision=bf16 as torch.autocast: float32 variables and activations, the
    projections and the masked-LM output projection in bfloat16. The losses are float32's to
    bf16's precision, not equal to them (the matmuls do run in bf16)."""
    data, (losses, _) = reference
    trainer = build(files["config_no_dropout"], mixed_precision="bf16")
    layers = trainer.model._flatten_layers()
    assert {(type(layer).__name__, layer.matmul_dtype) for layer in layers if hasattr(layer, "matmul_dtype")} == {
        ("PositionwiseDense", "bfloat16"), ("TiedEmbedding", "bfloat16")}
    assert trainer.model.encoder.compute_dtype == "float32"
    bf16_losses, weights = train(trainer, data)
    np.testing.assert_allclose(bf16_losses, losses, rtol=0.02)
    assert not np.allclose(bf16_losses, losses, rtol=1e-5)
    assert all(np.isfinite(w).all() for w in weights)


# === The job ===
def test_run_pretraining_trains_evaluates_and_logs(files):
    output = os.path.join(files["root"], "run")
    flags = run_flags(files["data"], output, files["config"], do_eval=True)
    result = run_entry_point(flags)
    assert result.returncode == 0, result.stderr[-3000:]
    progress = [line for line in result.stdout.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in progress] == ["3/6", "6/6"]
    assert "examples/s" in progress[0] and "tokens/s" in progress[0]

    lines = pathlib.Path(output, "eval_results.txt").read_text().splitlines()
    keys = ["global_step", "loss", "masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
            "next_sentence_loss"]  # fmt: skip
    assert [line.split(" = ")[0] for line in lines] == keys
    assert lines[0] == "global_step = 6"
    assert tf.train.latest_checkpoint(output).endswith("ckpt-6")
    assert os.path.exists(os.path.join(output, "ckpt-3.index"))
    assert BertConfig.from_json_file(os.path.join(output, "bert_config.json")) == BertConfig.from_json_file(
        files["config"]
    )
    assert _scalar_tags(output) >= {
        "loss", "masked_lm_loss", "masked_lm_accuracy", "next_sentence_loss", "next_sentence_accuracy",
        "learning_rate", "gradient_norm", "examples_per_second", "tokens_per_second", "loss_scale",
    }  # fmt: skip
    assert _scalar_tags(os.path.join(output, "eval")) >= {"loss", "masked_lm_accuracy", "next_sentence_accuracy"}


def _scalar_tags(directory: str) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(directory)
    events.Reload()
    return set(events.Tags()["tensors"])


def test_second_phase_starts_from_the_first_phase_checkpoint(files, capsys):
    # The two-phase recipe: longer sequences, more predictions, weights of phase 1.
    root = pathlib.Path(files["root"])
    phase1 = root / "phase1"
    assert run_pretraining.main([*run_flags(files["data"], str(phase1), files["config"], num_train_steps=3)]) == 0
    long_data = write_records(root / "long.tfrecord", 32, seq=32, predictions=8)
    phase2 = root / "phase2"
    flags = run_flags(long_data, str(phase2), files["config"], max_seq_length=32, max_predictions_per_seq=8,
                      num_train_steps=2, init_checkpoint=phase1)  # fmt: skip
    assert run_pretraining.main([*flags]) == 0
    assert f"Initialised from training checkpoint {phase1}{os.sep}ckpt-3." in capsys.readouterr().out
    assert tf.train.latest_checkpoint(phase2).endswith("ckpt-2")


def test_dynamic_masking_with_lamb(files, tmp_path, capsys):
    # Statically masked files work too: the reader puts the original tokens back first.
    flags = run_flags(files["data"], str(tmp_path / "out"), files["config"], dynamic_masking=True, optimizer="lamb",
                      num_train_steps=3)  # fmt: skip
    fails_with(capsys, flags, "[MASK] id 103", "vocab_size 60", "--vocab_file")  # Google's ids by default
    vocab = write_vocab(tmp_path / "vocab.txt")
    assert run_pretraining.main([*flags, f"--vocab_file={vocab}"]) == 0
    assert "step 3/3" in capsys.readouterr().out


def test_init_checkpoint_reads_google_tf1_checkpoints(files, tmp_path):
    from bert_tf import checkpoints

    config = BertConfig.from_json_file(files["config"])
    source = BertPretrainer(BertEncoder(config), PREDICTIONS)
    path = checkpoints.save(source, tmp_path / "google", "tf1")
    target = BertPretrainer(BertEncoder(config), PREDICTIONS)
    assert checkpoints.load_into(target, path).startswith("tf1 checkpoint")
    for got, want in zip(target.trainable_variables, source.trainable_variables):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


# === Bad input: one sentence on stderr, exit status 1, nothing saved is lost ===
def test_missing_input_files_exit_with_one_sentence_and_no_traceback(files, tmp_path):
    flags = run_flags(str(tmp_path / "nothing-*.tfrecord"), str(tmp_path / "out"), files["config"])
    result = run_entry_point(flags)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"error: Pre-training data pattern '{tmp_path}/nothing-*.tfrecord' matches no file."]


def test_corrupt_records(files, tmp_path, capsys):
    garbage = tmp_path / "garbage.tfrecord"
    garbage.write_bytes(b"this is not a TFRecord file at all" * 10)
    error = fails_with(capsys, run_flags(str(garbage), str(tmp_path / "a"), files["config"]),
                       f"error: {garbage} is not a TFRecord file (")
    assert "{{" not in error and "function_node" not in error, error  # TensorFlow's node names left out

    # Intact at the start, damaged inside: found by the input pipeline, while training.
    damaged = bytearray(pathlib.Path(files["data"]).read_bytes())
    middle = len(damaged) * 3 // 4
    damaged[middle : middle + 40] = b"x" * 40
    corrupt = tmp_path / "corrupt.tfrecord"
    corrupt.write_bytes(bytes(damaged))
    flags = run_flags(str(corrupt), str(tmp_path / "b"), files["config"])
    fails_with(capsys, flags, f"Reading the training data (--input_file {corrupt}) failed during steps 1-3: a record "
               "is damaged (corrupted record at")


def test_records_of_another_length_name_both_values(files, tmp_path, capsys):
    flags = run_flags(files["data"], str(tmp_path / "out"), files["config"], max_seq_length=32, max_predictions_per_seq=5)
    fails_with(capsys, flags, "max_seq_length 16 and max_predictions_per_seq 4", "--max_seq_length=32",
               "--max_predictions_per_seq=5")  # fmt: skip


def test_init_checkpoint_of_another_size(files, tmp_path, capsys):
    from bert_tf import checkpoints

    bigger = BertConfig.from_dict({**BertConfig.from_json_file(files["config"]).to_dict(), "hidden_size": 64,
                                   "intermediate_size": 256})  # fmt: skip
    path = checkpoints.save(BertEncoder(bigger), tmp_path / "big", "tf1")
    flags = run_flags(files["data"], str(tmp_path / "out"), files["config"], init_checkpoint=path)
    fails_with(capsys, flags, f"--init_checkpoint {path} holds a BERT of 2 layers, hidden size 64", "hidden size 32")


def test_unwritable_output_dir(files, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    fails_with(capsys, run_flags(files["data"], str(blocker / "out"), files["config"]), "Cannot write to --output_dir")


def test_nan_loss_stops_naming_the_step_and_keeps_the_last_good_checkpoint(files, tmp_path, capsys):
    output = tmp_path / "out"
    # A learning rate of 1e30 throws the weights to ~1e30 in step 1: step 2 overflows.
    flags = run_flags(files["data"], str(output), files["config"], learning_rate=1e30, num_warmup_steps=0,
                      save_checkpoints_steps=1, iterations_per_loop=1)  # fmt: skip
    error = fails_with(capsys, flags, "The loss is NaN or infinite at step 2", f"{output}{os.sep}ckpt-1 is kept")
    assert tf.train.latest_checkpoint(output).endswith("ckpt-1")
    assert not os.path.exists(output / "ckpt-2.index"), error


def test_flag_mistakes(files, tmp_path, capsys):
    out = str(tmp_path / "out")
    fails_with(capsys, run_flags(files["data"], out, files["config"], preset="tiny"), "either --bert_config_file or --preset")
    fails_with(capsys, run_flags(files["data"], out, files["config"], gradient_accumulation_steps=3),
               "batch size 8 must be a multiple of 3")  # fmt: skip
    fails_with(capsys, run_flags(files["data"], out, files["config"], do_train=False), "--do_train or --do_eval")
    fails_with(capsys, [*run_flags(files["data"], out, files["config"]), "--mixed_precision=fp8"], "--mixed_precision")

