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

`--precisions` compares instead float32 with bfloat16 (no XLA) for ours
(`--mixed_precision=bf16`), Model Garden (tf_keras' `mixed_bfloat16` policy; its masked-LM
head in float32, the only way it builds) and HF
`transformers` `BertForPreTraining` on PyTorch (its stock forward, which scores the
masked-LM head at every position, and the same modules scoring only the masked
positions, as the original, ours and bench/pretrain_transfer.py do; bf16 by
`torch.autocast("cpu", torch.bfloat16)`), with torch's AdamW, clipping 1.0 and a
warm-up schedule. Writes bench/results/pretrain_precisions.json.

    python bench/pretrain.py [--rounds 5] [--steps_per_call 2] [--preset small]
    python bench/pretrain.py --precisions [--preset tiny]
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
from bert_tf.training.runloop import dtype_policy, in_precision  # noqa: E402

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


def ours(config: BertConfig, batch, steps: int, jit: bool, accumulation: int = 1, mixed_precision: str = "none"):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        encoder = BertEncoder(config, dtype=dtype_policy(mixed_precision))
        model = BertPretrainer(in_precision(encoder, mixed_precision), PREDICTIONS)
        optimizer = create_optimizer("adamw", LEARNING_RATE, TRAIN_STEPS, WARMUP_STEPS)
        plan = BatchPlan(BATCH, accumulation_steps=accumulation)
        trainer = PretrainingTrainer(strategy, model, optimizer, StepOptions(plan, jit_compile=jit))
    iterator = endless(batch)
    state = {"step": 0}

    def call():
        trainer.train(iterator, state["step"], steps)
        state["step"] += steps

    return call


def model_garden(config: BertConfig, batch, steps: int, jit: bool, policy: str = "float32"):
    import tf_keras
    from official.nlp import optimization
    from official.nlp.modeling import layers, models

    tf_keras.mixed_precision.set_global_policy(policy)  # Model Garden's way: a global policy while building
    init = tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range)
    gelu = lambda x: tf_keras.activations.gelu(x, approximate=True)  # noqa: E731 - the original's GELU
    encoder = model_garden_encoder(config)
    nsp = layers.ClassificationHead(
        inner_dim=config.hidden_size, num_classes=2, dropout_rate=config.hidden_dropout_prob,
        initializer=init, name="next_sentence",
    )  # fmt: skip
    # Its MaskedLM fails to build under mixed_bfloat16 ("Incompatible type conversion requested to
    # type 'float32' for AutoCastVariable ... (in MaskedLM, layer 'cls/predictions')"): in bf16 the
    # head runs in float32, as Keras' mixed-precision guide has a model's last layer.
    masked_lm = None if policy == "float32" else layers.MaskedLM(
        embedding_table=encoder.get_embedding_table(), activation=gelu, initializer=init, name="cls/predictions",
        dtype="float32",
    )  # fmt: skip
    model = models.BertPretrainerV2(encoder, mlm_activation=gelu, mlm_initializer=init, classification_heads=[nsp],
                                    customized_masked_lm=masked_lm)
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
    tf_keras.mixed_precision.set_global_policy("float32")
    return lambda: loop(iterator, tf.constant(steps))


