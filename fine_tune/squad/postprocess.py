"""Start/end logits -> answer texts, as the original `write_predictions`.

For each example, over all its windows: the `n_best_size` highest start and end logits
give candidate spans; a span is kept if both ends are context tokens, its start is in
the window that has the most context for it, it does not end before it starts, and it
is at most `max_answer_length` WordPieces long. Candidates are ranked by start + end
logit; the best `n_best_size` distinct texts form the n-best list (with softmax
probabilities). Each span's WordPieces are mapped back to the context words they came
from and then to the exact characters of the prediction (`get_final_text`).

SQuAD 2.0: the null score is the lowest [CLS] start + end logit over the windows;
an example is predicted unanswerable ("") when null score - best non-null score >
`null_score_diff_threshold`. That difference is written to null_odds.json, which the
official evaluation reads as the no-answer probability, and from which it finds the
best threshold.

One departure: candidates are drawn from the real tokens of each row, never from
padding positions (which the original's fixed-length rows could offer and then
discard, crowding real candidates out of the n best).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from collections.abc import Sequence

import numpy as np

from bert_tf.atomic import atomic_outputs
from bert_tf.tokenization import BasicTokenizer
from fine_tune.squad.features import Window
from fine_tune.squad.reader import SquadExample


@dataclasses.dataclass(frozen=True)
class PostprocessConfig:
    """The original's prediction flags."""

    n_best_size: int = 20
    max_answer_length: int = 30
    do_lower_case: bool = True
    version_2_with_negative: bool = False
    null_score_diff_threshold: float = 0.0
    verbose_logging: bool = False


@dataclasses.dataclass(frozen=True)
class NbestEntry:
    """A candidate answer; `start`/`end`: its character offsets in the context (None for
    the null answer and the original's "empty" placeholder)."""

    text: str
    start_logit: float
    end_logit: float
    probability: float = 0.0
    start: int | None = None
    end: int | None = None


@dataclasses.dataclass(frozen=True)
class SpanPrediction:
    """The answer of one question, its n-best list and (SQuAD 2.0) its null score difference."""

    qas_id: str
    text: str
    nbest: tuple[NbestEntry, ...]
    null_score_diff: float | None = None


@dataclasses.dataclass(frozen=True)
class _Candidate:
    window: int
    start: int
    end: int
    start_logit: float
    end_logit: float

    @property
    def score(self) -> float:
        return self.start_logit + self.end_logit


# === Mapping a WordPiece span back to the context ===
def _without_spaces(text: str) -> tuple[str, list[int]]:
    """`text` without its " " characters, and where each remaining character was."""
    positions = [index for index, char in enumerate(text) if char != " "]
    return "".join(text[index] for index in positions), positions


def get_final_text(pred_text: str, orig_text: str, do_lower_case: bool, verbose: bool = False) -> str:
    """The characters of `orig_text` (context words) that `pred_text` (detokenised WordPieces) covers.

    `orig_text` is basic-tokenised; if its characters (spaces aside) align one to one
    with the tokenised text, `pred_text`'s position there maps back to `orig_text`;
    otherwise (the tokenizer changed the length, e.g. dropped a control character),
    the whole `orig_text` is the answer, as in the original.

    >>> get_final_text("steve smith", "Steve Smith's", do_lower_case=True)
    'Steve Smith'
    >>> get_final_text("1895", "(1895-1943).", do_lower_case=True)
    '1895'
    >>> get_final_text("cafe", "Café!", do_lower_case=True)
    'Café'
    >>> get_final_text("nowhere", "Paris", do_lower_case=True)
    'Paris'
    """
    start, end = final_text_span(pred_text, orig_text, do_lower_case, verbose)
    return orig_text[start:end]


def final_text_span(pred_text: str, orig_text: str, do_lower_case: bool, verbose: bool = False) -> tuple[int, int]:
    """Where `get_final_text`'s answer lies in `orig_text`: its (start, end) character offsets.

    >>> final_text_span("1895", "(1895-1943).", do_lower_case=True)
    (1, 5)
    """
    whole = (0, len(orig_text))
    tok_text = " ".join(_basic_tokenizer(do_lower_case).tokenize(orig_text))
    start = tok_text.find(pred_text)
    if start == -1:
        _log(verbose, f"Unable to find text: '{pred_text}' in '{orig_text}'")
        return whole
    end = start + len(pred_text) - 1
    orig_chars, orig_positions = _without_spaces(orig_text)
    tok_chars, tok_positions = _without_spaces(tok_text)
    if len(orig_chars) != len(tok_chars):
        _log(verbose, f"Length not equal after stripping spaces: '{orig_chars}' vs '{tok_chars}'")
        return whole
    tok_to_char = {position: index for index, position in enumerate(tok_positions)}
    if start not in tok_to_char or end not in tok_to_char:
        _log(verbose, "Couldn't map start or end position")
        return whole
    return orig_positions[tok_to_char[start]], orig_positions[tok_to_char[end]] + 1


