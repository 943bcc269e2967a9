"""Shared test helpers: where the shared data lives, and skips when it or an oracle is absent."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def data_dir() -> pathlib.Path:
    """`BERT_TF_DATA`, or `../shared/data` next to the checkout."""
    return pathlib.Path(os.environ.get("BERT_TF_DATA", REPO_ROOT.parent / "shared" / "data"))


def shared_file(relative: str) -> pathlib.Path:
    """A file of the shared data, or a skip naming what is missing."""
    path = data_dir() / relative
    if not path.exists():
        pytest.skip(f"shared data file {path} is absent (set BERT_TF_DATA to the shared data folder)")
    return path


def require_module(name: str, why: str) -> None:
    """Skips the test when an optional reference package is not installed."""
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed: {why} (pip install -r requirements-dev.txt)")


@pytest.fixture
def shared_data() -> pathlib.Path:
    path = data_dir()
    if not path.is_dir():
        pytest.skip(f"shared data folder {path} is absent (set BERT_TF_DATA)")
    return path
