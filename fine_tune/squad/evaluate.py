"""SQuAD scores: exact match and F1 as the official v1.1 and v2.0 evaluation scripts.

Both normalise an answer the same way (lower case, drop ASCII punctuation, drop the
articles a/an/the, collapse whitespace) and take, for each question, the best score
over its gold answers. They differ on empty answers:

- v1.1: F1 is 0 whenever prediction and gold share no token (even both empty); a
  question without prediction scores 0 and still counts.
- v2.0: gold answers that normalise to nothing are dropped, and a question left
  without gold is unanswerable, whose only right answer is ""; F1 is 1 when both sides
  are empty and 0 when only one is. Questions without prediction are left out (as
  tf-models-official's copy does; the original script crashes on them). With
  no-answer probabilities (`na_probs`, e.g. null_odds.json), a question whose
  probability is above `na_prob_thresh` (1.0) counts as predicted unanswerable, and
  the best threshold is searched: the best score reachable by predicting "" for every
  question whose probability is above it (`best_exact`, `best_f1` and their thresholds).

Chinese answers have no spaces, so the v1.1 normalisation reads a whole answer as one
token; `evaluate_chinese` is CMRC 2018's metric instead (character tokens, F1 of the
longest common run), which DRCD and CMRC results are reported with.

Run as a script like the official ones:

    python -m fine_tune.squad.evaluate dev-v2.0.json predictions.json --na_prob_file null_odds.json
    python -m fine_tune.squad.evaluate DRCD_test.json predictions.json --version zh

Example:
>>> normalize_answer("The  Broncos!")
'broncos'
>>> data = [{"paragraphs": [{"qas": [{"id": "q1", "answers": [{"text": "Denver Broncos"}]},
...                                  {"id": "q2", "answers": []}]}]}]
>>> evaluate_v1(data[:0], {})
{'exact_match': 0.0, 'f1': 0.0}
>>> scores = evaluate_v2(data, {"q1": "the Broncos", "q2": ""})
>>> scores["exact"], round(scores["f1"], 4), round(scores["HasAns_f1"], 4), scores["NoAns_exact"]
(50.0, 83.3333, 66.6667, 100.0)
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import string
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from bert_tf.tokenization import is_cjk, is_punctuation
from fine_tune.squad.reader import load_json

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


# === Answers ===
def normalize_answer(text: str) -> str:
    """Lower case, no ASCII punctuation, no articles, single spaces."""
    text = "".join(char for char in text.lower() if char not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _overlap_f1(prediction: list[str], gold: list[str]) -> float:
    same = sum((collections.Counter(prediction) & collections.Counter(gold)).values())
    if same == 0:
        return 0
    precision = 1.0 * same / len(prediction)
    recall = 1.0 * same / len(gold)
    return (2 * precision * recall) / (precision + recall)


def exact_match(prediction: str, gold: str) -> int:
    """1 when both normalise to the same text.

    >>> exact_match("An apple.", "apple"), exact_match("", "")
    (1, 1)
    """
    return int(normalize_answer(prediction) == normalize_answer(gold))


def f1_v1(prediction: str, gold: str) -> float:
    """Token-overlap F1 of SQuAD v1.1 (0 when nothing is shared, even if both are empty).

    >>> f1_v1("Denver Broncos", "the Broncos"), f1_v1("", "")
    (0.6666666666666666, 0)
    """
    return _overlap_f1(normalize_answer(prediction).split(), normalize_answer(gold).split())


def f1_v2(prediction: str, gold: str) -> float:
    """Token-overlap F1 of SQuAD v2.0: an empty side scores 1 if both are empty, else 0.

    >>> f1_v2("", ""), f1_v2("a", "Broncos"), f1_v2("Broncos", "")
    (1, 0, 0)
    """
    gold_tokens = normalize_answer(gold).split() if gold else []
    predicted = normalize_answer(prediction).split() if prediction else []
    if not gold_tokens or not predicted:
        return int(gold_tokens == predicted)
    return _overlap_f1(predicted, gold_tokens)


# === Data sets ===
def questions(dataset: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, list[str]]]:
    """(id, gold answer texts) of every question of a SQuAD `data` list, in file order."""
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield qa["id"], [answer["text"] for answer in qa["answers"]]


def _say(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def evaluate_v1(dataset: Sequence[Mapping[str, Any]], predictions: Mapping[str, str]) -> dict[str, float]:
    """`exact_match` and `f1` (in %) of the official SQuAD v1.1 script."""
    return _best_over_golds(dataset, predictions, exact_match, f1_v1)


def _best_over_golds(
    dataset: Sequence[Mapping[str, Any]],
    predictions: Mapping[str, str],
    exact_of: Callable[[str, str], float],
    f1_of: Callable[[str, str], float],
) -> dict[str, float]:
    """v1.1's scoring: per question the best score over its golds, 0 without a prediction, in %."""
    total = missing = 0
    exact = f1 = 0.0
    for qas_id, golds in questions(dataset):
        total += 1
        if qas_id not in predictions:
            missing += 1
            continue
        prediction = predictions[qas_id]
        exact += max(exact_of(prediction, gold) for gold in golds)
        f1 += max(f1_of(prediction, gold) for gold in golds)
    if missing:
        _say(f"{missing} of {total} questions have no prediction; they score 0.")
    if total == 0:
        return {"exact_match": 0.0, "f1": 0.0}
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