_BASIC_TOKENIZERS: dict[bool, BasicTokenizer] = {}


def _basic_tokenizer(do_lower_case: bool) -> BasicTokenizer:
    if do_lower_case not in _BASIC_TOKENIZERS:
        _BASIC_TOKENIZERS[do_lower_case] = BasicTokenizer(do_lower_case=do_lower_case)
    return _BASIC_TOKENIZERS[do_lower_case]


def _log(verbose: bool, message: str) -> None:
    if verbose:
        print(message, file=sys.stderr)


def detokenize(tokens: Sequence[str]) -> str:
    """WordPieces joined back into words, whitespace normalised.

    >>> detokenize(["the", "bron", "##cos", "##"])
    'the broncos'
    """
    text = " ".join(tokens).replace(" ##", "").replace("##", "")
    return " ".join(text.strip().split())


def span_text(
    example: SquadExample, window: Window, start: int, end: int, config: PostprocessConfig
) -> tuple[str, int, int]:
    """The context text of the span `start..end` (row positions) of `window`, and the
    (start, end) character offsets in the context it comes from."""
    first_word, last_word = window.word(start), window.word(end)
    orig_text = example.paragraph.text(first_word, last_word)
    pred_text = detokenize(window.tokens(start, end))
    first, last = final_text_span(pred_text, orig_text, config.do_lower_case, config.verbose_logging)
    return (orig_text[first:last], *example.paragraph.char_span(first_word, last_word, first, last))


# === Candidates ===
def best_indexes(logits: np.ndarray, n_best_size: int) -> np.ndarray:
    """The indexes of the `n_best_size` largest logits, largest first, ties by position.

    >>> best_indexes(np.array([0.5, 2.0, 0.5, 1.0]), 3).tolist()
    [1, 3, 0]
    """
    return np.argsort(-logits, kind="stable")[:n_best_size]


def window_candidates(
    index: int, window: Window, start_logits: np.ndarray, end_logits: np.ndarray, config: PostprocessConfig
) -> list[_Candidate]:
    """The valid spans among the n best starts x n best ends of one window, in the original's order."""
    starts = best_indexes(start_logits, config.n_best_size)[:, None]
    ends = best_indexes(end_logits, config.n_best_size)[None, :]
    first, last = window.offset, window.offset + window.length - 1
    in_context = (starts >= first) & (starts <= last) & (ends >= first) & (ends <= last)
    max_context = window.max_context[np.clip(starts - first, 0, window.length - 1)]
    valid = in_context & max_context & (ends >= starts) & (ends - starts + 1 <= config.max_answer_length)
    rows, columns = np.nonzero(valid)  # row-major: starts outer, ends inner, as the original loops
    return [
        _Candidate(index, int(s), int(e), float(start_logits[s]), float(end_logits[e]))
        for s, e in zip(starts[rows, 0], ends[0, columns])
    ]


def softmax(scores: Sequence[float]) -> list[float]:
    """Probabilities of scores (float64, max-shifted, as the original's `_compute_softmax`)."""
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(score - top) for score in scores]
    total = sum(exps)
    return [value / total for value in exps]


# === One example ===
def predict_example(
    example: SquadExample,
    windows: Sequence[Window],
    outputs: Sequence[dict[str, np.ndarray]],
    config: PostprocessConfig,
) -> SpanPrediction:
    """The prediction of `example` from the outputs of its rows (`windows`, in order)."""
    candidates: list[_Candidate] = []
    null = _Candidate(0, 0, 0, 0.0, 0.0)
    # The original's starting value: any real [CLS] score is lower; an example without
    # windows (a context of control characters only) keeps it.
    null_score = 1e6
    for index, (window, output) in enumerate(zip(windows, outputs)):
        start_logits, end_logits = output["start_logits"], output["end_logits"]
        if config.version_2_with_negative:
            score = float(start_logits[0]) + float(end_logits[0])
            if score < null_score:  # the window most sure there is no answer
                null_score = score
                null = _Candidate(index, 0, 0, float(start_logits[0]), float(end_logits[0]))
        candidates += window_candidates(index, window, start_logits, end_logits, config)
    if config.version_2_with_negative:
        candidates.append(null)
    candidates.sort(key=lambda candidate: candidate.score, reverse=True)
    nbest = _nbest(example, windows, candidates, null, config)
    return _prediction(example.qas_id, nbest, null_score, config)


