"""Pre-training step throughput: our `PretrainingTrainer` vs Model Garden's `BertPretrainerV2` + AdamW.

One run, same CPU, same config (`small` preset: 4 layers, hidden 512, vocab 30522),
seq 128, 20 predictions, batch 32: examples/s of a whole optimiser step (forward with
dropout, MLM + NSP losses, backward, global-norm clipping, AdamW update) for

- ours: `bert_tf.training.PretrainingTrainer` under `OneDeviceStrategy`, XLA off and on, and with
  gradient accumulation (4 micro-batches of 8 = the same batch of 32);
- Model Garden: `BertPretrainerV2` (its `BertEncoder`, `MaskedLM` head, a
  `ClassificationHead` for NSP) with `official.nlp.optimization.create_optimizer`
  (its AdamWeightDecay, clipping 1.0), the step in a `tf.function`, XLA off and on.

Both run `--steps_per_call` steps per host call from an in-memory batch, timed
round-robin (see bench/common.py), the best call of each compared. Writes bench/results/pretrain.json.

    python bench/pretrain.py [--rounds 5] [--steps_per_call 2] [--preset small]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

# The repository first: run as `python bench/pretrain.py`, this folder would come first
# and its data_prep.py (the data benchmark) would shadow the data_prep package.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench.common import interleaved_times, model_garden_encoder, print_table, write_json  # noqa: E402
from bert_tf import BertConfig, BertEncoder, BertPretrainer  # noqa: E402
from bert_tf.optimization import create_optimizer  # noqa: E402
from bert_tf.training import PretrainingTrainer, StepOptions  # noqa: E402
from bert_tf.training.inputs import BatchPlan  # noqa: E402

BATCH, SEQ, PREDICTIONS = 32, 128, 20
LEARNING_RATE, TRAIN_STEPS, WARMUP_STEPS = 1e-4, 100_000, 10_000


def batch_arrays(vocab: int) -> dict[str, np.ndarray]:
    """A realistic batch: random ids, 20 sorted masked positions, half NotNext."""
    rng = np.random.default_rng(0)
    positions = np.sort(np.stack([rng.choice(np.arange(1, SEQ - 1), PREDICTIONS, replace=False) for _ in range(BATCH)]))
    return {
        "input_word_ids": rng.integers(1000, vocab, (BATCH, SEQ)).astype("int32"),
        "input_mask": np.ones((BATCH, SEQ), "int32"),
        "input_type_ids": (np.arange(SEQ)[None] >= SEQ // 2).repeat(BATCH, 0).astype("int32"),
        "masked_lm_positions": positions.astype("int32"),
        "masked_lm_ids": rng.integers(1000, vocab, (BATCH, PREDICTIONS)).astype("int32"),
        "masked_lm_weights": np.ones((BATCH, PREDICTIONS), "float32"),
        "next_sentence_labels": rng.integers(0, 2, (BATCH, 1)).astype("int32"),
    }


def endless(batch: dict[str, np.ndarray]):
    return iter(tf.data.Dataset.from_tensors(batch).repeat())


def ours(config: BertConfig, batch, steps: int, jit: bool, accumulation: int = 1):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = BertPretrainer(BertEncoder(config), PREDICTIONS)
        optimizer = create_optimizer("adamw", LEARNING_RATE, TRAIN_STEPS, WARMUP_STEPS)
        plan = BatchPlan(BATCH, accumulation_steps=accumulation)
        trainer = PretrainingTrainer(strategy, model, optimizer, StepOptions(plan, jit_compile=jit))
    iterator = endless(batch)
    state = {"step": 0}

    def call():
        trainer.train(iterator, state["step"], steps)
        state["step"] += steps

    return call


def model_garden(config: BertConfig, batch, steps: int, jit: bool):
    import tf_keras
    from official.nlp import optimization
    from official.nlp.modeling import layers, models

    init = tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range)
    gelu = lambda x: tf_keras.activations.gelu(x, approximate=True)  # noqa: E731 - the original's GELU
    encoder = model_garden_encoder(config)
    nsp = layers.ClassificationHead(
        inner_dim=config.hidden_size, num_classes=2, dropout_rate=config.hidden_dropout_prob,
        initializer=init, name="next_sentence",
    )  # fmt: skip
    model = models.BertPretrainerV2(encoder, mlm_activation=gelu, mlm_initializer=init, classification_heads=[nsp])
    optimizer = optimization.create_optimizer(LEARNING_RATE, TRAIN_STEPS, WARMUP_STEPS, optimizer_type="adamw")
    names = ("input_word_ids", "input_mask", "input_type_ids", "masked_lm_positions")

    @tf.function(jit_compile=jit)
    def step(features):
        with tf.GradientTape() as tape:
            outputs = model({name: features[name] for name in names}, training=True)
            weights = features["masked_lm_weights"]
            mlm = tf_keras.losses.sparse_categorical_crossentropy(
                features["masked_lm_ids"], tf.cast(outputs["mlm_logits"], tf.float32), from_logits=True
            )
            mlm_loss = tf.reduce_sum(mlm * weights) / (tf.reduce_sum(weights) + 1e-5)
            nsp_loss = tf.reduce_mean(
                tf_keras.losses.sparse_categorical_crossentropy(
                    features["next_sentence_labels"], tf.cast(outputs["next_sentence"], tf.float32), from_logits=True
                )
            )
            loss = mlm_loss + nsp_loss
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    @tf.function
    def loop(iterator, count):
        for _ in tf.range(count):
            step(next(iterator))

    iterator = endless(batch)
    return lambda: loop(iterator, tf.constant(steps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps_per_call", type=int, default=2)
    args = parser.parse_args()

    keras.utils.set_random_seed(0)
    config = BertConfig.from_preset(args.preset)
    batch = batch_arrays(config.vocab_size)
    k = args.steps_per_call
    contenders = {
        "ours": ours(config, batch, k, jit=False),
        "model_garden": model_garden(config, batch, k, jit=False),
        "ours_accum_4x8": ours(config, batch, k, jit=False, accumulation=4),
        "ours_xla": ours(config, batch, k, jit=True),
        "model_garden_xla": model_garden(config, batch, k, jit=True),
        "ours_accum_4x8_xla": ours(config, batch, k, jit=True, accumulation=4),
    }
    times = interleaved_times(contenders, rounds=args.rounds, warmup=1)
    seconds = {name: t["min"] for name, t in times.items()}  # the least disturbed call of each
    rows = []
    for name, secs in seconds.items():
        xla = name.endswith("_xla")
        row = {
            "contender": name,
            "xla": xla,
            "min_s_per_step": secs / k,
            "median_s_per_step": times[name]["median"] / k,
            "examples_per_s": BATCH * k / secs,
            "vs_model_garden_same_xla": seconds["model_garden_xla" if xla else "model_garden"] / secs,
            "vs_model_garden_no_xla": seconds["model_garden"] / secs,
        }
        if "accum" in name:
            row["accumulation_cost"] = secs / seconds["ours_xla" if xla else "ours"] - 1.0
        rows.append(row)
    columns = ["contender", "xla", "min_s_per_step", "median_s_per_step", "examples_per_s", "vs_model_garden_same_xla",
               "vs_model_garden_no_xla", "accumulation_cost"]  # fmt: skip
    print(f"preset {args.preset}, batch {BATCH}, seq {SEQ}, {PREDICTIONS} predictions, "
          f"{k} steps per call, best of {args.rounds} interleaved rounds")  # fmt: skip
    print_table(rows, columns)
    path = write_json(
        "pretrain",
        {"preset": args.preset, "batch": BATCH, "seq": SEQ, "predictions": PREDICTIONS, "steps_per_call": k,
         "rounds": args.rounds, "rows": rows},
    )  # fmt: skip
    print("wrote", path)


if __name__ == "__main__":
    main()
