"""Why `--jit_compile` is slower than plain TensorFlow on a CPU: the pre-training step's
matrix products, TensorFlow's kernels (oneDNN) vs XLA's, side by side.

The products of one training step of a config (`small`: batch 32, seq 128, 20
predictions; all but the pooler's, next-sentence head's and masked-LM transform's, under
1% of the FLOPs together) are each timed alone in a `tf.function`, once without and once with
`jit_compile=True`, round-robin (see bench/common.py). The forms are the ones autodiff
produces: NN for forward, NT (x @ w^T) for input gradients, TN (x^T @ dy) for weight
gradients; attention's are batched over batch x heads. The table gives each product's
best time both ways and its count in a step; the totals say how much of the XLA step's
extra time its products explain (XLA's fused element-wise ops, faster than TF's, pay
some of it back).

    python bench/xla_matmuls.py [--preset small] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

from bench.common import interleaved_times, print_table, write_json  # noqa: E402
from bench.pretrain import BATCH, PREDICTIONS, SEQ  # noqa: E402 - the step this benchmark explains
from bert_tf import BertConfig  # noqa: E402


def products(config: BertConfig) -> list[tuple[str, str, tuple, tuple, int]]:
    """(name, form, lhs shape, rhs shape, count per step): each product of a step.

    Shapes are as the operands are stored; the form says which one is used transposed.
    """
    tokens, hidden, inner = BATCH * SEQ, config.hidden_size, config.intermediate_size
    heads, layers = config.num_attention_heads, config.num_hidden_layers
    per_head = (BATCH, heads, SEQ, hidden // heads)
    scores = (BATCH, heads, SEQ, SEQ)
    masked, vocab = BATCH * PREDICTIONS, config.vocab_size
    return [
        ("q/k/v/out dense", "NN", (tokens, hidden), (hidden, hidden), 4 * layers),
        ("q/k/v/out dense dx", "NT", (tokens, hidden), (hidden, hidden), 4 * layers),
        ("q/k/v/out dense dw", "TN", (tokens, hidden), (tokens, hidden), 4 * layers),
        ("intermediate dense", "NN", (tokens, hidden), (hidden, inner), layers),
        ("intermediate dense dx", "NT", (tokens, inner), (hidden, inner), layers),
        ("intermediate dense dw", "TN", (tokens, hidden), (tokens, inner), layers),
        ("output dense", "NN", (tokens, inner), (inner, hidden), layers),
        ("output dense dx", "NT", (tokens, hidden), (inner, hidden), layers),
        ("output dense dw", "TN", (tokens, inner), (tokens, hidden), layers),
        ("attention q @ k^T", "NT", per_head, per_head, layers),
        ("attention p @ v", "NN", scores, per_head, layers),
        ("attention d(p) = dc @ v^T", "NT", per_head, per_head, layers),
        ("attention d(v) = p^T @ dc", "TN", scores, per_head, layers),
        ("attention d(q) = ds @ k", "NN", scores, per_head, layers),
        ("attention d(k) = ds^T @ q", "TN", scores, per_head, layers),
        ("masked-LM logits h @ E^T", "NT", (masked, hidden), (vocab, hidden), 1),
        ("masked-LM d(h) = dl @ E", "NN", (masked, vocab), (vocab, hidden), 1),
        ("masked-LM d(E) = dl^T @ h", "TN", (masked, vocab), (masked, hidden), 1),
    ]


def product_fn(form: str, jit: bool):
    @tf.function(jit_compile=jit)
    def product(lhs, rhs):
        return tf.matmul(lhs, rhs, transpose_a=form == "TN", transpose_b=form == "NT")

    return product


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    config = BertConfig.from_preset(args.preset)
    cases = products(config)
    calls = {}
    for name, form, lhs_shape, rhs_shape, _ in cases:
        lhs, rhs = tf.random.normal(lhs_shape), tf.random.normal(rhs_shape)
        for jit in (False, True):
            calls[(name, jit)] = lambda f=product_fn(form, jit), lhs=lhs, rhs=rhs: f(lhs, rhs)
    times = interleaved_times(calls, rounds=args.rounds, warmup=1)
    rows = []
    for name, form, lhs_shape, rhs_shape, count in cases:
        tf_ms, xla_ms = (1e3 * times[(name, jit)]["min"] for jit in (False, True))
        rows.append(
            {"product": name, "form": form, "lhs": "x".join(map(str, lhs_shape)), "rhs": "x".join(map(str, rhs_shape)),
             "count": count, "tf_ms": tf_ms, "xla_ms": xla_ms, "xla_vs_tf": xla_ms / tf_ms,
             "step_extra_ms": count * (xla_ms - tf_ms)}
        )  # fmt: skip
    totals = {
        "tf_ms_per_step": sum(r["count"] * r["tf_ms"] for r in rows),
        "xla_ms_per_step": sum(r["count"] * r["xla_ms"] for r in rows),
    }
    totals["xla_extra_ms_per_step"] = totals["xla_ms_per_step"] - totals["tf_ms_per_step"]
    print(f"preset {args.preset}, batch {BATCH}, seq {SEQ}, {PREDICTIONS} predictions; best of {args.rounds} rounds")
    print_table(rows, ["product", "form", "lhs", "rhs", "count", "tf_ms", "xla_ms", "xla_vs_tf", "step_extra_ms"])
    print(
        f"all products of a step: TensorFlow {totals['tf_ms_per_step']:.0f} ms, XLA {totals['xla_ms_per_step']:.0f} ms "
        f"({totals['xla_extra_ms_per_step']:+.0f} ms)"
    )
    path = write_json("xla_matmuls", {"preset": args.preset, "batch": BATCH, "seq": SEQ, "predictions": PREDICTIONS,
                                      "rounds": args.rounds, "rows": rows, "totals": totals})  # fmt: skip
    print("wrote", path)


if __name__ == "__main__":
    main()
