"""A finished fine-tuning run read back from its output dir: the task, its tokenizer and the Keras task model.

`run_classifier.py`, `run_ner.py` and `run_squad.py` (`fine_tune.cli`) leave in `--output_dir`:

- `bert_config.json` and `vocab.txt`: the encoder and its vocabulary;
- `fine_tune.json`: the task's typed config, the run's config and the labels
  (`fine_tune.registry.run_record`);
- `model.weights.h5` (the end of training) and, when the dev set was scored while
  training, `best/model.weights.h5` (the best dev score; preferred unless the run
  said `--nouse_best_checkpoint`).

`load_run` rebuilds the task exactly as the run script does for `--do_predict`
(`registry.task_from_run_dir`), with any task settings given as overrides (e.g. a
SQuAD 2.0 run's `null_score_diff_threshold`).

Example:
>>> load_run("/nonexistent")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
bert_tf.errors.BertTfError: /nonexistent is not a folder; give the --output_dir of a run_classifier.py, run_ner.py or run_squad.py run.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import keras

from bert_tf.config import BertConfig
from bert_tf.encoder import BertEncoder
from bert_tf.errors import BertTfError
from bert_tf.tokenization import FullTokenizer
from bert_tf.training.runloop import dtype_policy, in_precision
from fine_tune import cli, registry
from fine_tune.config import RunConfig, TaskConfig, typed_setting
from fine_tune.task import Task
from fine_tune.trainer import BEST_DIR, WEIGHTS_NAME, fine_tuned_weights, load_fine_tuned

RUN_SCRIPTS = "run_classifier.py, run_ner.py or run_squad.py"


@dataclasses.dataclass
class LoadedRun:
    """A run's task model, ready to predict.

    Args:
        run_dir: the output dir it came from.
        family: the command it belongs to: "classifier", "ner" or "squad".
        task: the `Task` (featuriser, head, ...) built as the run script builds it.
        task_config: the task's typed config (with the overrides it was loaded with).
        run_config: the run's config as trained (phases off).
        labels: the label names, in the order of the model's outputs (empty: a
            regression or SQuAD model).
        config: the encoder config.
        tokenizer: the run's tokenizer.
        model: the Keras task model with the fine-tuned weights.
        weights: the weights file that was loaded.
        mixed_precision: what the model computes in ("none": float32, "bf16", "fp16").
        jit_compile: whether predictions run the model through XLA (`bert_tf.by_length`).
    """

    run_dir: str
    family: str
    task: Task
    task_config: TaskConfig
    run_config: RunConfig
    labels: tuple[str, ...]
    config: BertConfig
    tokenizer: FullTokenizer
    model: keras.Model
    weights: str
    mixed_precision: str = "none"
    jit_compile: bool = False

    @property
    def max_seq_length(self) -> int:
        return self.run_config.max_seq_length

    @property
    def do_lower_case(self) -> bool:
        return self.run_config.do_lower_case

    @property
    def vocab_file(self) -> str:
        return os.path.join(self.run_dir, cli.VOCAB_FILE)

    @property
    def is_regression(self) -> bool:
        return self.family == "classifier" and not self.labels


def _not_a_run(run_dir: str, what: str) -> BertTfError:
    return BertTfError(f"{run_dir} is not a finished fine-tuning run ({what}); give the --output_dir of a "
                       f"{RUN_SCRIPTS} run that trained (--do_train).")


def _file(run_dir: str, name: str) -> str:
    path = os.path.join(run_dir, name)
    if not os.path.isfile(path):
        raise _not_a_run(run_dir, f"{name} is missing")
    return path


def _task(run_dir: str, settings: dict[str, Any]) -> tuple[Task, TaskConfig, RunConfig, dict[str, Any]]:
    """The run's task, rebuilt with `settings` overriding fields of its typed config."""
    path = _file(run_dir, registry.RUN_FILE)
    try:
        task, task_config, run_config, record = registry.task_from_run_dir(run_dir)
    except BertTfError:
        raise
    except (KeyError, TypeError, ValueError) as error:  # a record of the wrong shape
        raise BertTfError(f"{path} is damaged ({type(error).__name__}: {error}); rerun the training that wrote it.") \
            from None
    if not settings:
        return task, task_config, run_config, record
    fields = {field.name for field in dataclasses.fields(task_config)} - {"task", "data_dir"}
    unknown = sorted(set(settings) - fields)
    if unknown:
        raise BertTfError(f"{unknown[0]!r} is not a setting of {task.name} models; their settings are "
                          f"{', '.join(sorted(fields)) or 'none'}.")
    typed = {name: typed_setting(type(task_config), name, value) for name, value in settings.items()}
    task_config = dataclasses.replace(task_config, **typed)
    return registry.build_task(task_config, run_config), task_config, run_config, record


