"""Tasks by name: `register` a factory with its config class, `build_task` builds it.

Each entry point serves one family ("classifier" for run_classifier.py, "ner" for
run_ner.py, "squad" for run_squad.py); a name is looked up case-insensitively, with
aliases (e.g. "sst2" for "sst-2"). A factory takes the task's typed config (a
`fine_tune.config.TaskConfig`) and the `RunConfig`; a run directory records both
(`fine_tune.json`), so `task_from_run_dir` rebuilds the task without any command line.

Example:
>>> from fine_tune.glue import GlueConfig
>>> build_task(GlueConfig("MRPC", "glue_data/MRPC")).name
'mrpc'
>>> lookup("nope", "classifier")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
bert_tf.errors.BertTfError: Unknown --task 'nope'; valid tasks: ax, chnsenticorp, cola, mnli, ..., xnli.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
from collections.abc import Callable
from typing import Any

from bert_tf.errors import BertTfError
from fine_tune.config import RunConfig, TaskConfig, from_dict

# The modules whose import registers the built-in tasks.
BUILTIN_TASK_MODULES = ("fine_tune.glue", "fine_tune.chinese_classifiers", "fine_tune.tagging", "fine_tune.cluener",
                        "fine_tune.squad.task")
RUN_FILE = "fine_tune.json"


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    family: str
    description: str
    config: type[TaskConfig]
    factory: Callable[[Any, RunConfig], Any]
    evaluates: tuple[str, ...] = ()  # other tasks whose fine-tuned models it evaluates (AX: MNLI's)


_ENTRIES: dict[str, Entry] = {}
_ALIASES: dict[str, str] = {}


def register(
    name: str,
    description: str,
    config: type[TaskConfig],
    aliases: tuple[str, ...] = (),
    evaluates: tuple[str, ...] = (),
) -> Callable:
    """Decorator: registers `factory(config, run) -> Task` under `name` (and `aliases`),
    in the family of its config class; `evaluates` names the tasks whose fine-tuned
    models it may evaluate besides its own."""

    def decorate(factory: Callable[[Any, RunConfig], Any]) -> Callable[[Any, RunConfig], Any]:
        _ENTRIES[name] = Entry(name, config.family, description, config, factory, evaluates)
        for alias in (name, *aliases):
            _ALIASES[alias.lower()] = name
        return factory

    return decorate


def _load_builtins() -> None:
    for module in BUILTIN_TASK_MODULES:
        importlib.import_module(module)


def entries(family: str) -> list[Entry]:
    """The tasks of a family, sorted by name."""
    _load_builtins()
    return sorted((e for e in _ENTRIES.values() if e.family == family), key=lambda e: e.name)


def config_classes(family: str) -> list[type[TaskConfig]]:
    """The config classes of a family's tasks, each once (their fields are the family's task flags)."""
    return list(dict.fromkeys(entry.config for entry in entries(family)))


def lookup(name: str | None, family: str) -> Entry:
    """The entry of task `name` in `family`; a `BertTfError` lists the valid names."""
    valid = entries(family)
    entry = _ENTRIES.get(_ALIASES.get((name or "").lower(), ""))
    if name is None:
        raise BertTfError(f"--task_name is required; valid tasks: {', '.join(e.name for e in valid)}.")
    if entry is None or entry.family != family:
        raise BertTfError(f"Unknown --task {name!r}; valid tasks: {', '.join(e.name for e in valid)}.")
    return entry


def build_task(config: TaskConfig, run: RunConfig | None = None) -> Any:
    """The `Task` that `config` describes (`run`: the run it serves; default: a bare one)."""
    entry = lookup(config.task, config.family)
    if not isinstance(config, entry.config):
        raise BertTfError(f"--task={entry.name} takes a {entry.config.__name__}, not a {type(config).__name__}.")
    return entry.factory(config, run or RunConfig(output_dir=""))


# === Run directories ===
def run_record(config: TaskConfig, run: RunConfig, labels: tuple[str, ...]) -> dict[str, Any]:
    """What `fine_tune.json` holds: the task and run configs, and the labels learnt."""
    return {
        "family": config.family,
        "task": lookup(config.task, config.family).name,
        "labels": list(labels),
        "do_lower_case": run.do_lower_case,
        "max_seq_length": run.max_seq_length,
        "task_config": dataclasses.asdict(config),
        "training": dataclasses.asdict(run),
    }


def read_run_record(output_dir: str) -> dict[str, Any]:
    path = os.path.join(output_dir, RUN_FILE)
    if not os.path.isfile(path):
        raise BertTfError(f"No fine-tuned model in {output_dir} ({RUN_FILE} is missing); run --do_train first.")
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _damaged(path, error) from None
    if not isinstance(record, dict) or not isinstance(record.get("training", {}), dict):
        raise _damaged(path, TypeError("not a JSON object with a 'training' object"))
    return record


def _damaged(path: str, error: Exception) -> BertTfError:
    return BertTfError(f"{path} is damaged ({type(error).__name__}: {error}); rerun the training that wrote it, or "
                       "remove it.")


def task_from_run_dir(output_dir: str) -> tuple[Any, TaskConfig, RunConfig, dict[str, Any]]:
    """(task, its config, the run's config, the whole `fine_tune.json`) of a fine-tuning run.

    The run config is as trained, except for `output_dir` (the folder given) and the
    phases (all off: the caller says what to run).
    """
    record = read_run_record(output_dir)
    if "task_config" not in record:
        raise BertTfError(f"{os.path.join(output_dir, RUN_FILE)} predates typed configs; run --do_train again.")
    entry = lookup(record["task"], record["family"])
    config = from_dict(entry.config, record["task_config"])
    run = from_dict(RunConfig, {**record["training"], "output_dir": output_dir, "do_train": False,
                                "do_eval": False, "do_predict": False})  # fmt: skip
    return entry.factory(config, run), config, run, record