def hf(config: BertConfig, batch, steps: int, bf16: bool, masked_only: bool):
    """HF `BertForPreTraining`, one optimiser step a call (see the module docstring)."""
    import contextlib

    import torch
    import transformers

    from bench.common import hf_masked_lm_logits, torch_adamw, torch_schedule, torch_update

    model = transformers.BertForPreTraining(transformers.BertConfig(**config.to_dict()))
    model.train()
    optimizer = torch_adamw(model, LEARNING_RATE)
    schedule = torch_schedule(optimizer, WARMUP_STEPS, TRAIN_STEPS, "from_peak")
    tensors = {name: torch.from_numpy(value).long() for name, value in batch.items() if name != "masked_lm_weights"}
    labels = torch.full(tensors["input_word_ids"].shape, -100).scatter_(
        1, tensors["masked_lm_positions"], tensors["masked_lm_ids"]
    )
    inputs = {"input_ids": tensors["input_word_ids"], "attention_mask": tensors["input_mask"],
              "token_type_ids": tensors["input_type_ids"]}  # fmt: skip
    nsp = tensors["next_sentence_labels"].flatten()

    def loss():
        if not masked_only:
            return model(**inputs, labels=labels, next_sentence_label=nsp).loss
        mlm, next_sentence = hf_masked_lm_logits(model, inputs, tensors["masked_lm_positions"])
        return torch.nn.functional.cross_entropy(
            mlm.flatten(0, 1).float(), tensors["masked_lm_ids"].flatten()
        ) + torch.nn.functional.cross_entropy(next_sentence.float(), nsp)

    def call():
        for _ in range(steps):
            context = torch.autocast("cpu", torch.bfloat16) if bf16 else contextlib.nullcontext()
            with context:
                value = loss()
            torch_update(model, optimizer, schedule, value)

    return call


def precisions(args) -> None:
    """float32 against bfloat16 for ours, Model Garden and HF (see the module docstring)."""
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    config = BertConfig.from_preset(args.preset)
    batch = batch_arrays(config.vocab_size)
    k = args.steps_per_call
    failures = {}
    contenders = {
        "ours_fp32": ours(config, batch, k, jit=False),
        "ours_bf16": ours(config, batch, k, jit=False, mixed_precision="bf16"),
        "model_garden_fp32": model_garden(config, batch, k, jit=False),
        "hf_fp32": hf(config, batch, k, bf16=False, masked_only=False),
        "hf_bf16": hf(config, batch, k, bf16=True, masked_only=False),
        "hf_masked_only_fp32": hf(config, batch, k, bf16=False, masked_only=True),
        "hf_masked_only_bf16": hf(config, batch, k, bf16=True, masked_only=True),
    }
    try:  # its bf16 build has failed before (see model_garden: its MaskedLM runs in float32)
        step = model_garden(config, batch, k, jit=False, policy="mixed_bfloat16")
        step()
        contenders["model_garden_bf16"] = step
    except Exception as error:  # noqa: BLE001 - a peer's failure is a result to report, not a crash
        failures["model_garden_bf16"] = next(
            (line.strip() for line in str(error).splitlines() if "Incompatible" in line), str(error).splitlines()[0]
        )
    times = interleaved_times(contenders, rounds=args.rounds, warmup=1)
    seconds = {name: t["min"] for name, t in times.items()}
    rows = [
        {
            "contender": name,
            "min_s_per_step": secs / k,
            "median_s_per_step": times[name]["median"] / k,
            "examples_per_s": BATCH * k / secs,
            "bf16_speedup": seconds[name.replace("_bf16", "_fp32")] / secs if name.endswith("_bf16") else None,
            "ours_vs_this": secs / seconds["ours_bf16" if name.endswith("_bf16") else "ours_fp32"],
        }
        for name, secs in seconds.items()
        if not name.endswith("_bf16") or name.replace("_bf16", "_fp32") in seconds
    ]
    rows += [{"contender": name, "error": error} for name, error in failures.items()]
    print(f"preset {args.preset}, batch {BATCH}, seq {SEQ}, {PREDICTIONS} predictions, {k} steps per call, "
          f"best of {args.rounds} interleaved rounds; ours_vs_this: this contender's time / ours (same precision)")  # fmt: skip
    print_table(rows, ["contender", "min_s_per_step", "median_s_per_step", "examples_per_s", "bf16_speedup",
                       "ours_vs_this", "error"])  # fmt: skip
    path = write_json("pretrain_precisions", {"preset": args.preset, "batch": BATCH, "seq": SEQ,
                                              "predictions": PREDICTIONS, "steps_per_call": k, "rounds": args.rounds,
                                              "rows": rows})  # fmt: skip
    print("wrote", path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps_per_call", type=int, default=2)
    parser.add_argument("--precisions", action="store_true", help="float32 vs bfloat16: ours, Model Garden, HF.")
    args = parser.parse_args()
    if args.precisions:
        return precisions(args)

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
