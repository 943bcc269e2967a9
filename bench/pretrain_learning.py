"""Learning proof: BERT-tiny pre-trained from scratch on WikiText-2 learns MLM and NSP.

The whole pipeline, as a user runs it, on the shared WikiText-2 validation split:

1. `python -m data_prep.prepare_corpus --preset=wikitext`: one sentence a line, one
   article a document;
2. every 10th article is held out; `create_pretraining_data.py` (uncased Google vocab,
   seq 128, 20 predictions) writes the training data (dupe_factor 10) and the held-out
   data (dupe_factor 5, another seed);
3. BERT-tiny (2 layers, hidden 128, 2 heads, vocab 30522) trains from scratch with
   `bert_tf.training`: AdamW with Adam's bias correction (`--adam_bias_correction`),
   6000 steps of 16 sequences, learning rate 1e-3 (10% warm-up, linear decay), no
   dropout; evaluated on the held-out data every `--eval_every` steps.

Why these settings. With the original update (no bias correction, `--no-adam_bias_correction`)
the first ~1000 steps are up to ~3x larger than the learning rate says, and BERT-tiny
sat on plateaus: at lr 2e-3 held-out MLM accuracy was 0.14 at step 2000 and 0.16 at
step 6000 (3.05x unigram; NSP at chance even on training data until step ~2000). With
the correction at lr 1e-3: 0.21 at step 2000 and 0.36 at step 6000 (6.8x). Dropout
slows the way off the first plateau (measured: still on it at step 600 with 0.1), and a
few thousand steps are far too few to overfit, so it is off.

Baselines, on the same held-out data: the unigram MLM baseline (always predict the
masked token most frequent in the training data) and the NSP majority class.
Targets (issue 4): held-out MLM accuracy >= 2x the unigram baseline, NSP >= 65%. NSP is
reported twice: on the first records of the training file (what the original's
`--do_eval` measures, and what BERT's reported NSP accuracy is) and on the held-out
articles, which 54 training articles are too few to generalise to.
About 20 minutes on 2 CPU cores (0.15 s a step). Writes bench/results/pretrain_learning.json.

    python bench/pretrain_learning.py [--num_train_steps 6000] [--work_dir DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import subprocess
import sys
import tempfile
import time

# The repository first: this folder's data_prep.py (a benchmark) would shadow the package.
REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from bench.common import data_dir, print_table, write_json  # noqa: E402

SEQ, PREDICTIONS = 128, 20
HELD_OUT_EVERY = 10  # every 10th article is held out


# === Data ===
def run_tool(*args: str) -> None:
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    subprocess.run([sys.executable, *args], check=True, env=environment, cwd=REPO_ROOT, stdout=subprocess.DEVNULL)


def split_documents(corpus: pathlib.Path, train: pathlib.Path, held_out: pathlib.Path) -> tuple[int, int]:
    """Every `HELD_OUT_EVERY`-th document (blank-line separated) goes to `held_out`."""
    documents = [d for d in corpus.read_text(encoding="utf-8").split("\n\n") if d.strip()]
    kept = [d.strip("\n") for i, d in enumerate(documents) if i % HELD_OUT_EVERY]
    held = [d.strip("\n") for i, d in enumerate(documents) if not i % HELD_OUT_EVERY]
    train.write_text("\n\n".join(kept) + "\n", encoding="utf-8")
    held_out.write_text("\n\n".join(held) + "\n", encoding="utf-8")
    return len(kept), len(held)


def prepare(work: pathlib.Path, vocab: pathlib.Path) -> dict[str, object]:
    """Corpus -> train / held-out TFRecords, with the project's own tools."""
    source = data_dir() / "pretrain" / "wikitext2_valid.tokens.txt"
    corpus = work / "corpus.txt"
    run_tool("-m", "data_prep.prepare_corpus", f"--input_file={source}", f"--output_file={corpus}", "--preset=wikitext")
    documents = split_documents(corpus, work / "train.txt", work / "held_out.txt")
    for name, dupe_factor, seed in (("train", 10, 12345), ("held_out", 5, 54321)):
        run_tool(
            "create_pretraining_data.py", f"--input_file={work / name}.txt", f"--output_file={work / name}.tfrecord",
            f"--vocab_file={vocab}", "--do_lower_case", f"--max_seq_length={SEQ}",
            f"--max_predictions_per_seq={PREDICTIONS}", f"--dupe_factor={dupe_factor}", f"--random_seed={seed}",
            "--noprogress", "--overwrite",
        )  # fmt: skip
    return {"train_documents": documents[0], "held_out_documents": documents[1]}


def read_labels(path: pathlib.Path) -> tuple[list[int], list[int]]:
    """The real masked-token ids and the next-sentence labels of every record."""
    from bert_tf.data.reader import pretraining_dataset

    masked, nsp = [], []
    for batch in pretraining_dataset(str(path), 256, SEQ, PREDICTIONS, is_training=False):
        ids, weights = batch["masked_lm_ids"].numpy(), batch["masked_lm_weights"].numpy()
        masked.extend(ids[weights > 0].tolist())
        nsp.extend(batch["next_sentence_labels"].numpy().ravel().tolist())
    return masked, nsp


def baselines(work: pathlib.Path, vocab: pathlib.Path) -> dict[str, object]:
    train_masked, _ = read_labels(work / "train.tfrecord")
    held_masked, held_nsp = read_labels(work / "held_out.tfrecord")
    top_id, _ = collections.Counter(train_masked).most_common(1)[0]
    tokens = vocab.read_text(encoding="utf-8").splitlines()
    not_next = sum(held_nsp) / len(held_nsp)
    return {
        "unigram_token": tokens[top_id],
        "unigram_mlm_accuracy": sum(t == top_id for t in held_masked) / len(held_masked),
        "nsp_majority_accuracy": max(not_next, 1 - not_next),
        "held_out_instances": len(held_nsp),
        "held_out_masked_tokens": len(held_masked),
    }


