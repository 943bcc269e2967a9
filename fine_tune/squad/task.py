"""SQuAD as a task of the fine-tuning core (the task of `run_squad.py`).

The task plugs the SQuAD reader, window featuriser, span head and loss, official
metrics and prediction files into `fine_tune.cli` / `fine_tune.trainer`: training,
strategies, mixed precision, checkpoints and TensorBoard are the core's. Splits:
`--train_file` (train), `--predict_file` (predict: writes predictions.json,
nbest_predictions.json and, for SQuAD 2.0, null_odds.json, and scores them when the
file has answers) and, with `--do_eval`, `--dev_file` (default: the predict file),
scored after every epoch to keep the best checkpoint. File paths are relative to
`--data_dir` if given. `--task=drcd` is the same on Chinese files (DRCD, CMRC 2018),
scored with CMRC 2018's character-level metric.

Example:
>>> task = squad_task(SquadConfig(predict_file="dev-v1.1.json"), RunConfig("/tmp/squad", 384, do_predict=True))
>>> task.reader.files["test"], task.featuriser.doc_stride, task.featuriser.max_query_length
('dev-v1.1.json', 128, 64)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any, ClassVar

from bert_tf.errors import BertTfError, DataError
from bert_tf.flags import Flag
from fine_tune.config import RunConfig, TaskConfig, own, shared, task_field
from fine_tune.registry import register
from fine_tune.squad.evaluate import evaluate_chinese, evaluate_v1, evaluate_v2
from fine_tune.squad.features import SpanFeaturiser, check_lengths
from fine_tune.squad.head import SpanHead, span_loss
from fine_tune.squad.postprocess import PostprocessConfig, SpanPrediction, write_predictions
from fine_tune.squad.reader import SquadExample, read_squad, trainable
from fine_tune.task import EvalSet, Task

FAMILY = "squad"
# Per split: the config field of its file, the flags users know (file, switch).
SPLIT_FILES = {
    "train": ("train_file", "--train_file", "do_train"),
    "dev": ("dev_file", "--dev_file or --predict_file", "do_eval"),
    "test": ("predict_file", "--predict_file", "do_predict"),
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
    original README feeds null_odds.json to the official script. `chinese`: CMRC 2018's
    character-level `exact_match` and `f1` instead of v1.1's (`evaluate_chinese`).
    """

    primary = "f1"

    def __init__(self, version_2_with_negative: bool, chinese: bool = False):
        self.version_2_with_negative = version_2_with_negative
        self.chinese = chinese

    def __call__(self, examples: Sequence[SquadExample], predictions: Sequence[SpanPrediction]) -> dict[str, float]:
        dataset = gold_dataset(examples)
        texts = {prediction.qas_id: prediction.text for prediction in predictions}
        if self.chinese:
            return evaluate_chinese(dataset, texts)
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


@dataclasses.dataclass
class SquadConfig(TaskConfig):
    """SQuAD v1.1 / v2.0 (or SQuAD-format) JSON files and the original run_squad.py's settings."""

    family: ClassVar[str] = "squad"
    evaluation_fields: ClassVar[tuple[str, ...]] = (*TaskConfig.evaluation_fields, "n_best_size", "max_answer_length",
                                                    "null_score_diff_threshold", "verbose_logging")
    task: str | None = task_field("squad")
    train_file: str | None = shared("train_file")
    dev_file: str | None = shared("dev_file")
    predict_file: str | None = own(Flag(str, None, "SQuAD JSON to predict (and score, if it has answers)."))
    doc_stride: int = own(Flag(int, 128, "Tokens between the starts of two windows of a long context."))
    max_query_length: int = own(Flag(int, 64, "Questions are cut to this many WordPieces."))
    n_best_size: int = own(Flag(int, 20, "Candidates kept per question (nbest_predictions.json)."))
    max_answer_length: int = own(Flag(int, 30, "Longest answer, in WordPieces."))
    version_2_with_negative: bool = own(Flag(bool, False, "SQuAD 2.0: questions may have no answer."))
    null_score_diff_threshold: float = own(Flag(float, 0.0, "SQuAD 2.0: predict no answer when null score - best "
                                                "span score is above this."))  # fmt: skip
    verbose_logging: bool = own(Flag(bool, False, "Report every answer text that cannot be mapped back exactly."))


@register("squad", "SQuAD v1.1 / v2.0 JSON files, or any SQuAD-format data (Chinese: --task=drcd)", SquadConfig)
def squad_task(config: SquadConfig, run: RunConfig) -> Task:
    """The SQuAD task of `config`; raises a `BertTfError` for inconsistent settings."""
    _check(config, run)
    version_2 = config.version_2_with_negative
    files = {split: getattr(config, field) for split, (field, _, _) in SPLIT_FILES.items()}
    files["dev"] = files["dev"] or files["test"]
    postprocess = PostprocessConfig(
        n_best_size=config.n_best_size,
        max_answer_length=config.max_answer_length,
        do_lower_case=run.do_lower_case,
        version_2_with_negative=version_2,
        null_score_diff_threshold=config.null_score_diff_threshold,
        verbose_logging=config.verbose_logging,
    )
    return Task(
        name="squad",
        reader=SquadReader(files, version_2),
        featuriser=SpanFeaturiser(config.doc_stride, config.max_query_length),
        head=SpanHead(postprocess),
        loss=span_loss,
        metrics=SquadMetrics(version_2),
        writer=SquadWriter(version_2),
        description="SQuAD span extraction",
    )


@register(
    "drcd",
    "Chinese SQuAD-format files (DRCD, CMRC 2018), scored with CMRC 2018's character-level EM/F1",
    SquadConfig,
    aliases=("cmrc2018", "cmrc"),
)
def chinese_squad_task(config: SquadConfig, run: RunConfig) -> Task:
    """`squad_task` with CMRC 2018's metric: v1.1's normalisation splits answers at spaces,
    which Chinese has none of, so a whole answer would be one token."""
    if config.version_2_with_negative:
        raise BertTfError(f"--task={config.task} scores answerable questions only; drop --version_2_with_negative "
                          "or use --task=squad.")
    task = squad_task(config, run)
    return dataclasses.replace(task, name="drcd", metrics=SquadMetrics(False, chinese=True),
                               description="Chinese span extraction (CMRC 2018 metric)")


def _check(config: SquadConfig, run: RunConfig) -> None:
    check_lengths(run.max_seq_length, config.max_query_length, config.doc_stride)
    for flag in ("n_best_size", "max_answer_length"):
        if getattr(config, flag) < 1:
            raise BertTfError(f"--{flag} must be positive, got {getattr(config, flag)}.")
    for split, (field, flag, switch) in SPLIT_FILES.items():
        given = getattr(config, field) or (split == "dev" and config.predict_file)
        if getattr(run, switch) and not given:
            raise BertTfError(f"--{switch} needs {flag}.")
