"""oneDNN against Eigen kernels in TensorFlow, with HF's PyTorch step beside them.

TensorFlow turns its oneDNN kernels on by itself only on CPUs with AVX512-VNNI/BF16 or
AMX; elsewhere (AVX2-only CPUs: AMD EPYC Rome/Milan, older Xeons) it runs Eigen's unless
`TF_ENABLE_ONEDNN_OPTS=1`, which `bert_tf` now sets before TensorFlow loads (a user's
`0` is kept). This measures what that choice is worth, on the MiniLM-L6 shape (6
layers, hidden 384, 12 heads, erf GELU; random weights: speed does not depend on them):

- a fine-tuning step of a span head (SQuAD's) at batch 32 x 256, dropout 0.1, BERT's
  AdamW with clipping: ours with `TF_ENABLE_ONEDNN_OPTS=0` and `=1` (each in its own
  process: TensorFlow reads the variable when it loads), and HF
  `BertForQuestionAnswering` with torch's AdamW;
- our encoder's inference forward at batch 32 x 64 (bench/inference.py's shape).

Processes alternate (0, 1, 0, 1, ...) so that a noisy neighbour loads both alike; inside
a process the step and the forward alternate too. A figure is the median over processes
of each process's median.

    python bench/onednn.py [--rounds 2] [--steps 3]

Prints a table and writes bench/results/onednn.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # torch's idle threads spin otherwise (bench/finetune.py)

from bench.common import child_result, cpu, interleaved_times, print_table, write_json  # noqa: E402

TRAIN_BATCH, TRAIN_SEQ = 32, 256
MINILM = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)


# === One TensorFlow process ===
def our_train_step():
    """A compiled fine-tuning step of our encoder + dense(2) on one fixed batch."""
    import keras
    import numpy as np
    import tensorflow as tf

    from bert_tf import BertConfig, BertEncoder
    from bert_tf.optimization import create_optimizer

    encoder = BertEncoder(BertConfig(**MINILM, hidden_act="gelu_exact"))
    head = keras.layers.Dense(2)
    ids = np.random.default_rng(0).integers(1000, 30000, size=(TRAIN_BATCH, TRAIN_SEQ)).astype("int32")
    inputs = {"input_word_ids": tf.constant(ids), "input_mask": tf.ones_like(ids), "input_type_ids": tf.zeros_like(ids)}
    positions = tf.constant(np.arange(TRAIN_BATCH) % TRAIN_SEQ, tf.int32)
    head(encoder(inputs)["sequence_output"])
    variables = encoder.trainable_variables + head.trainable_variables
    optimizer = create_optimizer("adamw", 1e-4, num_train_steps=1000, num_warmup_steps=100)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            logits = head(encoder(inputs, training=True)["sequence_output"])
            loss = sum(tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(positions, logits[..., i],
                                                                                      from_logits=True))
                       for i in range(2))  # fmt: skip
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    return lambda: step().numpy()


def child(steps: int) -> None:
    from bench.bf16_profile import encoder_forwards
    from tensorflow.python.util import _pywrap_util_port

    steps_by_name = {"train": our_train_step(), "forward": encoder_forwards(("float32",))["float32"]}
    times = interleaved_times(steps_by_name, steps, warmup=1)  # the warm-up call traces
    print("RESULT " + json.dumps({"onednn": _pywrap_util_port.IsMklEnabled(), **times}), flush=True)


def in_child(onednn: str, steps: int) -> dict:
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn)
    return child_result([sys.executable, __file__, "--child", "--steps", str(steps)], env)


# === HF ===
def hf_train_times(steps: int) -> dict[str, float]:
    import torch
    import transformers

    from bench.common import torch_adamw

    torch.set_num_threads(os.cpu_count() or 1)
    config = transformers.BertConfig(**MINILM, hidden_act="gelu", max_position_embeddings=512)
    model = transformers.BertForQuestionAnswering(config).train()
    optimizer = torch_adamw(model, 1e-4)
    ids = torch.randint(1000, 30000, (TRAIN_BATCH, TRAIN_SEQ))
    positions = torch.arange(TRAIN_BATCH) % TRAIN_SEQ

    def step():
        loss = model(input_ids=ids, start_positions=positions, end_positions=positions).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()

    return interleaved_times({"train": step}, steps, warmup=1)["train"]


# === Main ===
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="Processes of each setting, alternated.")
    parser.add_argument("--steps", type=int, default=3, help="Timed training steps (and forwards) a process.")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.steps)
    runs: dict[str, list[dict]] = {"0": [], "1": []}
    hf: list[dict[str, float]] = []
    for _ in range(args.rounds):
        for setting in runs:
            runs[setting].append(in_child(setting, args.steps))
            print(f"TF_ENABLE_ONEDNN_OPTS={setting}: {json.dumps(runs[setting][-1])}", flush=True)
        hf.append(hf_train_times(args.steps))
    rows = [_row(f"ours, TF_ENABLE_ONEDNN_OPTS={s}", [run["train"] for run in results],
                 [run["forward"] for run in results], all(run["onednn"] for run in results))
            for s, results in runs.items()]  # fmt: skip
    rows.append(_row("HF transformers (PyTorch)", hf, [], None))
    eigen, onednn = rows[0]["train_step_s"], rows[1]["train_step_s"]
    print_table(rows, ["side", "onednn_kernels", "train_step_s", "train_rows_per_s", "forward_ms"])
    print(f"\noneDNN over Eigen: training {eigen / onednn:.2f}x, forward "
          f"{rows[0]['forward_ms'] / rows[1]['forward_ms']:.2f}x; ours (oneDNN) over HF: "
          f"{rows[2]['train_step_s'] / onednn:.2f}x a training step")
    payload = {"command": "python " + " ".join(sys.argv), "cpu": cpu(), "rows": rows, "runs": runs, "hf_train_s": hf}
    print(f"wrote {write_json('onednn', payload).relative_to(REPO_ROOT)}")


def _row(side: str, train: list[dict], forward: list[dict], onednn: bool | None) -> dict:
    """Medians over processes of each process's median seconds."""
    step = statistics.median(times["median"] for times in train)
    forward_ms = 1000 * statistics.median(times["median"] for times in forward) if forward else None
    return {"side": side, "onednn_kernels": onednn, "train_step_s": step, "train_rows_per_s": TRAIN_BATCH / step,
            "forward_ms": forward_ms}


if __name__ == "__main__":
    main()
