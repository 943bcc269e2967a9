"""SQuAD as a task of the fine-tuning core, and the command line of `run_squad.py`.

The task plugs the SQuAD reader, window featuriser, span head and loss, official
metrics and prediction files into `fine_tune.cli` / `fine_tune.trainer`: training,
strategies, mixed precision, checkpoints and TensorBoard are the core's. Splits:
`--train_file` (train), `--predict_file` (predict: writes predictions.json,
nbest_predictions.json and, for SQuAD 2.0, null_odds.json, and scores them when the
file has answers) and, with `--do_eval`, `--dev_file` (default: the predict file),
scored after every epoch to keep the best checkpoint. File paths are relative to
`--data_dir` (default: the current folder) unless absolute.

Example:
>>> args = parse_args(["--do_predict", "--predict_file=dev-v1.1.json", "--output_dir=/tmp/squad"])
>>> args.max_seq_length, args.doc_stride, args.max_query_length, args.test_file
(384, 128, 64, 'dev-v1.1.json')
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from bert_tf.errors import BertTfError
from fine_tune import cli
from fine_tune.registry import register
from fine_tune.squad.evaluate import evaluate_v1, evaluate_v2
from fine_tune.squad.features import SpanFeaturiser, check_lengths
from fine_tune.squad.head import SpanHead, span_loss
from fine_tune.squad.postprocess import PostprocessConfig, SpanPrediction, write_predictions
from fine_tune.squad.reader import SquadExample, read_squad, trainable
from fine_tune.task import EvalSet, Task
from fine_tune.tsv import DataError

FAMILY = "squad"
# Per split: the attribute of its file flag, the flags users know (file, switch).
SPLIT_FILES = {
    "train": ("train_file", "--train_file", "do_train"),
    "dev": ("dev_file", "--dev_file or --predict_file", "do_eval"),
    "test": ("test_file", "--predict_file", "do_predict"),
}
SET_NAMES = {"train": "train", "dev": "dev", "test": "predict"}


class SquadReader:
    """Reads the file of each split; SQuAD has no label set (`labels` is empty)."""

    labels: tuple[str, ...] = ()

    def __init__(self, files: dict[str, str | None], version_2_with_negative: bool):
        self.files = files
        self.version_2_with_negative = version_2_with_negative

    def read(self, data_dir: str, split: str) -> list[EvalSet]:
        path = os.path.join(data_dir, self.files[split])
        examples = read_squad(path, self.version_2_with_negative, split)
        if split == "train":
            examples = trainable(examples)
        if not examples:
            raise DataError(f"{path} has no {'usable ' if split == 'train' else ''}questions.")
        return [EvalSet(SET_NAMES[split], examples, path)]

    def labels_in(self, examples: Sequence[SquadExample]) -> tuple[str, ...]:
        return ()


class SquadMetrics:
    """The official scores: v1.1 `exact_match`, `f1`; v2.0 `exact`, `f1`, HasAns/NoAns and best thresholds.

    For SQuAD 2.0 the null score differences are the no-answer probabilities, as the
    original README feeds null_odds.json to the official script.
    """

    primary = "f1"

    def __init__(self, version_2_with_negative: bool):
        self.version_2_with_negative = version_2_with_negative

    def __call__(self, examples: Sequence[SquadExample], predictions: Sequence[SpanPrediction]) -> dict[str, float]:
        dataset = gold_dataset(examples)
        texts = {prediction.qas_id: prediction.text for prediction in predictions}
        if not self.version_2_with_negative:
            return evaluate_v1(dataset, texts)
        return evaluate_v2(dataset, texts, {p.qas_id: p.null_score_diff for p in predictions})


def gold_dataset(examples: Sequence[SquadExample]) -> list[dict[str, Any]]:
    """The examples' questions and gold texts in the layout of a SQuAD `data` list."""
    qas = [{"id": e.qas_id, "answers": [{"text": text} for text in e.label or ()]} for e in examples]
    return [{"paragraphs": [{"qas": qas}]}]


