"""Tasks by name: `register` a factory, `get_task` builds it from the parsed flags.

Each entry point serves one family ("classifier" for run_classifier.py, "ner" for
run_ner.py, "squad" for a span task); a name is looked up case-insensitively, with
aliases (e.g. "sst2" for "sst-2").

Example:
>>> get_task("MRPC", "classifier", None).name
'mrpc'
>>> get_task("nope", "classifier", None)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
bert_tf.errors.BertTfError: Unknown --task 'nope'; valid tasks: ax, cola, mnli, mrpc, qnli, ..., xnli.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from bert_tf.errors import BertTfError

# The modules whose import registers the built-in tasks.
BUILTIN_TASK_MODULES = ("fine_tune.glue", "fine_tune.tagging", "fine_tune.cluener", "fine_tune.squad.task")


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    family: str
    description: str
    factory: Callable[[Any], Any]


_ENTRIES: dict[str, Entry] = {}
_ALIASES: dict[str, str] = {}


def register(name: str, family: str, description: str, aliases: tuple[str, ...] = ()) -> Callable:
    """Decorator: registers `factory(args) -> Task` under `name` (and `aliases`)."""

    def decorate(factory: Callable[[Any], Any]) -> Callable[[Any], Any]:
        _ENTRIES[name] = Entry(name, family, description, factory)
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


def get_task(name: str | None, family: str, args: Any) -> Any:
    """The task `name` of `family`, built from the flags `args`; a `BertTfError` lists the valid names."""
    valid = entries(family)
    entry = _ENTRIES.get(_ALIASES.get((name or "").lower(), ""))
    if entry is None or entry.family != family:
        raise BertTfError(f"Unknown --task {name!r}; valid tasks: {', '.join(e.name for e in valid)}.")
    return entry.factory(args)
