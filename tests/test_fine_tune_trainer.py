"""The fine-tuning loop's update, checked against a step written out by hand."""

from __future__ import annotations

import dataclasses
import os
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf import BertConfig, BertEncoder, BertTfError
from bert_tf.optimization import AdamWeightDecay
from fine_tune.heads import ClassificationHead, classification_loss
from fine_tune.task import Features
from fine_tune.trainer import ENCODER_INPUTS, FineTuningTrainer, TrainingConfig


def repeated_token_features() -> Features:
    """Rows that repeat one token many times: its embedding gradient comes as many slices."""
    ids = [np.array([2] + [5] * 20 + [3], np.int32), np.array([2, 6, 6, 6, 7, 3], np.int32)] * 2
    return Features(
        {"input_word_ids": ids, "input_type_ids": [np.zeros_like(i) for i in ids]},
        {"label_ids": np.array([0, 1, 1, 0], np.int32)},
        np.arange(len(ids)),
    )


def classifier(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    config = BertConfig.from_preset("tiny", vocab_size=10, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = ClassificationHead().build(BertEncoder(config), 2, 0.0)
    # A large head makes large gradients: clipping then acts on every step.
    head = model.get_layer("logits")
    kernel = np.random.default_rng(seed).normal(0.0, 30.0, head.kernel.shape).astype("float32")
    head.set_weights([kernel, np.zeros(2, "float32")])
    return model


def two_step_config(output_dir: str) -> TrainingConfig:
    return TrainingConfig(output_dir, train_batch_size=2, num_train_epochs=1, warmup_proportion=0.0,
                          learning_rate=0.05, lr_decay="from_peak", iterations_per_loop=1, save_checkpoints_steps=100)


def two_step_run(strategy: tf.distribute.Strategy, output_dir: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(the weights after the loop's 2 steps on `repeated_token_features` under `strategy`,
    the trained model's predictions of those rows, in one batch split across the replicas)."""
    with strategy.scope():
        model = classifier(seed=7)
    trainer = FineTuningTrainer(model, classification_loss, False, two_step_config(output_dir), strategy)
    trainer.train(repeated_token_features())
    return [np.asarray(v) for v in model.trainable_variables], trainer.predict(repeated_token_features(), batch_size=4)


def test_two_steps_clip_the_dense_global_norm(tmp_path):
    """The loop's weights after 2 steps equal a hand-written step: the dense gradients
    (repeated tokens summed), clipped by TensorFlow's own `clip_by_global_norm` to 1.0,
    then the same optimiser without clipping. A constant rate (no warm-up) so both
    updates count; the clipping factors differ between the steps, which Adam feels."""
    features = repeated_token_features()
    config = two_step_config(str(tmp_path))
    model = classifier(seed=7)
    reference = classifier(seed=7)
    strategy = tf.distribute.get_strategy()
    trainer = FineTuningTrainer(model, classification_loss, False, config, strategy)
    batches = list(trainer.distribute(features, trainer._plan(features, epoch=0)))
    assert trainer.train(features) == 2

    # The schedule would be 0.05 then 0.025 (linear decay over 2 steps, no warm-up).
    optimizer = AdamWeightDecay(learning_rate=0.05, global_clipnorm=None)
    optimizer.build(reference.trainable_variables)
    norms = []
    for rate, batch in zip((0.05, 0.025), batches):
        optimizer.learning_rate.assign(rate)
        with tf.GradientTape() as tape:
            logits = reference({key: batch[key] for key in ENCODER_INPUTS}, training=True)
            total, count = classification_loss(batch, logits)
            loss = total / count
        gradients = [tf.convert_to_tensor(g) for g in tape.gradient(loss, reference.trainable_variables)]
        clipped, norm = tf.clip_by_global_norm(gradients, 1.0)
        norms.append(float(norm))
        optimizer.apply_gradients(zip(clipped, reference.trainable_variables))
    assert min(norms) > 1.0  # clipping was active at both steps
    for ours, theirs in zip(model.trainable_variables, reference.trainable_variables):
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-4, atol=1e-5, err_msg=ours.path)


def test_neighbouring_seeds_share_no_epoch_order(tmp_path):
    """Every (seed, epoch) has its own batch order: seed 1's second epoch is not seed 2's
    first (it was, when the plan's seed was seed + epoch), and a seed's epochs differ."""
    features = Features({"input_word_ids": [np.arange(4, dtype=np.int32)] * 64}, {}, np.arange(64))

    def order(seed: int, epoch: int) -> list[int]:
        config = dataclasses.replace(two_step_config(str(tmp_path)), seed=seed)
        trainer = FineTuningTrainer(classifier(seed=7), classification_loss, False, config, tf.distribute.get_strategy())
        return np.concatenate(trainer._plan(features, epoch)).tolist()

    orders = [order(seed, epoch) for seed in (1, 2) for epoch in (0, 1)]
    assert sorted(orders[0]) == list(range(64))
    assert len({tuple(o) for o in orders}) == 4
    assert order(1, 1) == orders[1]  # still a function of (seed, epoch): a resumed run replays it


MIRRORED_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from tests.test_fine_tune_trainer import two_step_run

    one, one_predicted = two_step_run(tf.distribute.OneDeviceStrategy("/cpu:0"), sys.argv[1] + "/one")
    two, two_predicted = two_step_run(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), sys.argv[1] + "/two")
    print("max_difference", max(float(np.abs(a - b).max()) for a, b in zip(one, two)))
    print("same", all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(one, two)))
    print("same predictions", len(two_predicted) == 4 and all(
        np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(one_predicted, two_predicted)))
    """
)


def test_two_replicas_take_the_same_clipped_steps_as_one_device(tmp_path, project):
    """MirroredStrategy over two logical CPUs, each replica with half of each batch, ends
    with the weights of one device (before the shared `Updater`, fine-tuning under
    MirroredStrategy stopped at its first step: `int()` of a mirrored step counter), and
    predicts every row as one device does (each replica's rows put back in row order)."""
    result = project.run("-c", MIRRORED_SCRIPT, str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "same True" in result.stdout and "same predictions True" in result.stdout, result.stdout[-500:]


def test_a_diverging_loss_stops_naming_the_step_and_keeps_the_last_good_checkpoint(tmp_path):
    """The run core's NaN stop, as pre-training's: a rate of 1e30 throws the weights to
    ~1e30 in step 1, so step 2's loss is not finite; nothing of step 2 is saved."""
    config = dataclasses.replace(two_step_config(str(tmp_path)), learning_rate=1e30, save_checkpoints_steps=1)
    trainer = FineTuningTrainer(classifier(seed=7), classification_loss, False, config, tf.distribute.get_strategy())
    with pytest.raises(BertTfError) as error:
        trainer.train(repeated_token_features())
    kept = os.path.join(str(tmp_path), "checkpoints", "ckpt-1")
    assert str(error.value).startswith(f"The loss is NaN or infinite at step 2; training stopped and the last good "
                                       f"checkpoint {kept} is kept")  # fmt: skip
    assert tf.train.latest_checkpoint(os.path.join(str(tmp_path), "checkpoints")) == kept


class _CallCounter(keras.Model):
    """`model`, counting its calls and the positions it was given (in variables: it runs in a graph)."""

    def __init__(self, model: keras.Model):
        super().__init__()
        self.model = model
        self.calls = tf.Variable(0)
        self.positions = tf.Variable(0)

    def call(self, inputs, training=False):
        self.calls.assign_add(1)
        self.positions.assign_add(tf.size(inputs["input_word_ids"]))
        return self.model(inputs, training=training)


@pytest.mark.parametrize("per_token", [False, True], ids=["classification", "tagging"])
def test_prediction_runs_rows_of_similar_length_8_at_a_time(tmp_path, per_token):
    """19 rows of lengths out of order, in one batch of 32: each row's outputs are the model's on that
    row alone, unpadded; the model ran 3 times (8, 8, 3 rows by length), each cut to its longest."""
    from fine_tune.heads import TokenClassificationHead

    keras.utils.set_random_seed(5)
    config = BertConfig.from_preset("tiny", vocab_size=10, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    head = TokenClassificationHead() if per_token else ClassificationHead()
    model = head.build(BertEncoder(config), 3, 0.0)
    lengths = [(n * 7) % 40 + 2 for n in range(19)]
    ids = [np.array([2] + [5 + n % 4] * (length - 2) + [3], np.int32) for n, length in enumerate(lengths)]
    features = Features({"input_word_ids": ids, "input_type_ids": [np.zeros_like(i) for i in ids]},
                        {"label_ids": np.zeros(len(ids), np.int32)}, np.arange(len(ids)))
    counter = _CallCounter(model)
    trainer = FineTuningTrainer(counter, classification_loss, per_token, TrainingConfig(str(tmp_path)),
                                tf.distribute.get_strategy())
    outputs = trainer.predict(features, batch_size=32)
    for row, got in zip(ids, outputs):
        alone = {"input_word_ids": row[None], "input_mask": np.ones_like(row)[None], "input_type_ids": np.zeros_like(row)[None]}
        np.testing.assert_allclose(got, np.asarray(model(alone, training=False))[0], atol=1e-5)
    by_length = sorted(lengths)
    cut = [-(-max(by_length[start : start + 8]) // 8) * 8 for start in (0, 8, 16)]
    assert int(counter.calls.numpy()) == 3
    assert int(counter.positions.numpy()) == 8 * cut[0] + 8 * cut[1] + 3 * cut[2]


@pytest.mark.parametrize("padding", ["fixed", "dynamic"])
def test_prediction_through_xla_gives_the_models_answers(tmp_path, padding):
    """`predict_jit_compile` (load_task_model's jit_compile) on both branches of the prediction
    step: fixed padding (one call of the whole batch at max_seq_length) and by length. The
    traced step holds an XLA function, and each row's outputs are the model's on it alone."""
    from tests.conftest import xla_functions

    keras.utils.set_random_seed(5)
    config = BertConfig.from_preset("tiny", vocab_size=10, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = ClassificationHead().build(BertEncoder(config), 3, 0.0)
    ids = [np.array([2] + [5 + n % 4] * (n * 5 % 30) + [3], np.int32) for n in range(11)]
    features = Features({"input_word_ids": ids, "input_type_ids": [np.zeros_like(i) for i in ids]},
                        {"label_ids": np.zeros(len(ids), np.int32)}, np.arange(len(ids)))
    training = TrainingConfig(str(tmp_path), max_seq_length=40, padding=padding, predict_jit_compile=True)
    trainer = FineTuningTrainer(model, classification_loss, False, training, tf.distribute.get_strategy())
    outputs = trainer.predict(features, batch_size=16)
    (step,) = trainer._predict_functions.values()
    assert xla_functions(step.graph.as_graph_def()) > 0
    for row, got in zip(ids, outputs):
        alone = {"input_word_ids": row[None], "input_mask": np.ones_like(row)[None], "input_type_ids": np.zeros_like(row)[None]}
        np.testing.assert_allclose(got, np.asarray(model(alone, training=False))[0], atol=1e-5)
