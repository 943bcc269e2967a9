"""Forward+backward throughput of our BertEncoder vs Model Garden's vs HF BertModel.

One run, side by side, interleaved (see bench/common.py): for each preset, sequences/s
of a training step's compute (forward with dropout, loss, gradients of every weight)
for ours and Model Garden's `BertEncoder` (TF, XLA off and on) and HuggingFace
`BertModel` (PyTorch, CPU). Same batch, seq 128, vocab 30522.

    python bench/encoder.py [--presets small,base] [--rounds 6]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf

from bench.common import interleaved_times, model_garden_encoder, print_table, write_json
from bert_tf import BertConfig, BertEncoder

BATCH = {"tiny": 32, "mini": 32, "small": 16, "medium": 8, "base": 8, "large": 4}
SEQ = 128


def batch_arrays(batch: int, vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "input_word_ids": rng.integers(1, vocab, (batch, SEQ)).astype("int32"),
        "input_mask": np.ones((batch, SEQ), "int32"),
        "input_type_ids": (np.arange(SEQ)[None] >= SEQ // 2).repeat(batch, 0).astype("int32"),
    }


def tf_step(model, variables, inputs, jit: bool):
    """A tf.function of forward (training mode) + loss + gradients."""

    @tf.function(jit_compile=jit)
    def step(batch):
        with tf.GradientTape() as tape:
            out = model(batch, training=True)
            loss = tf.reduce_mean(tf.square(tf.cast(out["sequence_output"], tf.float32)))
        return tape.gradient(loss, variables)

    tensors = {k: tf.constant(v) for k, v in inputs.items()}
    return lambda: [g.numpy() if hasattr(g, "numpy") else g for g in step(tensors)[:1]]


def ours(config: BertConfig, inputs, jit: bool):
    encoder = BertEncoder(config)
    return tf_step(encoder, encoder.trainable_variables, inputs, jit)


def model_garden(config: BertConfig, inputs, jit: bool):
    encoder = model_garden_encoder(config)
    return tf_step(encoder, encoder.trainable_variables, inputs, jit)


def huggingface(config: BertConfig, inputs):
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count() or 1)
    model = transformers.BertModel(transformers.BertConfig(**config.to_hf_dict()), add_pooling_layer=True)
    model.train()
    batch = {
        "input_ids": torch.tensor(inputs["input_word_ids"], dtype=torch.long),
        "attention_mask": torch.tensor(inputs["input_mask"], dtype=torch.long),
        "token_type_ids": torch.tensor(inputs["input_type_ids"], dtype=torch.long),
    }

    def step():
        model.zero_grad(set_to_none=True)
        out = model(**batch).last_hidden_state
        out.square().mean().backward()

    return step


def run_preset(name: str, rounds: int, with_hf: bool) -> list[dict]:
    config = BertConfig.from_preset(name)
    batch = BATCH[name]
    inputs = batch_arrays(batch, config.vocab_size)
    steps = {
        "ours": ours(config, inputs, jit=False),
        "ours_xla": ours(config, inputs, jit=True),
        "model_garden": model_garden(config, inputs, jit=False),
        "model_garden_xla": model_garden(config, inputs, jit=True),
    }
    if with_hf:
        steps["hf_torch"] = huggingface(config, inputs)
    times = interleaved_times(steps, rounds=rounds)
    rows = []
    for contender, secs in times.items():
        baseline = times["model_garden_xla" if contender.endswith("_xla") else "model_garden"]
        rows.append({
            "preset": name,
            "contender": contender,
            "batch": batch,
            "seq": SEQ,
            "min_s_per_step": secs["min"],
            "median_s_per_step": secs["median"],
            "sequences_per_s": batch / secs["min"],
            "vs_model_garden_same_xla": baseline["min"] / secs["min"],
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="small,base")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--no_hf", action="store_true", help="skip HuggingFace/PyTorch")
    args = parser.parse_args()
    rows = [row for preset in args.presets.split(",") for row in run_preset(preset, args.rounds, not args.no_hf)]
    print_table(rows, ["preset", "contender", "batch", "seq", "min_s_per_step", "median_s_per_step", "sequences_per_s", "vs_model_garden_same_xla"])
    print("wrote", write_json("encoder", {"rounds": args.rounds, "rows": rows}))


if __name__ == "__main__":
    main()