# === Chinese (DRCD, CMRC 2018) ===
def normalize_chinese(text: str) -> str:
    """CMRC 2018's normalisation: lower case, outer whitespace stripped, punctuation dropped.

    Punctuation is BERT's (`bert_tf.tokenization.is_punctuation`: ASCII symbols and
    Unicode P*), a superset of the list in CMRC 2018's script.

    >>> normalize_chinese(" 《阿闥婆吠陀》。")
    '阿闥婆吠陀'
    """
    return "".join(char for char in text.lower().strip() if not is_punctuation(char))


def chinese_tokens(text: str) -> list[str]:
    """The units of CMRC 2018's F1: each CJK ideograph, and each whitespace-separated run
    of the rest (CMRC's script runs nltk's word_tokenize there), of the normalised text.

    >>> chinese_tokens("第一代iPhone 4s，")
    ['第', '一', '代', 'iphone', '4s']
    """
    tokens: list[str] = []
    for run in normalize_chinese(text).split():
        piece = ""
        for char in run:
            if is_cjk(ord(char)):
                tokens += [piece, char] if piece else [char]
                piece = ""
            else:
                piece += char
        tokens += [piece] if piece else []
    return tokens


def longest_common_run(first: Sequence[str], second: Sequence[str]) -> int:
    """The length of the longest common contiguous run (substring) of two sequences.

    >>> longest_common_run(list("1956年7月"), list("年7月福建"))
    3
    """
    best = 0
    previous = [0] * (len(second) + 1)
    for item in first:
        current = [0] * (len(second) + 1)
        for index, other in enumerate(second, 1):
            if item == other:
                current[index] = previous[index - 1] + 1
                best = max(best, current[index])
        previous = current
    return best


def exact_match_chinese(prediction: str, gold: str) -> int:
    """1 when both are equal once normalised (CMRC 2018's EM).

    >>> exact_match_chinese("「領先盤」", "領先盤"), exact_match_chinese("1956年", "1956年7月")
    (1, 0)
    """
    return int(normalize_chinese(prediction) == normalize_chinese(gold))


def f1_chinese(prediction: str, gold: str) -> float:
    """CMRC 2018's F1: precision and recall of the longest common run of `chinese_tokens`
    (a run, not SQuAD's bag of tokens: the answer's characters in their order).

    >>> round(f1_chinese("1956年", "1956年7月"), 4), f1_chinese("", "年")
    (0.6667, 0.0)
    """
    predicted, golden = chinese_tokens(prediction), chinese_tokens(gold)
    common = longest_common_run(predicted, golden)
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(golden)
    return 2 * precision * recall / (precision + recall)


def evaluate_chinese(dataset: Sequence[Mapping[str, Any]], predictions: Mapping[str, str]) -> dict[str, float]:
    """`exact_match` and `f1` (in %) of CMRC 2018's evaluation script, the metric DRCD and
    CMRC results are reported with; questions are scored as v1.1 (best gold, 0 if missing)."""
    return _best_over_golds(dataset, predictions, exact_match_chinese, f1_chinese)


def evaluate_v2(
    dataset: Sequence[Mapping[str, Any]],
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, float]:
    """The scores of the official SQuAD v2.0 script, in %.

    Keys: `exact`, `f1`, `total`, `HasAns_*` and `NoAns_*` (the same three over the
    answerable and the unanswerable questions, when there are any), and `best_exact`,
    `best_exact_thresh`, `best_f1`, `best_f1_thresh`. `na_probs` defaults to 0 for
    every prediction.
    """
    has_answer: dict[str, bool] = {}
    exact: dict[str, float] = {}
    f1: dict[str, float] = {}
    missing = 0
    for qas_id, golds in questions(dataset):
        if qas_id not in predictions:
            missing += 1
            continue
        has_answer[qas_id] = bool(golds)
        golds = [gold for gold in golds if normalize_answer(gold)] or [""]
        exact[qas_id] = max(exact_match(predictions[qas_id], gold) for gold in golds)
        f1[qas_id] = max(f1_v2(predictions[qas_id], gold) for gold in golds)
    if missing:
        _say(f"{missing} questions have no prediction; they are left out of the scores.")
    if na_probs is None:
        na_probs = {qas_id: 0.0 for qas_id in predictions}
    exact_after = _apply_no_answer_threshold(exact, na_probs, has_answer, na_prob_thresh)
    f1_after = _apply_no_answer_threshold(f1, na_probs, has_answer, na_prob_thresh)
    results = _scores(exact_after, f1_after, list(exact_after))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        ids = [qas_id for qas_id, has in has_answer.items() if has == wanted]
        if ids:
            results.update({f"{prefix}_{key}": value for key, value in _scores(exact_after, f1_after, ids).items()})
    for name, raw in (("exact", exact), ("f1", f1)):
        results[f"best_{name}"], results[f"best_{name}_thresh"] = best_threshold(predictions, raw, na_probs, has_answer)
    return results