def settings_of(pairs: Sequence[str]) -> dict[str, str]:
    """`--setting name=value` values (bert-predict, bert-export), as strings: `load_run` reads
    each as its field's type.

    >>> settings_of(["version_2_with_negative=true", "null_score_diff_threshold=-1.5"])
    {'version_2_with_negative': 'true', 'null_score_diff_threshold': '-1.5'}
    """
    settings = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise BertTfError(f"--setting {pair!r} is not NAME=VALUE.")
        settings[name] = value
    return settings


def load_run(
    run_dir: str | os.PathLike, prefer_best: bool | None = None, families: tuple[str, ...] | None = None,
    mixed_precision: str = "none", jit_compile: bool = False, **settings: Any,
) -> LoadedRun:
    """The task model of a finished run, with its fine-tuned weights.

    Args:
        run_dir: the `--output_dir` of a `run_classifier.py`, `run_ner.py` or
            `run_squad.py` run that trained.
        prefer_best: load `best/` when the run kept it; None (the default): as the run's own
            `--use_best_checkpoint` chose for its dev and test predictions.
        families: the task families the caller can use (default: any); a run of
            another one is refused before its weights are read.
        mixed_precision: "bf16" computes the encoder's projections in bfloat16, everything
            else in float32 (`bert_tf.layers.compute_projections_in`: 1.5x float32 on a CPU
            with AVX512-BF16); "fp16" builds the model under the `mixed_float16` policy (for
            GPUs); the default "none" is float32 whatever the run trained in.
        jit_compile: predict through XLA (faster small batches; each new batch shape
            compiles once, ~1 s: `bert_tf.by_length`).
        **settings: fields of the task's config to change, by name (e.g.
            `null_score_diff_threshold=-1.5`).

    Raises `BertTfError` for a folder that is not a finished run (a missing or
    damaged file, weights that do not fit the config).
    """
    run_dir = os.fspath(run_dir)
    policy = dtype_policy(mixed_precision)  # an unknown value fails before anything is read
    if not os.path.isdir(run_dir):
        raise BertTfError(f"{run_dir} is not a folder; give the --output_dir of a {RUN_SCRIPTS} run.")
    task, task_config, run_config, record = _task(run_dir, settings)
    if families is not None and task_config.family not in families:
        raise BertTfError(f"{run_dir} holds a {task_config.family} model (task {task.name}); this needs a model of "
                          f"{' or '.join(families)}.")
    labels = tuple(str(label) for label in record.get("labels", ()))
    config = BertConfig.from_json_file(_file(run_dir, cli.CONFIG_FILE))
    tokenizer = FullTokenizer(_file(run_dir, cli.VOCAB_FILE), do_lower_case=run_config.do_lower_case)
    prefer_best = run_config.use_best_checkpoint if prefer_best is None else prefer_best
    weights = fine_tuned_weights(run_dir, prefer_best=prefer_best)
    if weights is None:
        raise _not_a_run(run_dir, f"neither {WEIGHTS_NAME} nor {BEST_DIR}/{WEIGHTS_NAME} is there")
    encoder = in_precision(BertEncoder(config, dtype=policy), mixed_precision)
    model = task.head.build(encoder, max(len(labels), 1), config.hidden_dropout_prob)
    load_fine_tuned(model, weights, f"{cli.CONFIG_FILE} and {registry.RUN_FILE} beside it",
                    "the run dir's files come from different runs.")
    return LoadedRun(run_dir, task_config.family, task, task_config, run_config, labels, config, tokenizer, model,
                     weights, mixed_precision, jit_compile)
