"""Our SQuAD scores equal the official scripts (tf-models-official's copies) to 1e-9.

Gold, random and adversarial predictions (unicode, punctuation, articles, empty and
whitespace-only answers, missing predictions), on the shared dev sets and on small
hand-written ones, for v1.1 and v2.0 (with no-answer probabilities: ties, values above
the 1.0 threshold, negative ones).
"""

from __future__ import annotations

import json
import random

import pytest

from fine_tune.squad import evaluate
from tests.conftest import require_module, shared_file

TOLERANCE = 1e-9
# Our key -> tf-models-official v2.0 key (it renamed the best-threshold results).
V2_KEYS = {
    "exact": "exact", "f1": "f1", "total": "total",
    "HasAns_exact": "HasAns_exact", "HasAns_f1": "HasAns_f1", "HasAns_total": "HasAns_total",
    "NoAns_exact": "NoAns_exact", "NoAns_f1": "NoAns_f1", "NoAns_total": "NoAns_total",
    "best_exact": "final_exact", "best_exact_thresh": "final_exact_thresh",
    "best_f1": "final_f1", "best_f1_thresh": "final_f1_thresh",
}
ADVERSARIAL_GOLDS = [
    "the", "A", "!!!", "an apple", "The  Apple , Inc.", "Ünïcödé façade", "東京都", "naïve café", "  spaced \t out\n ",
    "the the the", "a-b", "U.S.", "$100", "100%", "«quoted»", "l'état", "Mr. T", "ANd", "thE End", "—", "ǅemal", "ΣΑΣ",
]
ADVERSARIAL_PREDICTIONS = [
    "", " ", "\t\n", "the", "a an the", ".", "!!!", "Apple", "apple inc", "unicode facade", "Ünïcödé Façade",
    "東京", "東京都", "naive cafe", "spaced out", "The", "ab", "a b", "US", "u.s.", "100", "100 %", "quoted", "létat",
    "l etat", "mr t", "and", "end", "—", "ǆemal", "σας", "the apple, inc", "tHe ApPlE iNc.", "a-b!", "the  end.",
]


@pytest.fixture(scope="module")
def official():
    require_module("official", "the official SQuAD scripts ship in tf-models-official")
    from official.nlp.tools import squad_evaluate_v1_1, squad_evaluate_v2_0

    return squad_evaluate_v1_1, squad_evaluate_v2_0


def load(relative: str) -> list[dict]:
    return json.loads(shared_file(relative).read_text(encoding="utf-8"))["data"]


def assert_v1_equal(official, dataset, predictions) -> None:
    ours = evaluate.evaluate_v1(dataset, predictions)
    theirs = official[0].evaluate(dataset, predictions)
    assert ours["exact_match"] == pytest.approx(100 * theirs["exact_match"], abs=TOLERANCE)
    assert ours["f1"] == pytest.approx(100 * theirs["final_f1"], abs=TOLERANCE)


def assert_v2_equal(official, dataset, predictions, na_probs=None) -> dict:
    ours = evaluate.evaluate_v2(dataset, predictions, na_probs)
    theirs = official[1].evaluate(dataset, predictions, na_probs)
    assert set(ours) == {ours_key for ours_key, key in V2_KEYS.items() if key in theirs}
    for ours_key, key in V2_KEYS.items():
        if key in theirs:
            assert ours[ours_key] == pytest.approx(theirs[key], abs=TOLERANCE), ours_key
    return ours


# === Per-answer functions ===
def test_answer_functions_equal_official_on_adversarial_pairs(official):
    v1, v2 = official
    for gold in ADVERSARIAL_GOLDS + ADVERSARIAL_PREDICTIONS:
        for prediction in ADVERSARIAL_PREDICTIONS + ADVERSARIAL_GOLDS:
            assert evaluate.normalize_answer(prediction) == v1._normalize_answer(prediction)
            assert evaluate.exact_match(prediction, gold) == v1._exact_match_score(prediction, gold)
            assert evaluate.exact_match(prediction, gold) == v2._compute_exact(gold, prediction)
            assert evaluate.f1_v1(prediction, gold) == v1._f1_score(prediction, gold)
            assert evaluate.f1_v2(prediction, gold) == v2._compute_f1(gold, prediction)


# === Shared dev sets ===
def random_prediction(rng: random.Random, golds: list[str], context: str) -> str:
    """Gold, a mangled gold, a context span, empty/whitespace or an adversarial string."""
    gold = rng.choice(golds) if golds else ""
    words = context.split()
    start = rng.randrange(len(words))
    choices = [
        lambda: gold,
        lambda: gold.upper(),
        lambda: f"The {gold}.",
        lambda: f'"{gold}"',
        lambda: " ".join(gold.split()[: max(1, len(gold.split()) - 1)]),
        lambda: " ".join(words[start : start + rng.randint(1, 6)]),
        lambda: f"{gold} {words[start]}",
        lambda: "",
        lambda: " \t ",
        lambda: rng.choice(ADVERSARIAL_PREDICTIONS),
    ]
    return rng.choice(choices)()