class SquadWriter:
    """predictions.json, nbest_predictions.json (and null_odds.json) of the predict file;
    other sets get their name as a prefix (dev_predictions.json, ...)."""

    def __init__(self, version_2_with_negative: bool):
        self.version_2_with_negative = version_2_with_negative

    def __call__(
        self, output_dir: str, eval_set: EvalSet, predictions: Sequence[SpanPrediction], labels: Sequence[str]
    ) -> list[str]:
        prefix = "" if eval_set.name == SET_NAMES["test"] else f"{eval_set.name}_"
        return write_predictions(output_dir, predictions, self.version_2_with_negative, prefix)


@register("squad", FAMILY, "SQuAD v1.1 / v2.0 JSON files (and SQuAD-format data such as CMRC 2018)")
def squad_task(args: argparse.Namespace) -> Task:
    """The SQuAD task from the flags; raises a `BertTfError` for inconsistent ones."""
    _check_flags(args)
    version_2 = args.version_2_with_negative
    files = {split: getattr(args, attribute) for split, (attribute, _, _) in SPLIT_FILES.items()}
    files["dev"] = files["dev"] or files["test"]
    config = PostprocessConfig(
        n_best_size=args.n_best_size,
        max_answer_length=args.max_answer_length,
        do_lower_case=args.do_lower_case,
        version_2_with_negative=version_2,
        null_score_diff_threshold=args.null_score_diff_threshold,
        verbose_logging=args.verbose_logging,
    )
    return Task(
        name="squad",
        reader=SquadReader(files, version_2),
        featuriser=SpanFeaturiser(args.doc_stride, args.max_query_length),
        head=SpanHead(config),
        loss=span_loss,
        metrics=SquadMetrics(version_2),
        writer=SquadWriter(version_2),
        description="SQuAD span extraction",
    )


def _check_flags(args: argparse.Namespace) -> None:
    check_lengths(args.max_seq_length, args.max_query_length, args.doc_stride)
    for flag in ("n_best_size", "max_answer_length"):
        if getattr(args, flag) < 1:
            raise BertTfError(f"--{flag} must be positive, got {getattr(args, flag)}.")
    for split, (attribute, flag, switch) in SPLIT_FILES.items():
        given = getattr(args, attribute) or (split == "dev" and args.test_file)
        if getattr(args, switch) and not given:
            raise BertTfError(f"--{switch} needs {flag}.")


# === Command line ===
def squad_flags(parser: argparse.ArgumentParser) -> None:
    """The original run_squad.py flags on top of the core's."""
    add = parser.add_argument
    add("--predict_file", dest="test_file", help="SQuAD JSON to predict (and score, if it has answers).")
    add("--doc_stride", type=int, default=128, help="Tokens between the starts of two windows of a long context.")
    add("--max_query_length", type=int, default=64, help="Questions are cut to this many WordPieces.")
    add("--n_best_size", type=int, default=20, help="Candidates kept per question (nbest_predictions.json).")
    add("--max_answer_length", type=int, default=30, help="Longest answer, in WordPieces.")
    cli.add_bool(parser, "version_2_with_negative", False, "SQuAD 2.0: questions may have no answer.")
    add("--null_score_diff_threshold", type=float, default=0.0,
        help="SQuAD 2.0: predict no answer when null score - best span score is above this.")
    cli.add_bool(parser, "verbose_logging", False, "Report every answer text that cannot be mapped back exactly.")
    parser.set_defaults(max_seq_length=384, data_dir=".")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The flags of run_squad.py."""
    return cli.parse_args(FAMILY, argv)


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs run_squad.py in-process; returns the core's report (scores, timings)."""
    return cli.run(parse_args(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of run_squad.py: exit status 0, or 1 with a one-sentence error."""
    return cli.main(FAMILY, argv)