# === Training ===
def train(work: pathlib.Path, args) -> list[dict]:
    """Trains BERT-tiny; every `--eval_every` steps, evaluates on the held-out data and
    on as many records of the training data."""
    from bert_tf import BertConfig
    from bert_tf.training import PretrainingOptions, PretrainingRun
    from bert_tf.training.inputs import count_full_batches

    options = PretrainingOptions(
        bert_config=BertConfig.from_preset(
            "tiny", hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout
        ),
        input_file=str(work / "train.tfrecord"),
        eval_input_file=str(work / "held_out.tfrecord"),
        output_dir=str(work / f"run-{int(time.time())}"),
        max_seq_length=SEQ,
        max_predictions_per_seq=PREDICTIONS,
        do_train=True,
        do_eval=True,
        train_batch_size=args.batch_size,
        eval_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        adam_bias_correction=args.adam_bias_correction,
        num_train_steps=args.num_train_steps,
        num_warmup_steps=args.num_train_steps // 10,
        save_checkpoints_steps=args.num_train_steps,
        iterations_per_loop=args.eval_every,
        max_eval_steps=1000,  # all of the held-out data
    )
    session = PretrainingRun(options, log=lambda line: print(line, flush=True))
    session.restore()
    held_out_batches = count_full_batches(session.eval_files, args.batch_size, options.max_eval_steps)
    curve, start = [], time.perf_counter()
    for step in range(0, args.num_train_steps + 1, args.eval_every):
        session.train(until=step)
        elapsed = time.perf_counter() - start
        held_out = session.evaluate()
        # The original's --do_eval reads the training file: as many of its first records.
        seen = session.evaluate(session.files, max_steps=held_out_batches, report=False)
        curve.append({"step": step, "minutes": elapsed / 60, "held_out": held_out, "training_data": seen})
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_train_steps", type=int, default=6000)
    parser.add_argument("--eval_every", type=int, default=500)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    # A few thousand steps are far too few to overfit, and dropout slows the way out of
    # the early "always predict 'the'" plateau a lot (measured: still there at step 600
    # with 0.1, left by step 200 without).
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument(
        "--adam_bias_correction",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Adam's bias correction (run_pretraining.py --adam_bias_correction); the original has none.",
    )
    parser.add_argument("--work_dir", default=None, help="Where the data and checkpoints go (default: a temp dir).")
    args = parser.parse_args()
    vocab = data_dir() / "vocab" / "google_uncased_en_vocab.txt"
    work = pathlib.Path(args.work_dir or tempfile.mkdtemp(prefix="pretrain_learning-"))
    work.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    data = prepare(work, vocab)
    base = baselines(work, vocab)
    curve = train(work, args)
    final = curve[-1]
    unigram = base["unigram_mlm_accuracy"]
    summary = {
        "held_out_mlm_accuracy": final["held_out"]["masked_lm_accuracy"],
        "mlm_vs_unigram": final["held_out"]["masked_lm_accuracy"] / unigram,
        "held_out_nsp_accuracy": final["held_out"]["next_sentence_accuracy"],
        "training_data_nsp_accuracy": final["training_data"]["next_sentence_accuracy"],
        "mlm_target_met": final["held_out"]["masked_lm_accuracy"] >= 2 * unigram,
        "total_minutes": (time.perf_counter() - started) / 60,
    }
    rows = [
        {
            "step": point["step"],
            "minutes": point["minutes"],
            "held_out_mlm_acc": point["held_out"]["masked_lm_accuracy"],
            "x_unigram": point["held_out"]["masked_lm_accuracy"] / unigram,
            "held_out_mlm_loss": point["held_out"]["masked_lm_loss"],
            "held_out_nsp_acc": point["held_out"]["next_sentence_accuracy"],
            "train_data_mlm_acc": point["training_data"]["masked_lm_accuracy"],
            "train_data_nsp_acc": point["training_data"]["next_sentence_accuracy"],
        }
        for point in curve
    ]
    print(
        f"BERT-tiny from scratch, WikiText-2 valid ({data['train_documents']} train / {data['held_out_documents']} "
        f"held-out articles), batch {args.batch_size}, lr {args.learning_rate}, dropout {args.dropout}, seq {SEQ}"
    )
    print(
        f"baselines on the held-out data: unigram MLM (always {base['unigram_token']!r}) {unigram:.4f}, "
        f"NSP majority class {base['nsp_majority_accuracy']:.4f}"
    )
    print_table(rows, list(rows[0]))
    print(
        f"held-out MLM accuracy {summary['held_out_mlm_accuracy']:.4f} = {summary['mlm_vs_unigram']:.2f}x unigram "
        f"(target >= 2x: {'met' if summary['mlm_target_met'] else 'NOT met'}); NSP accuracy "
        f"{summary['training_data_nsp_accuracy']:.4f} on the training data (the original's --do_eval), "
        f"{summary['held_out_nsp_accuracy']:.4f} on the held-out articles (target >= 0.65); "
        f"{summary['total_minutes']:.1f} minutes in all"
    )
    args_record = {k: v for k, v in vars(args).items() if k != "work_dir"}
    path = write_json("pretrain_learning", {"args": args_record, "data": data, "baselines": base, "curve": rows,
                                            "summary": summary})  # fmt: skip
    print("wrote", path)


if __name__ == "__main__":
    main()
