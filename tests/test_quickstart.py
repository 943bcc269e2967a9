"""The README's main job, end to end: `python quickstart.py` on its own tiny corpus.

Pre-training must leave the trivial solution behind (masked-LM accuracy above the
share of the most frequent masked token, which is what a collapsed model scores) and
fine-tuning from it must solve the toy sentiment task.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys

from tests.conftest import REPO_ROOT


def read_results(path: str) -> dict[str, float]:
    """An eval_results.txt ("key = value" lines) as a dict."""
    with open(path, encoding="utf-8") as handle:
        return {key: float(value) for key, value in (line.split(" = ") for line in handle if " = " in line)}


def majority_baselines(records: str) -> tuple[float, float]:
    """The accuracies of a collapsed model: always the most frequent masked token, and
    always the more frequent next-sentence label."""
    from bert_tf.data.reader import pretraining_dataset

    tokens: collections.Counter = collections.Counter()
    labels: collections.Counter = collections.Counter()
    for batch in pretraining_dataset(records, 64, 64, 10, is_training=False, drop_remainder=False):
        weights = batch["masked_lm_weights"].numpy() > 0
        tokens.update(batch["masked_lm_ids"].numpy()[weights].tolist())
        labels.update(batch["next_sentence_labels"].numpy().ravel().tolist())
    return (
        tokens.most_common(1)[0][1] / sum(tokens.values()),
        labels.most_common(1)[0][1] / sum(labels.values()),
    )


def test_quickstart_pretrains_and_fine_tunes(tmp_path):
    out = tmp_path / "quickstart"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "quickstart.py", f"--output_dir={out}"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"tensorboard --logdir {out}/pretrain" in result.stdout

    pretraining = read_results(str(out / "pretrain" / "eval_results.txt"))
    masked_lm_baseline, next_sentence_baseline = majority_baselines(str(out / "pretrain.tfrecord"))
    assert pretraining["masked_lm_accuracy"] > masked_lm_baseline + 0.03, (pretraining, masked_lm_baseline)
    assert pretraining["next_sentence_accuracy"] > next_sentence_baseline + 0.03, (pretraining, next_sentence_baseline)

    fine_tuning = read_results(str(out / "finetune" / "eval_results.txt"))
    assert fine_tuning["dev_accuracy"] >= 0.9, fine_tuning

    # A second run finds every stage done and redoes nothing.
    again = subprocess.run(
        [sys.executable, "quickstart.py", f"--output_dir={out}"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert again.returncode == 0 and again.stdout.count("already done") == 4, again.stdout
