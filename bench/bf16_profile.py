"""Where bfloat16 inference time goes on this CPU: why ours is ~1.5x its fp32, not 2x.

Issue 15 asks bf16 inference at >= 2x our fp32 throughput. The answer depends on the
CPU (AMX runs bf16 matmuls at ~2.5x fp32; AVX512-BF16 alone at ~1.9x) and on how much of
a forward pass is not matmul. This measures, in one run, on the MiniLM-L6 shape that
bench/inference.py serves (6 layers, hidden 384, 12 heads, erf GELU; random weights: the
speed does not depend on them), batch 32 of 64 tokens:

- the bare matmul [4096, 384] x [384, 1536]: TensorFlow and PyTorch, fp32 and bf16 (GFLOP/s);
- our encoder forward (`tf.function`, as the predictor runs it), float32 against
  `mixed_bfloat16`, with 1 and 2 intra-op threads (each in its own process: TensorFlow
  fixes its thread pools at start-up), timed round-robin;
- the TensorFlow profiler's self time by op type for both precisions (summed over both
  threads): matmuls against the element-wise rest (GELU, LayerNorm, softmax, casts,
  bias adds, transposes), which bf16 does not speed up;
- the feed-forward block (dense to the intermediate width, bias, erf GELU) written four
  ways, with the oneDNN implementation each one's matmul runs on (`ONEDNN_VERBOSE`):
  ours as the encoder builds it (Keras `Dense`, GELU in float32 inside bf16), pure Keras
  ops all in bf16, `tf.nn.bias_add` + `tf.nn.gelu` (the pattern TensorFlow's remapper
  fuses into one oneDNN op with a GELU post-op) and the bare matmul (the AMX floor).

    python bench/bf16_profile.py [--rounds 10]

Prints the tables and writes bench/results/bf16_profile.json.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from bench.common import child_result, cpu, interleaved_times, print_table, write_json  # noqa: E402

BATCH, SEQ = 32, 64
MATMUL = (4096, 384, 1536)  # [tokens, hidden] x [hidden, intermediate]
POLICIES = ("float32", "mixed_bfloat16")
MATMUL_OPS = {"_MklMatMul", "_MklFusedMatMul", "_MklBatchMatMulV2", "_MklFusedBatchMatMulV2", "MatMul",
              "BatchMatMulV2"}  # fmt: skip


# === One process: the encoder's forward at a thread count ===
def encoder_forwards(policies: tuple[str, ...] = POLICIES):
    """{policy: forward()} of the MiniLM-shaped encoder, each traced and warmed up."""
    import numpy as np
    import tensorflow as tf

    from bert_tf import BertConfig, BertEncoder

    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                        intermediate_size=1536, hidden_act="gelu_exact")  # fmt: skip
    ids = np.random.default_rng(0).integers(1000, 30000, size=(BATCH, SEQ)).astype("int32")
    inputs = {"input_word_ids": tf.constant(ids), "input_mask": tf.ones_like(ids), "input_type_ids": tf.zeros_like(ids)}
    forwards = {}
    for policy in policies:
        encoder = BertEncoder(config, dtype=policy)
        function = tf.function(lambda x, encoder=encoder: encoder(x, training=False)["sequence_output"])
        forwards[policy] = lambda function=function: function(inputs).numpy()
        for _ in range(3):
            forwards[policy]()
    return forwards


def op_self_times(forward, calls: int) -> dict[str, float]:
    """Milliseconds of self time a call, by op type, from the TensorFlow profiler."""
    import tensorflow as tf
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as profiler

    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        for _ in range(calls):
            forward()
        tf.profiler.experimental.stop()
        paths = glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)
        data, _ = profiler.xspace_to_tools_data(paths, "framework_op_stats", {})
    table = json.loads(data)[0]
    columns = [column["id"] for column in table["cols"]]
    times: collections.Counter = collections.Counter()
    for row in table["rows"]:
        values = dict(zip(columns, (cell.get("v") for cell in row["c"])))
        if values["host_or_device"] == "Host" and values["type"] != "IDLE":
            times[values["type"]] += values["total_self_time"] / 1000 / calls
    return dict(times)


def child(threads: int, rounds: int, profile: bool) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    forwards = encoder_forwards()
    result = {"times": interleaved_times(forwards, rounds)}
    if profile:
        result["ops"] = {policy: op_self_times(forward, 5) for policy, forward in forwards.items()}
    print("RESULT " + json.dumps(result), flush=True)


def in_child(threads: int, rounds: int, profile: bool) -> dict:
    argv = [sys.executable, __file__, "--child_threads", str(threads), "--rounds", str(rounds)]
    return child_result(argv + (["--profile"] if profile else []))


# === The feed-forward block ===
PRODUCT_PRIMITIVES = ("matmul", "inner_product", "gemm_api")
FFN_VARIANTS = ("ours_float32", "ours_bf16", "keras_ops_bf16", "bias_add_gelu_bf16", "matmul_only_bf16")


def ffn_steps(names: tuple[str, ...]) -> dict:
    """{variant: step()} of [BATCH, SEQ, 384] -> dense 1536 -> bias -> erf GELU, traced and warmed up."""
    import keras
    import numpy as np
    import tensorflow as tf

    from bert_tf.layers import exact_gelu

    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((BATCH, SEQ, MATMUL[1])).astype("float32")
    kernel = (rng.standard_normal(MATMUL[1:]) * 0.05).astype("float32")
    bias = rng.standard_normal(MATMUL[2]).astype("float32")
    x32, x16 = tf.constant(hidden), tf.constant(hidden, tf.bfloat16)
    flat16 = tf.reshape(x16, (-1, MATMUL[1]))
    w16, b16 = tf.Variable(kernel, dtype=tf.bfloat16), tf.Variable(bias, dtype=tf.bfloat16)

    def dense(policy: str) -> keras.layers.Dense:
        layer = keras.layers.Dense(MATMUL[2], activation=exact_gelu, dtype=policy)
        layer.build(hidden.shape)
        layer.set_weights([kernel, bias])
        return layer

    ours32, ours16 = dense("float32"), dense("mixed_bfloat16")
    variants = {
        "ours_float32": lambda: ours32(x32),
        "ours_bf16": lambda: ours16(x32),
        "keras_ops_bf16": lambda: keras.ops.gelu(keras.ops.matmul(flat16, w16) + b16, approximate=False),
        "bias_add_gelu_bf16": lambda: tf.nn.gelu(tf.nn.bias_add(tf.matmul(flat16, w16), b16), approximate=False),
        "matmul_only_bf16": lambda: tf.matmul(flat16, w16),
    }
    steps = {}
    for name in names:
        function = tf.function(variants[name])
        steps[name] = lambda function=function: function().numpy()
        for _ in range(3):
            steps[name]()
    return steps


def ffn_child(rounds: int, variant: str | None) -> None:
    """Times every variant, round-robin; or, given one, just runs it (for ONEDNN_VERBOSE)."""
    if variant:
        ffn_steps((variant,))
        return
    times = interleaved_times(ffn_steps(FFN_VARIANTS), rounds)
    print("RESULT " + json.dumps({name: time["min"] for name, time in times.items()}), flush=True)


def matmul_implementations(verbose: str) -> str:
    """The oneDNN primitives that ran the products, e.g. "inner_product x64:gemm:jit +eltwise_gelu_erf"."""
    found = set()
    for line in verbose.splitlines():
        fields = line.split(",")
        if line.startswith("onednn_verbose") and ",primitive,exec," in line and fields[5] in PRODUCT_PRIMITIVES:
            post_ops = [field.split(":")[1].split(",")[0] for field in line.split()
                        if field.startswith("attr-post-ops:")]
            found.add(" ".join(part for part in (fields[5], fields[6], *("+" + op for op in post_ops)) if part))
    return "; ".join(sorted(found))


def feed_forward(rounds: int) -> list[dict]:
    argv = [sys.executable, __file__, "--rounds", str(rounds), "--ffn_child"]
    times = child_result(argv + ["all"])
    verbose_env = {**os.environ, "ONEDNN_VERBOSE": "1"}
    verbose = {name: subprocess.run(argv + [name], capture_output=True, text=True, check=True, env=verbose_env).stdout
               for name in FFN_VARIANTS}
    return [{"variant": name, "ms": times[name] * 1000, "x_ours_float32": times["ours_float32"] / times[name],
             "onednn_matmul": matmul_implementations(verbose[name])} for name in FFN_VARIANTS]  # fmt: skip


# === Matmuls ===
def matmul_rates(rounds: int) -> list[dict]:
    import numpy as np
    import tensorflow as tf
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    m, k, n = MATMUL
    rng = np.random.default_rng(0)
    a, b = rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)
    steps = {}
    for name, tf_dtype, torch_dtype in (("fp32", tf.float32, torch.float32), ("bf16", tf.bfloat16, torch.bfloat16)):
        tf_a, tf_b = tf.constant(a, tf_dtype), tf.constant(b, tf_dtype)
        product = tf.function(lambda tf_a=tf_a, tf_b=tf_b: tf.matmul(tf_a, tf_b))
        steps[f"tensorflow {name}"] = lambda product=product: product().numpy()
        torch_a, torch_b = torch.from_numpy(a).to(torch_dtype), torch.from_numpy(b).to(torch_dtype)
        steps[f"torch {name}"] = lambda x=torch_a, y=torch_b: x @ y
    times = interleaved_times(steps, rounds)
    return [{"matmul": name, "gflop_per_s": 2 * m * k * n / time["min"] / 1e9} for name, time in times.items()]


# === Report ===
def breakdown(ops: dict[str, dict[str, float]]) -> list[dict]:
    rows = []
    for policy, times in ops.items():
        matmul = sum(value for op, value in times.items() if op in MATMUL_OPS)
        rest = sum(times.values()) - matmul
        top = sorted(((v, op) for op, v in times.items() if op not in MATMUL_OPS), reverse=True)[:5]
        rows.append({"policy": policy, "matmul_ms": matmul, "other_ms": rest, "other_share": rest / (matmul + rest),
                     "largest_other": ", ".join(f"{op} {value:.0f}" for value, op in top)})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--child_threads", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ffn_child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_threads:
        return child(args.child_threads, args.rounds, args.profile)
    if args.ffn_child:
        return ffn_child(args.rounds, None if args.ffn_child == "all" else args.ffn_child)

    start = time.perf_counter()
    matmuls = matmul_rates(args.rounds)
    runs = {threads: in_child(threads, args.rounds, profile=threads == 2) for threads in (1, 2)}
    forwards = [
        {"threads": threads, "float32_ms": run["times"]["float32"]["min"] * 1000,
         "bf16_ms": run["times"]["mixed_bfloat16"]["min"] * 1000,
         "bf16_speedup": run["times"]["float32"]["min"] / run["times"]["mixed_bfloat16"]["min"]}
        for threads, run in runs.items()
    ]  # fmt: skip
    ops = breakdown(runs[2]["ops"])
    ffn = feed_forward(args.rounds)
    print(f"bare matmul {MATMUL[0]}x{MATMUL[1]} @ {MATMUL[1]}x{MATMUL[2]}, best of {args.rounds}:")
    print_table(matmuls, ["matmul", "gflop_per_s"])
    print(f"\nencoder forward (MiniLM-L6 shape, batch {BATCH} x {SEQ} tokens), best of {args.rounds} round-robin:")
    print_table(forwards, ["threads", "float32_ms", "bf16_ms", "bf16_speedup"])
    print("\nself time a forward by op type (TensorFlow profiler, ms summed over 2 threads):")
    print_table(ops, ["policy", "matmul_ms", "other_ms", "other_share", "largest_other"])
    print(f"\nfeed-forward block [{BATCH * SEQ}, {MATMUL[1]}] -> {MATMUL[2]} + bias + erf GELU, best of {args.rounds}:")
    print_table(ffn, ["variant", "ms", "x_ours_float32", "onednn_matmul"])
    path = write_json("bf16_profile", {"cpu": cpu(), "batch": BATCH, "seq": SEQ, "matmuls": matmuls,
                                       "forwards": forwards, "op_breakdown": ops, "ops": runs[2]["ops"],
                                       "feed_forward": ffn,
                                       "seconds": time.perf_counter() - start})  # fmt: skip
    print("wrote", path)


if __name__ == "__main__":
    main()
