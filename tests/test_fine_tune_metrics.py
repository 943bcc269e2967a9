"""Our GLUE / CoNLL metrics equal scikit-learn, scipy and seqeval (conlleval mode) on random inputs."""

from __future__ import annotations

import numpy as np
import pytest

from fine_tune import metrics
from tests.conftest import require_module

SEEDS = range(20)


def _classes(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    return rng.integers(0, k, size=n)


@pytest.mark.parametrize("seed", SEEDS)
def test_classification_metrics_equal_scikit_learn(seed):
    require_module("sklearn", "scikit-learn is the reference for accuracy, F1 and Matthews")
    from sklearn import metrics as sk

    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 300)), int(rng.integers(2, 5))
    labels, predictions = _classes(rng, n, k), _classes(rng, n, k)
    if seed % 5 == 0:  # a constant predictor: Matthews' denominator is 0
        predictions = np.zeros_like(predictions)
    assert metrics.accuracy(labels, predictions) == pytest.approx(sk.accuracy_score(labels, predictions), abs=1e-12)
    assert metrics.matthews_corrcoef(labels, predictions) == pytest.approx(
        sk.matthews_corrcoef(labels, predictions), abs=1e-12
    )
    binary_labels, binary_predictions = labels % 2, predictions % 2
    assert metrics.f1(binary_labels, binary_predictions) == pytest.approx(
        sk.f1_score(binary_labels, binary_predictions, zero_division=0.0), abs=1e-12
    )


def test_metrics_accept_string_labels_as_glue_files_have_them():
    require_module("sklearn", "scikit-learn is the reference")
    from sklearn import metrics as sk

    gold = ["1", "0", "1", "1", "0", "1"]
    predicted = ["1", "1", "0", "1", "0", "1"]
    assert metrics.f1(gold, predicted, positive="1") == pytest.approx(sk.f1_score(gold, predicted, pos_label="1"))
    assert metrics.matthews_corrcoef(gold, predicted) == pytest.approx(sk.matthews_corrcoef(gold, predicted))


@pytest.mark.parametrize("seed", SEEDS)
def test_correlations_equal_scipy(seed):
    require_module("scipy", "scipy is the reference for Pearson and Spearman")
    from scipy import stats

    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 500))
    x = rng.normal(size=n)
    # STS-B gold scores repeat a lot: round them so Spearman sees many ties.
    y = np.round(x + rng.normal(scale=1.0, size=n), 1 if seed % 2 else 0)
    assert metrics.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-10)
    assert metrics.spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-10)
    assert metrics.average_ranks(y).tolist() == stats.rankdata(y).tolist()


def _random_tags(rng: np.random.Generator, n: int) -> list[str]:
    # Every prefix conlleval knows, including IOB1's I- starts and IOBES' E-/S-.
    prefixes = ["O", "O", "O", "B", "I", "I", "E", "S"]
    types = ["PER", "LOC", "ORG"]
    tags = []
    for _ in range(n):
        prefix = prefixes[rng.integers(len(prefixes))]
        tags.append("O" if prefix == "O" else f"{prefix}-{types[rng.integers(len(types))]}")
    return tags


@pytest.mark.parametrize("seed", SEEDS)
def test_entity_scores_equal_seqeval(seed):
    require_module("seqeval", "seqeval (conlleval mode) is the reference for entity-level scores")
    from seqeval import metrics as seq

    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 25, size=int(rng.integers(1, 40)))
    gold = [_random_tags(rng, int(n)) for n in lengths]
    predicted = [_random_tags(rng, int(n)) if rng.random() < 0.7 else list(tags) for n, tags in zip(lengths, gold)]
    scores = metrics.entity_scores(gold, predicted)
    assert scores["precision"] == pytest.approx(seq.precision_score(gold, predicted), abs=1e-12)
    assert scores["recall"] == pytest.approx(seq.recall_score(gold, predicted), abs=1e-12)
    assert scores["f1"] == pytest.approx(seq.f1_score(gold, predicted), abs=1e-12)


def test_entity_scores_on_real_conll_tags_equal_seqeval(shared_data):
    """The gold tags of eng.testa against a corrupted copy: IOB1 as released."""
    require_module("seqeval", "seqeval is the reference")
    from seqeval import metrics as seq

    from fine_tune.tagging import read_conll

    gold = [list(s.label) for s in read_conll(str(shared_data / "conll2003" / "eng.testa"))]
    rng = np.random.default_rng(0)
    tag_set = sorted({tag for tags in gold for tag in tags})
    predicted = [[tag_set[rng.integers(len(tag_set))] if rng.random() < 0.1 else tag for tag in tags] for tags in gold]
    assert metrics.entity_scores(gold, predicted)["f1"] == pytest.approx(seq.f1_score(gold, predicted), abs=1e-12)
    assert sum(len(metrics.chunks(tags)) for tags in gold) == 5942  # the entity count of shared/data/README.md
