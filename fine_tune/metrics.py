"""The metrics of GLUE and CoNLL-2003, in NumPy (no scikit-learn/scipy/seqeval at run time).

Each function is checked against its reference implementation on random inputs in
`tests/test_fine_tune_metrics.py`: `accuracy`, `f1` and `matthews_corrcoef` against
scikit-learn, `pearson` and `spearman` against scipy, `entity_scores` against seqeval's
default (conlleval) mode.

Example:
>>> round(matthews_corrcoef([1, 0, 1, 1], [1, 0, 0, 1]), 4)
0.5774
>>> round(spearman([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0]), 4)
0.8
>>> entity_scores([["B-PER", "I-PER", "O"]], [["B-PER", "I-PER", "O"]])["f1"]
1.0
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np


# === Classification ===
def accuracy(labels: Sequence, predictions: Sequence) -> float:
    """Fraction of predictions equal to the labels."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    return float(np.mean(labels == predictions)) if labels.size else 0.0


def f1(labels: Sequence[int], predictions: Sequence[int], positive: int = 1) -> float:
    """F1 of the `positive` class (GLUE's MRPC/QQP F1); 0 when it is never predicted nor true."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    true_positives = np.sum((predictions == positive) & (labels == positive))
    denominator = np.sum(predictions == positive) + np.sum(labels == positive)
    return float(2 * true_positives / denominator) if denominator else 0.0


def matthews_corrcoef(labels: Sequence[int], predictions: Sequence[int]) -> float:
    """Matthews correlation coefficient (CoLA's metric), multi-class form as scikit-learn.

    Computed from the confusion matrix C: (c·s − Σ p_k t_k) / sqrt((s² − Σ p_k²)(s² − Σ t_k²)),
    with c the correct count, s the sample count, p and t the predicted and true class
    counts; 0 when a denominator term is 0 (e.g. a constant predictor).
    """
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    classes, encoded = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
    true, pred = encoded[: labels.size], encoded[labels.size :]
    confusion = np.zeros((classes.size, classes.size), dtype=np.float64)
    np.add.at(confusion, (true, pred), 1.0)
    true_counts, pred_counts = confusion.sum(axis=1), confusion.sum(axis=0)
    correct, samples = np.trace(confusion), confusion.sum()
    covariance = correct * samples - pred_counts @ true_counts
    variance_pred = samples**2 - pred_counts @ pred_counts
    variance_true = samples**2 - true_counts @ true_counts
    if variance_pred == 0 or variance_true == 0:
        return 0.0
    return float(covariance / np.sqrt(variance_pred * variance_true))


# === Regression ===
def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation (STS-B); 0 when either side is constant."""
    x = np.asarray(x, dtype=np.float64) - np.mean(x)
    y = np.asarray(y, dtype=np.float64) - np.mean(y)
    denominator = np.sqrt((x @ x) * (y @ y))
    return float(x @ y / denominator) if denominator else 0.0


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks, ties sharing the mean of their ranks (scipy's `rankdata` 'average').

    >>> average_ranks([10.0, 20.0, 10.0]).tolist()
    [1.5, 3.0, 1.5]
    """
    values = np.asarray(values)
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    # Each run of equal values gets the mean of the 1-based positions it spans.
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    ends = np.r_[starts[1:], values.size]
    run_ranks = (starts + ends + 1) / 2.0
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.repeat(run_ranks, ends - starts)
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation (STS-B): Pearson of the average ranks."""
    return pearson(average_ranks(x), average_ranks(y))


# === Entity level (conlleval) ===
class Chunk(NamedTuple):
    type: str
    start: int
    end: int  # exclusive


def _split_tag(tag: str) -> tuple[str, str]:
    """'B-PER' -> ('B', 'PER'); 'O' -> ('O', '_'): the prefix is the first character, as conlleval."""
    return tag[:1] or "O", tag[1:].split("-", 1)[-1] or "_"


def _chunk_ends(previous: tuple[str, str], current: tuple[str, str]) -> bool:
    """conlleval's endOfChunk: does the chunk holding `previous` end before `current`?"""
    (prev_prefix, prev_type), (prefix, kind) = previous, current
    if prev_prefix in ("E", "S"):
        return True
    if prev_prefix in ("B", "I") and prefix in ("B", "S", "O"):
        return True
    return prev_prefix not in ("O", ".") and prev_type != kind


def _chunk_starts(previous: tuple[str, str], current: tuple[str, str]) -> bool:
    """conlleval's startOfChunk: does a new chunk start at `current`?"""
    (prev_prefix, prev_type), (prefix, kind) = previous, current
    if prefix in ("B", "S"):
        return True
    if prefix in ("I", "E") and prev_prefix in ("E", "S", "O"):
        return True
    return prefix not in ("O", ".") and prev_type != kind


def chunks(tags: Sequence[str]) -> list[Chunk]:
    """The entities of one tag sequence, read as conlleval does (IOB1, IOB2, IOBES).

    An `I-X` after `O` or after another type starts an entity (IOB1); `B-X` always does.

    >>> chunks(["I-PER", "I-PER", "O", "B-LOC", "I-LOC", "B-LOC"])
    [Chunk(type='PER', start=0, end=2), Chunk(type='LOC', start=3, end=5), Chunk(type='LOC', start=5, end=6)]
    """
    found: list[Chunk] = []
    previous = ("O", "")
    start = 0
    for position, tag in enumerate(list(tags) + ["O"]):
        current = _split_tag(tag)
        if _chunk_ends(previous, current):
            found.append(Chunk(previous[1], start, position))
        if _chunk_starts(previous, current):
            start = position
        previous = current
    return found


def entity_scores(labels: Iterable[Sequence[str]], predictions: Iterable[Sequence[str]]) -> dict[str, float]:
    """Micro precision, recall and F1 over exact entity matches, as conlleval.

    Sentences are scored one at a time, so an entity never spans two sentences.
    """
    true_count = pred_count = correct = 0
    for gold_tags, pred_tags in zip(labels, predictions, strict=True):
        gold, pred = set(chunks(gold_tags)), set(chunks(pred_tags))
        true_count += len(gold)
        pred_count += len(pred)
        correct += len(gold & pred)
    precision = correct / pred_count if pred_count else 0.0
    recall = correct / true_count if true_count else 0.0
    score = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": score}
