"""The whole BERT pipeline end to end on a tiny corpus this script writes itself.

    python quickstart.py [--output_dir quickstart_out] [--pretrain_steps 400]

Stages, each the real entry point a user would run on their own corpus:
1. write a synthetic corpus (examples/toy_corpus.py) and a sentiment task;
2. `python -m data_prep.build_vocab`: a WordPiece vocabulary;
3. `python create_pretraining_data.py`: masked-LM / next-sentence TFRecords;
4. `python run_pretraining.py`: BERT-tiny pre-training, with TensorBoard logs;
5. `python run_classifier.py --task=tsv`: fine-tuning on the sentiment task, dev accuracy.

About five minutes on 2 CPU cores. Re-running resumes: finished stages are skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from examples import toy_corpus

HERE = os.path.dirname(os.path.abspath(__file__))


def run(stage: str, args: list[str], done_marker: str) -> None:
    """Runs one entry point unless its output already exists; stops the pipeline on failure."""
    if os.path.exists(done_marker):
        print(f"[{stage}] already done ({done_marker}), skipping", flush=True)
        return
    print(f"[{stage}] {' '.join(args)}", flush=True)
    start = time.time()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=HERE)
    result = subprocess.run([sys.executable, *args], cwd=HERE, env=env)
    if result.returncode:
        sys.exit(f"quickstart: stage '{stage}' failed (exit code {result.returncode}); see the message above.")
    print(f"[{stage}] done in {time.time() - start:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="quickstart_out")
    parser.add_argument("--pretrain_steps", type=int, default=400)
    args = parser.parse_args()
    out = os.path.abspath(args.output_dir)
    os.makedirs(out, exist_ok=True)
    corpus, vocab = f"{out}/corpus.txt", f"{out}/vocab.txt"
    records, pretrain_dir, task_dir, finetune_dir = f"{out}/pretrain.tfrecord", f"{out}/pretrain", f"{out}/task", f"{out}/finetune"

    if not os.path.exists(corpus):
        toy_corpus.write_corpus(corpus)
        os.makedirs(task_dir, exist_ok=True)
        toy_corpus.write_sentiment_task(task_dir)
    print(f"[corpus] {corpus} and {task_dir}/{{train,dev}}.tsv", flush=True)
    run("vocab", ["-m", "data_prep.build_vocab", f"--input_file={corpus}", f"--output_file={vocab}", "--vocab_size=400"], vocab)
    run(
        "pre-training data",
        [
            "create_pretraining_data.py",
            f"--input_file={corpus}",
            f"--output_file={records}",
            f"--vocab_file={vocab}",
            "--max_seq_length=64",
            "--max_predictions_per_seq=10",
            "--dupe_factor=5",
        ],
        records,
    )
    run(
        "pre-training",
        [
            "run_pretraining.py",
            "--do_train",
            "--do_eval",
            "--preset=tiny",
            "--vocab_size=400",
            f"--input_file={records}",
            f"--output_dir={pretrain_dir}",
            "--max_seq_length=64",
            "--max_predictions_per_seq=10",
            "--train_batch_size=32",
            # The original optimiser (no Adam bias correction) makes its first ~1000
            # updates up to ~3x larger than the learning rate: at 1e-3 BERT-tiny
            # collapses here (every position the same vector, masked-LM accuracy stuck
            # at the most frequent token's); 3e-4 learns (--adam_bias_correction also would).
            "--learning_rate=3e-4",
            f"--num_train_steps={args.pretrain_steps}",
            f"--num_warmup_steps={args.pretrain_steps // 10}",
            "--save_checkpoints_steps=100",
            "--iterations_per_loop=50",
            "--max_eval_steps=20",
        ],
        f"{pretrain_dir}/eval_results.txt",
    )
    print(f"[pre-training] {open(f'{pretrain_dir}/eval_results.txt').read().strip()}")
    print(f"[pre-training] watch it with: tensorboard --logdir {pretrain_dir}", flush=True)
    run(
        "fine-tuning",
        [
            "run_classifier.py",
            "--task=tsv",
            f"--data_dir={task_dir}",
            f"--init_checkpoint={pretrain_dir}",
            f"--vocab_file={vocab}",
            f"--output_dir={finetune_dir}",
            "--do_train",
            "--do_eval",
            "--max_seq_length=64",
            "--train_batch_size=32",
            "--learning_rate=1e-4",
            "--num_train_epochs=5",
        ],
        f"{finetune_dir}/eval_results.txt",
    )
    print(f"[fine-tuning] dev results: {open(f'{finetune_dir}/eval_results.txt').read().strip()}")


if __name__ == "__main__":
    main()