def random_predictions(dataset: list[dict], seed: int) -> dict[str, str]:
    rng = random.Random(seed)
    return {
        qa["id"]: random_prediction(rng, [a["text"] for a in qa["answers"]], paragraph["context"])
        for article in dataset for paragraph in article["paragraphs"] for qa in paragraph["qas"]
    }


def test_v1_gold_random_and_missing_on_shared_dev(official):
    dataset = load("squad/dev-v1.1.json")
    gold = {qas_id: answers[0] for qas_id, answers in evaluate.questions(dataset)}
    assert evaluate.evaluate_v1(dataset, gold) == {"exact_match": 100.0, "f1": 100.0}
    assert_v1_equal(official, dataset, gold)
    predictions = random_predictions(dataset, seed=1)
    assert_v1_equal(official, dataset, predictions)
    for qas_id in list(predictions)[::7]:  # missing predictions score 0 and still count
        del predictions[qas_id]
    assert_v1_equal(official, dataset, predictions)


def test_v2_gold_random_thresholds_and_missing_on_shared_dev(official):
    dataset = load("squad/dev-v2.0.json")
    gold = {qas_id: (answers or [""])[0] for qas_id, answers in evaluate.questions(dataset)}
    assert assert_v2_equal(official, dataset, gold)["exact"] == 100.0
    predictions = random_predictions(dataset, seed=2)
    assert_v2_equal(official, dataset, predictions)
    rng = random.Random(3)
    # Few distinct values: many ties in the threshold scan; some above 1.0 (counted as no-answer).
    na_probs = {qas_id: rng.choice([-2.5, -0.5, 0.0, 0.3, 0.3, 0.9, 1.0, 1.5, 4.0]) for qas_id in predictions}
    assert_v2_equal(official, dataset, predictions, na_probs)
    continuous = {qas_id: rng.gauss(0.0, 3.0) for qas_id in predictions}
    assert_v2_equal(official, dataset, predictions, continuous)
    for qas_id in list(predictions)[::5]:  # left out of every score, as the official copy does
        del predictions[qas_id]
    assert_v2_equal(official, dataset, predictions)
    # (The official copy's precision-recall extra crashes on probabilities of missing questions.)
    assert_v2_equal(official, dataset, predictions, {qas_id: na_probs[qas_id] for qas_id in predictions})


# === Hand-written adversarial sets ===
def adversarial_dataset(with_unanswerable: bool) -> list[dict]:
    qas = [
        {"id": f"q{index}", "answers": [{"text": gold, "answer_start": 0}, {"text": gold.upper(), "answer_start": 0}]}
        for index, gold in enumerate(ADVERSARIAL_GOLDS)
    ]
    if with_unanswerable:
        qas += [{"id": f"n{index}", "answers": []} for index in range(8)]
    return [{"paragraphs": [{"context": "unused", "qas": qas}]}]


@pytest.mark.parametrize("seed", range(6))
def test_adversarial_sets_v1_and_v2(official, seed):
    rng = random.Random(seed)
    v1_data, v2_data = adversarial_dataset(False), adversarial_dataset(True)
    v1_predictions = {qa["id"]: rng.choice(ADVERSARIAL_PREDICTIONS) for qa in v1_data[0]["paragraphs"][0]["qas"]}
    assert_v1_equal(official, v1_data, v1_predictions)
    v2_predictions = {qa["id"]: rng.choice(ADVERSARIAL_PREDICTIONS) for qa in v2_data[0]["paragraphs"][0]["qas"]}
    na_probs = {qas_id: rng.choice([0.0, 0.5, 0.5, 2.0, -1.0]) for qas_id in v2_predictions}
    assert_v2_equal(official, v2_data, v2_predictions)
    assert_v2_equal(official, v2_data, v2_predictions, na_probs)


def test_only_unanswerable_and_only_answerable_sets(official):
    unanswerable = [{"paragraphs": [{"qas": [{"id": "a", "answers": []}, {"id": "b", "answers": []}]}]}]
    results = assert_v2_equal(official, unanswerable, {"a": "", "b": "x"}, {"a": 0.2, "b": 0.1})
    assert "HasAns_exact" not in results and results["NoAns_total"] == 2
    answerable = [{"paragraphs": [{"qas": [{"id": "a", "answers": [{"text": "x"}]}]}]}]
    assert "NoAns_exact" not in assert_v2_equal(official, answerable, {"a": "x"})


def test_command_line_prints_official_scores(tmp_path, capsys):
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"version": "v2.0", "data": adversarial_dataset(True)}), encoding="utf-8")
    predictions = {f"q{index}": gold for index, gold in enumerate(ADVERSARIAL_GOLDS)}
    (tmp_path / "predictions.json").write_text(json.dumps(predictions), encoding="utf-8")
    assert evaluate.main([str(data), str(tmp_path / "predictions.json")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["HasAns_exact"] == 100.0 and printed["total"] == len(ADVERSARIAL_GOLDS)
    assert evaluate.main([str(data), str(tmp_path / "missing.json")]) == 1
    assert "cannot be read as JSON" in capsys.readouterr().err