def _apply_no_answer_threshold(
    scores: Mapping[str, float], na_probs: Mapping[str, float], has_answer: Mapping[str, bool], threshold: float
) -> dict[str, float]:
    """A question whose no-answer probability is above `threshold` is scored as predicted "" ."""
    return {
        qas_id: float(not has_answer[qas_id]) if na_probs[qas_id] > threshold else score
        for qas_id, score in scores.items()
    }


def _scores(exact: Mapping[str, float], f1: Mapping[str, float], ids: Sequence[str]) -> dict[str, float]:
    if not ids:
        return {"exact": 0.0, "f1": 0.0, "total": 0}
    return {
        "exact": 100.0 * sum(exact[qas_id] for qas_id in ids) / len(ids),
        "f1": 100.0 * sum(f1[qas_id] for qas_id in ids) / len(ids),
        "total": len(ids),
    }


def best_threshold(
    predictions: Mapping[str, str],
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    has_answer: Mapping[str, bool],
) -> tuple[float, float]:
    """(best score in %, its threshold) when "" is predicted above a no-answer threshold.

    Starting from "everything predicted unanswerable" (every unanswerable question
    right), questions are taken in increasing no-answer probability and given their
    prediction: an answerable one gains its score, an unanswerable one loses 1 if the
    prediction is not "". The best running total and the probability where it was
    reached are returned, exactly as the official script scans them (ties in the
    probability included).

    >>> best_threshold({"a": "x", "b": "y"}, {"a": 1, "b": 0}, {"a": 0.1, "b": 0.9}, {"a": True, "b": False})
    (100.0, 0.1)
    """
    if not scores:
        return 0.0, 0.0
    current = best = sum(1 for has in has_answer.values() if not has)
    threshold = 0.0
    for qas_id in sorted(na_probs, key=lambda key: na_probs[key]):
        if qas_id not in scores:
            continue
        if has_answer[qas_id]:
            current += scores[qas_id]
        elif predictions[qas_id]:
            current -= 1
        if current > best:
            best, threshold = current, na_probs[qas_id]
    return 100.0 * best / len(scores), threshold


# === Command line ===
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Scores SQuAD predictions as the official v1.1/v2.0 scripts.")
    parser.add_argument("data_file", help="The SQuAD JSON file with the gold answers.")
    parser.add_argument("pred_file", help="predictions.json: {question id: answer text}.")
    parser.add_argument("--na_prob_file", help="SQuAD 2.0: null_odds.json (no-answer scores).")
    parser.add_argument("--version", choices=("1.1", "2.0", "zh"), default=None,
                        help="Which official script to follow (default: 2.0 with --na_prob_file or a v2 file); "
                        "zh: CMRC 2018's character-level metric, for Chinese (DRCD, CMRC).")
    args = parser.parse_args(argv)
    try:
        dataset = load_json(args.data_file)
        predictions = _load_mapping(args.pred_file)
        na_probs = _load_mapping(args.na_prob_file) if args.na_prob_file else None
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    version = args.version or ("2.0" if na_probs is not None or _has_unanswerable(dataset) else "1.1")
    if version == "2.0":
        results = evaluate_v2(dataset, predictions, na_probs)
    else:
        results = (evaluate_chinese if version == "zh" else evaluate_v1)(dataset, predictions)
    print(json.dumps(results, indent=2))
    return 0


def _load_mapping(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            mapping = json.load(handle)
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} cannot be read as JSON ({error}).") from None
    if not isinstance(mapping, dict):
        raise ValueError(f"{path} must hold one JSON object mapping question ids to values.")
    return mapping


def _has_unanswerable(dataset: Sequence[Mapping[str, Any]]) -> bool:
    return any(not golds for _, golds in questions(dataset))


if __name__ == "__main__":
    sys.exit(main())