def _nbest(
    example: SquadExample,
    windows: Sequence[Window],
    candidates: list[_Candidate],
    null: _Candidate,
    config: PostprocessConfig,
) -> list[NbestEntry]:
    """The best `n_best_size` distinct texts ("" for the null answer)."""
    seen: set[str] = set()
    nbest: list[NbestEntry] = []
    for candidate in candidates:
        if len(nbest) >= config.n_best_size:
            break
        text, start, end = "", None, None
        if candidate.start > 0:  # not the null answer
            text, start, end = span_text(example, windows[candidate.window], candidate.start, candidate.end, config)
            if text in seen:
                continue
        seen.add(text)
        nbest.append(NbestEntry(text, candidate.start_logit, candidate.end_logit, start=start, end=end))
    if config.version_2_with_negative and "" not in seen:
        nbest.append(NbestEntry("", null.start_logit, null.end_logit))
    if not nbest:
        # SQuAD 1.1 without any valid span (rare): the original's nonce answer.
        nbest.append(NbestEntry("empty", 0.0, 0.0))
    probabilities = softmax([entry.start_logit + entry.end_logit for entry in nbest])
    return [dataclasses.replace(entry, probability=p) for entry, p in zip(nbest, probabilities)]


def _prediction(qas_id: str, nbest: list[NbestEntry], null_score: float, config: PostprocessConfig) -> SpanPrediction:
    if not config.version_2_with_negative:
        return SpanPrediction(qas_id, nbest[0].text, tuple(nbest))
    best = next((entry for entry in nbest if entry.text), None)
    if best is None:
        # Only the null answer is valid (the original crashed here): predict it, with the
        # null score as the difference, as tf-models-official's copy does.
        return SpanPrediction(qas_id, "", tuple(nbest), null_score)
    difference = null_score - best.start_logit - best.end_logit
    text = "" if difference > config.null_score_diff_threshold else best.text
    return SpanPrediction(qas_id, text, tuple(nbest), difference)


def predict_examples(
    examples: Sequence[SquadExample],
    example_index: np.ndarray,
    windows: Sequence[Window],
    outputs: Sequence[dict[str, np.ndarray]],
    config: PostprocessConfig,
) -> list[SpanPrediction]:
    """One prediction per example from the per-row outputs (`example_index`: each row's example)."""
    rows: list[list[int]] = [[] for _ in examples]
    for row, example in enumerate(example_index):
        rows[int(example)].append(row)
    return [
        predict_example(example, [windows[r] for r in mine], [outputs[r] for r in mine], config)
        for example, mine in zip(examples, rows)
    ]


# === Files ===
def write_predictions(
    output_dir: str, predictions: Sequence[SpanPrediction], version_2_with_negative: bool, prefix: str = ""
) -> list[str]:
    """Writes `predictions.json`, `nbest_predictions.json` and (SQuAD 2.0) `null_odds.json`.

    Each file is written under a temporary name first and renamed once all are
    written, so a failed run never leaves half a file behind. Returns the paths.
    """
    contents = {
        "predictions.json": {p.qas_id: p.text for p in predictions},
        "nbest_predictions.json": {
            p.qas_id: [
                {"text": e.text, "probability": e.probability, "start_logit": e.start_logit, "end_logit": e.end_logit}
                for e in p.nbest
            ]
            for p in predictions
        },
    }
    if version_2_with_negative:
        contents["null_odds.json"] = {p.qas_id: p.null_score_diff for p in predictions}
    paths = [os.path.join(output_dir, prefix + name) for name in contents]
    with atomic_outputs(paths) as temporaries:  # all of them, or none
        for temporary, content in zip(temporaries, contents.values()):
            with open(temporary, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(content, indent=4) + "\n")
    return paths
