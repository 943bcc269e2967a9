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


def from_flags(cls: type, values: Any, **fixed: Any) -> Any:
    """An instance of the config class `cls` from parsed flags (absl `FlagValues`);
    `fixed` gives the fields no flag sets."""
    for field in dataclasses.fields(cls):
        if FLAG in field.metadata and field.name not in fixed:
            fixed[field.name] = values[field.metadata[FLAG][0] or field.name].value
    return cls(**fixed)


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def from_dict(cls: type, data: Mapping[str, Any]) -> Any:
    """The config of a saved `to_dict`; keys the class no longer has are ignored."""
    names = {field.name for field in dataclasses.fields(cls)}
    return cls(**{key: value for key, value in data.items() if key in names})


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
    task: str | None = own(TASK_FLAG, name="task_name")
    data_dir: str | None = own(Flag(str, None, "The folder of the task's files; without it, the file flags stand "
                                    "alone."))  # fmt: skip


@dataclasses.dataclass
class RunConfig(TrainingConfig):
    """The run besides the task: which BERT, which phases, the strategy, and the
    hyper-parameters of `TrainingConfig`; its fields are the flags of the same names
    (`seed` is `--random_seed`), with their defaults."""

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
