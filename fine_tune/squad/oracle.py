"""The alignment check without a model: gold positions as logits, through featurising and post-processing.

Each row's training targets (the WordPieces of the first aligned gold answer, or
[CLS] when the window does not hold it or the question is unanswerable) become
one-hot logits; decoding them must give back the gold answer text. What does not
(answers inside a WordPiece, like "Japan" in "Japanese", or beyond what the
max-context rule lets a window predict) measures what the pipeline itself loses,
before any learning.

Example:
>>> import numpy as np
>>> from fine_tune.task import Features
>>> features = Features({"input_word_ids": [np.zeros(4, np.int32)], "input_type_ids": [np.zeros(4, np.int32)]},
...                     {"start_positions": np.array([2]), "end_positions": np.array([3])}, np.array([0]))
>>> oracle_outputs(features)[0]["end_logits"].tolist()
[0.0, 0.0, 0.0, 10.0]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from bert_tf.tokenization import FullTokenizer
from fine_tune.squad.evaluate import evaluate_v1, evaluate_v2, exact_match
from fine_tune.squad.features import SpanFeaturiser
from fine_tune.squad.postprocess import PostprocessConfig, SpanPrediction, predict_examples
from fine_tune.squad.reader import SquadExample, read_squad
from fine_tune.squad.task import gold_dataset
from fine_tune.task import Features

ORACLE_LOGIT = 10.0


def oracle_outputs(features: Features) -> list[dict[str, np.ndarray]]:
    """Per row: logits 0 everywhere but `ORACLE_LOGIT` at the row's gold start and end."""
    outputs = []
    for row, length in enumerate(features.lengths):
        logits = {}
        for key, target in (("start_logits", "start_positions"), ("end_logits", "end_positions")):
            logits[key] = np.zeros(int(length), np.float32)
            logits[key][features.scalars[target][row]] = ORACLE_LOGIT
        outputs.append(logits)
    return outputs


@dataclasses.dataclass
class OracleReport:
    """Scores of the oracle predictions, and the questions they get wrong (with a reason each)."""

    scores: dict[str, float]
    questions: int
    rows: int
    failures: list[dict[str, str]]


def oracle_check(
    path: str,
    vocab_file: str,
    version_2_with_negative: bool,
    do_lower_case: bool = True,
    max_seq_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
    examples: Sequence[SquadExample] | None = None,
) -> OracleReport:
    """Runs the oracle over the file `path` (or over `examples` read from it)."""
    if examples is None:
        examples = read_squad(path, version_2_with_negative, split="dev")
    tokenizer = FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    features = SpanFeaturiser(doc_stride, max_query_length)(examples, tokenizer, max_seq_length, [])
    config = PostprocessConfig(do_lower_case=do_lower_case, version_2_with_negative=version_2_with_negative)
    predictions = predict_examples(examples, features.example_index, features.extras, oracle_outputs(features), config)
    texts = {prediction.qas_id: prediction.text for prediction in predictions}
    dataset = gold_dataset(examples)
    scores = evaluate_v2(dataset, texts) if version_2_with_negative else evaluate_v1(dataset, texts)
    failures = _failures(examples, predictions, tokenizer, config.max_answer_length)
    return OracleReport(scores, len(examples), len(features), failures)


def _failures(
    examples: Sequence[SquadExample], predictions: Sequence[SpanPrediction], tokenizer: FullTokenizer,
    max_answer_length: int,
) -> list[dict[str, str]]:
    failures = []
    for example, prediction in zip(examples, predictions):
        golds = list(example.label or ()) or [""]
        if not max(exact_match(prediction.text, gold) for gold in golds):
            answer = example.train_answer
            failures.append({
                "id": example.qas_id,
                "gold": golds[0],
                "predicted": prediction.text,
                "why": _why(example, prediction.text, tokenizer, max_answer_length),
                "context": _around(example, answer.start if answer else 0),
            })
    return failures


def _why(example: SquadExample, predicted: str, tokenizer: FullTokenizer, max_answer_length: int) -> str:
    """Why the oracle misses an answer: the limits of the original's pipeline it runs into."""
    answer = example.train_answer
    if answer is None:
        return "no answer_start matches the context"
    if len(tokenizer.tokenize(answer.text)) > max_answer_length:
        return "answer longer than max_answer_length"
    context, start, end = example.paragraph.context, answer.start, answer.start + len(answer.text)
    inside = (start > 0 and context[start - 1].isalnum() and context[start].isalnum()) or (
        end < len(context) and context[end - 1].isalnum() and context[end].isalnum()
    )
    if inside:
        return "answer starts or ends inside a word"
    if answer.text in predicted:
        return "answer text not mapped back exactly (whole words returned)"
    return "other"


def _around(example: SquadExample, start: int, margin: int = 40) -> str:
    context = example.paragraph.context
    return context[max(0, start - margin) : start + margin]
