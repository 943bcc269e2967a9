"""Typed configs of a fine-tuning run: the task's (`TaskConfig` and one subclass per task
family) and the rest of the run's (`RunConfig`).

Each field of a task config is also a flag: `shared("train_file")` takes the flag of
`bert_tf.flags.SHARED`, `own(Flag(...))` declares the field's own. So a task's config
and its flags are declared once, together, and `fine_tune.cli` only maps flags onto
configs; `fine_tune.run(task_config, run_config)` runs without any command line.

Example:
>>> from bert_tf.flags import Flag
>>> @dataclasses.dataclass
... class DemoConfig(TaskConfig):
...     family: ClassVar[str] = "demo"
...     window: int = own(Flag(int, 3, "Words per window."))
...     train_file: str | None = shared("train_file")
>>> [name for name, _ in config_flags(DemoConfig)]
['task_name', 'data_dir', 'window', 'train_file']
>>> to_dict(from_dict(DemoConfig, {"task": "demo", "window": 5, "unknown": 1}))
{'task': 'demo', 'data_dir': None, 'window': 5, 'train_file': None}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from bert_tf.errors import BertTfError
from bert_tf.flags import SHARED, Flag
from fine_tune.trainer import TrainingConfig

FLAG = "flag"  # field metadata: (flag name or None for the field's name, Flag)


def shared(name: str) -> Any:
    """A config field set by the shared flag `--name` (with its default)."""
    return dataclasses.field(default=SHARED[name].default, metadata={FLAG: (name, SHARED[name])})


def own(flag: Flag, name: str | None = None) -> Any:
    """A config field set by its own flag, `--name` (default: the field's name)."""
    return dataclasses.field(default=flag.default, metadata={FLAG: (name, flag)})


def config_flags(cls: type) -> Iterator[tuple[str, Flag]]:
    """(flag name, Flag) of each field of the config class `cls` that a flag sets."""
    for field in dataclasses.fields(cls):
        if FLAG in field.metadata:
            name, flag = field.metadata[FLAG]
            yield name or field.name, flag


def from_flags(cls: type, values: Any, recorded: Mapping[str, Any] | None = None, **fixed: Any) -> Any:
    """An instance of the config class `cls` from parsed flags (absl `FlagValues`);
    `fixed` gives the fields no flag sets. With `recorded` (the config a run was trained
    with), a setting the command line does not give is the recorded one, except where
    the data is (`TaskConfig.data_fields`): an evaluation reads its own files."""
    data_fields = getattr(cls, "data_fields", ())
    for field in dataclasses.fields(cls):
        if FLAG in field.metadata and field.name not in fixed:
            flag = values[field.metadata[FLAG][0] or field.name]
            inherit = recorded is not None and field.name in recorded and field.name not in data_fields
            fixed[field.name] = recorded[field.name] if inherit and not flag.present else flag.value
    return cls(**fixed)


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def from_dict(cls: type, data: Mapping[str, Any]) -> Any:
    """The config of a saved `to_dict`; keys the class no longer has are ignored."""
    names = {field.name for field in dataclasses.fields(cls)}
    return cls(**{key: value for key, value in data.items() if key in names})


_BOOLEANS = {"true": True, "false": False}


def typed_setting(cls: type, name: str, value: Any) -> Any:
    """`value` for the field `name` of the config class `cls`, as the type its flag declares:
    a string from a command line ("64", "false") is read, anything else of the wrong type is
    refused in one sentence (a "False" kept as a string would be taken as true).

    >>> from fine_tune.squad.task import SquadConfig
    >>> typed_setting(SquadConfig, "version_2_with_negative", "False"), typed_setting(SquadConfig, "doc_stride", "64")
    (False, 64)
    >>> typed_setting(SquadConfig, "n_best_size", 2.5)
    Traceback (most recent call last):
    ...
    bert_tf.errors.BertTfError: The setting n_best_size=2.5 must be an integer.
    """
    field = next(field for field in dataclasses.fields(cls) if field.name == name)
    if FLAG not in field.metadata or (value is None and field.default is None):
        return value
    kind = field.metadata[FLAG][1].kind
    text = value.strip() if isinstance(value, str) else None
    if kind is bool:
        if isinstance(value, bool):
            return value
        if text is not None and text.lower() in _BOOLEANS:
            return _BOOLEANS[text.lower()]
        raise BertTfError(f"The setting {name}={value!r} must be true or false.")
    if kind in (int, float):
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else _number(text)
        if number is None or (kind is int and number != int(number)):
            raise BertTfError(f"The setting {name}={value!r} must be {'an integer' if kind is int else 'a number'}.")
        return kind(number)
    if isinstance(kind, tuple) and value not in kind:
        raise BertTfError(f"The setting {name}={value!r} must be one of {', '.join(kind)}.")
    if kind is str and not isinstance(value, str):
        raise BertTfError(f"The setting {name}={value!r} must be a string.")
    return value


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


# === The configs ===
TASK_FLAG = Flag(str, None, "The name of the task (the command's description lists them).", aliases=("task",))


def task_field(default: str) -> Any:
    """The `task` field of a family with a default task (`--task_name` sets it)."""
    return dataclasses.field(default=default, metadata={FLAG: ("task_name", TASK_FLAG)})


@dataclasses.dataclass
class TaskConfig:
    """What every task takes: its name, and the folder of its files (None: the file
    flags stand alone). Subclasses set `family`, the command that serves them."""

    family: ClassVar[str] = ""
    # Where the data is: a run's record does not carry these over to its evaluation.
    data_fields: ClassVar[tuple[str, ...]] = ("data_dir", "train_file", "dev_file", "test_file", "predict_file")
    # Settings that only change evaluation and prediction: a resumed training run may change them.
    evaluation_fields: ClassVar[tuple[str, ...]] = ("dev_file", "test_file", "predict_file")
    task: str | None = own(TASK_FLAG, name="task_name")
    data_dir: str | None = own(Flag(str, None, "The folder of the task's files; without it, the file flags stand "
                                    "alone."))  # fmt: skip


@dataclasses.dataclass
class RunConfig(TrainingConfig):
    """The run besides the task: which BERT, which phases, the strategy, and the
    hyper-parameters of `TrainingConfig`; its fields are the flags of the same names
    (`seed` is `--random_seed`), with their defaults."""

    # The settings that fix what a training run computes: a run resumed from its
    # checkpoint must have the same (see `fine_tune.cli`). Paths are not among them: the
    # model's config and the training rows themselves are compared instead.
    training_fields: ClassVar[tuple[str, ...]] = (
        "max_seq_length", "train_batch_size", "learning_rate", "num_train_epochs", "warmup_proportion", "lr_decay",
        "optimizer", "adam_bias_correction", "weight_decay_rate", "padding", "seed", "mixed_precision",
        "do_lower_case", "max_train_examples",
    )  # fmt: skip
    # The settings an evaluation of a trained run takes from its record unless given.
    recorded_fields: ClassVar[tuple[str, ...]] = ("do_lower_case", "max_seq_length")

    iterations_per_loop: int = SHARED["iterations_per_loop"].default
    keep_checkpoint_max: int = SHARED["keep_checkpoint_max"].default
    do_train: bool = False
    do_eval: bool = False
    do_predict: bool = False
    init_checkpoint: str | None = None
    bert_config_file: str | None = None
    preset: str | None = None
    vocab_file: str | None = None
    hidden_act: str | None = None
    do_lower_case: bool = True
    evaluate_during_training: bool = True
    use_best_checkpoint: bool = True
    max_train_examples: int = 0
    distribution_strategy: str = "one_device"
    tpu_name: str | None = None
    tpu_zone: str | None = None
    gcp_project: str | None = None
    export_dir: str | None = None

    def wants(self, split: str) -> bool:
        """Whether the run reads `split`: train with --do_train, dev with --do_eval, test with --do_predict."""
        return {"train": self.do_train, "dev": self.do_eval, "test": self.do_predict}[split]

    def training_config(self) -> TrainingConfig:
        """The hyper-parameters alone, as the trainer takes them."""
        names = [field.name for field in dataclasses.fields(TrainingConfig)]
        return TrainingConfig(**{name: getattr(self, name) for name in names})


def check_data_dir(config: TaskConfig, run: RunConfig, files: Mapping[str, str | None] | None = None) -> None:
    """Without `--data_dir`, every split the run reads needs its file flag (`files`: the
    split's file given, for tasks that take file flags)."""
    if config.data_dir:
        return
    for split in ("train", "dev", "test"):
        if run.wants(split) and not (files or {}).get(split):
            alternative = f" (or give --{split}_file)" if files is not None else ""
            raise BertTfError(f"--data_dir is required{alternative}: --task={config.task} reads its {split} set "
                              "from it.")
