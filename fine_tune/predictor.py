"""Raw text in, answers out: predictions from a finished fine-tuning run.

`load_task_model(run_dir)` (also `bert_tf.load_task_model`) takes the `--output_dir` of
`run_classifier.py`, `run_ner.py` or `run_squad.py` and returns the model of that task:

- `Classifier.predict(texts)` / `predict(pairs)` -> `Classification` (label, label id,
  probabilities in the order of `model.labels`); `Regressor` (STS-B) -> `Score`.
  A text longer than `max_seq_length` WordPieces is truncated as in training; how
  many were is said once per call, on stderr.
- `Tagger.predict(texts)` -> `Tagging`: every word with its tag and the entities,
  each with its character offsets in the input string. A text is cut into words at
  whitespace, punctuation and CJK characters (BERT's own word boundaries); a tuple
  of words is taken as already split (as a CoNLL file holds them), and offsets then
  refer to the words joined by single spaces. A text longer than `max_seq_length` is
  covered by windows, as `run_ner.py` does: no word goes without a tag.
- `QuestionAnswerer.answer(question, context)` -> `Answer` (text, character offsets in
  the context, n-best probability and, for SQuAD 2.0, whether there is an answer),
  with `run_squad.py`'s windows, n-best rules and thresholds.
- every model: `embed(texts, pooling="cls"|"mean"|"first_subword"|"none", layers=(-1,))`,
  features from its encoder (`bert_tf.pooling`).

One input (a `str`, or a `tuple` for a pair, a pre-split sentence or a question with
its context) gives one result; a list of them gives a list. Predictions are those of
the run scripts by construction: the task's own featuriser, `FineTuningTrainer.predict` and
`head.decode`, in chunks of `INPUT_CHUNK` inputs (bounded memory, and a progress bar on
stderr when there are many). Bytes are read as UTF-8; anything that is not text raises
a `BertTfError` naming the input, before anything is predicted.

Example (the run dir of a tiny MRPC run, as tests/test_predictor.py makes):

    >>> model = load_task_model("out/mrpc")                          # doctest: +SKIP
    >>> model.predict(("He said so.", "So he said."))                # doctest: +SKIP
    Classification(label='1', label_id=1, probabilities=(0.31, 0.69))
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from collections.abc import Iterable, Mapping, Sequence, Set
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from bert_tf import pooling as pooling_lib
from bert_tf.encoder import BertEncoder
from bert_tf.errors import BertTfError
from bert_tf.progress import progress_bar
from bert_tf.tokenization import is_cjk, is_punctuation, is_word_separator
from fine_tune import metrics
from fine_tune.features import PairExample, PairFeaturiser
from fine_tune.heads import Prediction
from fine_tune.run_dir import LoadedRun, load_run
from fine_tune.squad.postprocess import SpanPrediction
from fine_tune.squad.reader import Paragraph, SquadExample
from fine_tune.tagging import TaggedSentence
from fine_tune.task import Features
from fine_tune.trainer import FineTuningTrainer, TrainingConfig

# Inputs featurised and predicted at a time: bounds memory and paces the progress bar (256
# SQuAD contexts, their windows, take about a minute on 2 cores with BERT-base).
INPUT_CHUNK = 256
# The progress bar shows once a call has taken this long: short calls print nothing.
PROGRESS_DELAY_SECONDS = 2.0


# === Results ===
@dataclasses.dataclass(frozen=True)
class Classification:
    """A class: its name, its index in `labels`, and the probability of every label."""

    label: str
    label_id: int
    probabilities: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class Score:
    """A regression model's output (STS-B: similarity 0-5)."""

    score: float


@dataclasses.dataclass(frozen=True)
class Word:
    """A word of the input, its character offsets (`text[start:end]`) and its tag."""

    text: str
    start: int
    end: int
    tag: str


@dataclasses.dataclass(frozen=True)
class Entity:
    """An entity: its type, its text and its character offsets in the input."""

    type: str
    text: str
    start: int
    end: int


@dataclasses.dataclass(frozen=True)
class Tagging:
    """A tagged text: every word with its tag, and the entities they form (read as conlleval does)."""

    text: str
    words: tuple[Word, ...]
    entities: tuple[Entity, ...]


@dataclasses.dataclass(frozen=True)
class Answer:
    """An answer to a question on a context.

    Args:
        text: the answer, as run_squad.py's predictions.json has it ("" for no answer).
        start, end: its character offsets in the context (0, 0 for no answer); the
            context's characters there are `text`, whitespace runs inside an answer
            aside (predictions.json joins words with one space).
        score: its probability among the n best.
        has_answer: False when the model says the question has no answer (SQuAD 2.0).
        null_score_diff: SQuAD 2.0's null score minus the best span's (null_odds.json).
    """

    text: str
    start: int
    end: int
    score: float
    has_answer: bool
    null_score_diff: float | None = None


# === Loading ===
def load_task_model(run_dir: str | os.PathLike, batch_size: int = 32, prefer_best: bool | None = None,
                    mixed_precision: str = "none", jit_compile: bool = False, **settings: Any) -> "TaskModel":
    """The model of a finished run, ready to predict (see the module docstring).

    Args:
        run_dir: the `--output_dir` of a run_classifier.py, run_ner.py or run_squad.py run,
            or a `bert-export` folder of one (`fine_tune.exported`: the same API, through
            the SavedModel).
        batch_size: rows per call of the model's function (within it, rows run 8 at a time,
            sorted by length: `bert_tf.by_length`).
        prefer_best: use the best dev checkpoint (`best/`) when the run kept one; None (the
            default): as the run's `--use_best_checkpoint` did for its own predictions.
        mixed_precision: "bf16" computes the encoder's projections in bfloat16, as
            `torch.autocast` does (`load_run`), "none" in float32. An export computes in what it
            was exported with. On a CPU with AMX a float32 model in oneDNN's bf16 math mode is
            faster (1.6-1.8x float32): `bert_tf.onednn`.
        jit_compile: run the model through XLA: faster small batches (a batch of one 1.3x on an
            Intel Xeon), each new batch shape compiled once (~1 s) the first time it comes. An
            export runs as it was exported (`bert-export --jit_compile`).
        **settings: task flags that the run does not record, e.g. for SQuAD 2.0
            `version_2_with_negative=True, null_score_diff_threshold=-1.5`.
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise BertTfError(f"batch_size must be a positive integer, got {batch_size!r}.")
    if not isinstance(run_dir, (str, os.PathLike)):
        raise BertTfError(f"Give load_task_model the path of a run dir or export as a string, not {run_dir!r}.")
    from fine_tune import exported  # it builds on this module's classes

    if exported.is_export(run_dir):
        fixed = (sorted(settings) + (["mixed_precision"] if mixed_precision != "none" else [])
                 + (["jit_compile"] if jit_compile else []))
        if fixed:
            raise BertTfError(f"{run_dir} is a bert-export SavedModel, whose settings were fixed when it was "
                              f"exported; load its run dir to change {', '.join(fixed)}.")
        return exported.load_export(run_dir, batch_size)
    run = load_run(run_dir, prefer_best, mixed_precision=mixed_precision, jit_compile=jit_compile, **settings)
    if run.family == "squad":
        return QuestionAnswerer(run, batch_size)
    if run.family == "ner":
        return Tagger(run, batch_size)
    return Classifier(run, batch_size) if run.labels else Regressor(run, batch_size)


# === Inputs ===
def as_text(value: Any, where: str) -> str:
    """`value` as a `str` (bytes decoded as UTF-8), or a `BertTfError` naming `where`.

    >>> as_text(b"caf\\xc3\\xa9", "input 0")
    'café'
    >>> as_text(None, "input 2")
    Traceback (most recent call last):
    ...
    bert_tf.errors.BertTfError: input 2 is None, not a text; give a str (or UTF-8 bytes).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as error:
            raise BertTfError(f"{where} is bytes that are not UTF-8 ({error.reason} at byte {error.start}); "
                              "decode it with its real encoding and pass a str.") from None
    raise BertTfError(f"{where} is {type(value).__name__ if value is not None else 'None'}, not a text; "
                      "give a str (or UTF-8 bytes).")


def batch_of(inputs: Any) -> tuple[list[Any], bool]:
    """(rows, whether `inputs` was a single row): a str, bytes or tuple is one row, any other
    ordered iterable many. A dict (whose keys would be taken for texts) or a set (no order to
    answer in) is refused.

    >>> batch_of({"text_a": "a", "text_b": "b"})
    Traceback (most recent call last):
    ...
    bert_tf.errors.BertTfError: Give a text, a tuple or a list of them to predict, not dict.
    """
    if isinstance(inputs, (str, bytes, tuple)):
        return [inputs], True
    if not isinstance(inputs, Iterable) or isinstance(inputs, (Mapping, Set)):
        raise BertTfError(f"Give a text, a tuple or a list of them to predict, not {type(inputs).__name__}.")
    return list(inputs), False


def split_words(text: str) -> list[tuple[int, int]]:
    """The (start, end) offsets of the words of `text`, cut as BERT's basic tokenizer cuts:
    where its words end (`is_word_separator`), and around every punctuation and CJK character.

    >>> text = "EU rejects German-made cars, 北京."
    >>> [text[start:end] for start, end in split_words(text)]
    ['EU', 'rejects', 'German', '-', 'made', 'cars', ',', '北', '京', '.']
    """
    spans: list[tuple[int, int]] = []
    start = None
    for position, char in enumerate(text):
        alone = is_punctuation(char) or is_cjk(ord(char))
        if is_word_separator(char) or alone:
            if start is not None:
                spans.append((start, position))
                start = None
            if alone:
                spans.append((position, position + 1))
        elif start is None:
            start = position
    if start is not None:
        spans.append((start, len(text)))
    return spans


def joined_spans(words: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """The words joined by single spaces, and each word's offsets there.

    >>> joined_spans(["EU", "rejects"])
    ('EU rejects', [(0, 2), (3, 10)])
    """
    spans, position = [], 0
    for word in words:
        spans.append((position, position + len(word)))
        position += len(word) + 1
    return " ".join(words), spans


def _count(number: int, what: str) -> str:
    return f"{number} {what}" + ("" if number == 1 else "s")


# === Models ===
class TaskModel:
    """What every loaded model does: batched prediction through the run's task, and `embed`.

    Subclasses say how an input becomes the task's example (`example`) and how the
    decoded prediction becomes a result (`result`).
    """

    kind = "model"
    script = ""

    def __init__(self, run: LoadedRun, batch_size: int):
        self.run = run
        self.task = run.task
        self.tokenizer = run.tokenizer
        self.labels = run.labels
        self.max_seq_length = run.max_seq_length
        self.batch_size = batch_size
        self.training_config = TrainingConfig(
            run.run_dir, max_seq_length=self.max_seq_length, padding=run.run_config.padding,
            pad_to_multiple_of=run.run_config.pad_to_multiple_of, predict_jit_compile=run.jit_compile,
        )
        # The default strategy: FineTuningTrainer.predict then feeds NumPy batches, no tf.data.
        self.trainer = FineTuningTrainer(run.model, run.task.loss, run.task.head.per_token, self.training_config,
                               tf.distribute.get_strategy())
        self._embedders: dict[tuple[str, tuple[int, ...]], FineTuningTrainer] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(task={self.task_name!r}, run_dir={self.model_dir!r})"

    @property
    def task_name(self) -> str:
        return self.run.task.name

    @property
    def model_dir(self) -> str:
        """The folder the model was loaded from."""
        return self.run.run_dir

    # === Prediction ===
    def predict(self, inputs: Any) -> Any:
        """One result per input (see the module docstring); one input gives one result."""
        rows, single = batch_of(inputs)
        results, truncated = self.predict_rows(rows)
        self.report_truncated(truncated, len(rows))
        return results[0] if single else results

    def predict_rows(self, rows: Sequence[Any], sources: Sequence[str] | None = None,
                     progress: bool = True) -> tuple[list[Any], int]:
        """(the result of every row, how many were truncated). `sources` name the rows in
        error messages (default "input N"). Every row is checked before any is predicted."""
        inputs = self.examples_of(rows, sources)
        bar = progress_bar(len(inputs), "inputs", enabled=progress, delay=PROGRESS_DELAY_SECONDS)
        results: list[Any] = []
        truncated = 0
        for start in range(0, len(inputs), INPUT_CHUNK):
            chunk = inputs[start : start + INPUT_CHUNK]
            examples = [example for example, _ in chunk]
            features = self.task.featuriser(examples, self.tokenizer, self.max_seq_length, self.labels)
            outputs = self.trainer.predict(features, self.batch_size) if len(features) else []
            predictions = self.task.head.decode(examples, features, outputs, self.labels)
            results += [self.result(example, context, p) for (example, context), p in zip(chunk, predictions)]
            truncated += self.truncated(examples, features)
            bar.update(len(chunk))
        bar.close()
        return results, truncated

    def examples_of(self, rows: Sequence[Any], sources: Sequence[str] | None = None) -> list[tuple[Any, Any]]:
        """`example` of every row: the first that is not an input of this model raises, named
        by its source (default "input N")."""
        sources = sources if sources is not None else [f"input {index}" for index in range(len(rows))]
        return [self.example(row, where, index) for index, (row, where) in enumerate(zip(rows, sources))]

    def example(self, row: Any, where: str, index: int) -> tuple[Any, Any]:
        """(the task's example of `row`, whatever `result` needs besides the prediction)."""
        raise NotImplementedError

    def result(self, example: Any, context: Any, prediction: Any) -> Any:
        raise NotImplementedError

    def truncated(self, examples: Sequence[Any], features: Features) -> int:
        """How many examples lost tokens to `max_seq_length` (none where windows cover long inputs)."""
        return 0

    def report_truncated(self, truncated: int, total: int) -> None:
        if truncated:
            verb = "is" if truncated == 1 else "are"
            print(f"note: {_count(truncated, 'input')} of {total} {verb} longer than max_seq_length="
                  f"{self.max_seq_length} WordPieces; they were truncated as in training.", file=sys.stderr, flush=True)

    def answer(self, question: Any, context: Any) -> Any:
        raise self.wrong_kind("answer()", "run_squad.py")

    def wrong_kind(self, call: str, script: str) -> BertTfError:
        return BertTfError(f"{self.model_dir} holds a {self.kind} ({self.task_name}, from {self.script}); "
                           f"{call} needs a model fine-tuned by {script}.")

    # === Features from the encoder ===
    def embed(self, texts: Any, pooling: str = "cls", layers: int | Sequence[int] = (-1,)) -> Any:
        """Features of each text (or pair) from the encoder's `layers`, concatenated, pooled by `pooling`.

        "cls" and "mean" give one vector [len(layers) * H] per text; "first_subword" one
        row per word ([words, F], words as WordPiece sees them); "none" one per WordPiece
        ([tokens, F], [CLS] and [SEP] included). Texts are cut to `max_seq_length` as in
        training.
        """
        pooling_lib.check_pooling(pooling)
        layers = [layers] if isinstance(layers, int) else layers  # embed(texts, layers=-1)
        if not isinstance(layers, (list, tuple)):
            raise BertTfError(f"layers is {type(layers).__name__}; give a layer index or a list of them, e.g. (-1, -2).")
        layers = tuple(pooling_lib.check_layers(list(layers), self.run.config.num_hidden_layers))
        rows, single = batch_of(texts)
        examples = [pair_example(row, f"input {index}", None) for index, row in enumerate(rows)]
        trainer = self._embedder(pooling, layers)
        vectors: list[np.ndarray] = []
        truncated = 0
        bar = progress_bar(len(examples), "texts", delay=PROGRESS_DELAY_SECONDS)
        for start in range(0, len(examples), INPUT_CHUNK):
            chunk = examples[start : start + INPUT_CHUNK]
            features = PairFeaturiser()(chunk, self.tokenizer, self.max_seq_length, ())
            outputs = trainer.predict(features, self.batch_size)
            if pooling == "first_subword":
                words = [int(self._word_starts[ids].sum()) for ids in features.sequences["input_word_ids"]]
                outputs = [row[:count] for row, count in zip(outputs, words)]
            vectors += [np.asarray(row) for row in outputs]
            truncated += count_truncated(chunk, features, self.tokenizer, self.max_seq_length)
            bar.update(len(chunk))
        bar.close()
        self.report_truncated(truncated, len(rows))
        return vectors[0] if single else vectors

    @functools.cached_property
    def _word_starts(self) -> np.ndarray:
        """1 for every vocabulary id that starts a word (`bert_tf.pooling.word_start_mask`)."""
        tokens = [self.tokenizer.inv_vocab.get(index, "[PAD]") for index in range(self.run.config.vocab_size)]
        return pooling_lib.word_start_mask([tokens], len(tokens))[0]

    def _embedder(self, pooling: str, layers: tuple[int, ...]) -> FineTuningTrainer:
        key = (pooling, layers)
        if key not in self._embedders:
            encoder = next(layer for layer in self.run.model.layers if isinstance(layer, BertEncoder))
            model = _Embedder(encoder, pooling, layers, self._word_starts)
            per_token = pooling in ("first_subword", "none")
            self._embedders[key] = FineTuningTrainer(model, None, per_token, self.training_config, tf.distribute.get_strategy())
        return self._embedders[key]


class _Embedder(keras.Model):
    """The encoder, then `bert_tf.pooling.pool` of its block outputs."""

    def __init__(self, encoder: BertEncoder, pooling: str, layers: tuple[int, ...], word_starts: np.ndarray):
        super().__init__(name=f"embed_{pooling}")
        self.encoder = encoder
        self.pooling = pooling
        self.pooled_layers = layers
        self.word_starts = word_starts

    def call(self, inputs: dict[str, Any], training: bool = False) -> Any:
        hidden = self.encoder(inputs, training=training)["encoder_outputs"]
        starts = ops.take(self.word_starts, inputs["input_word_ids"]) if self.pooling == "first_subword" else None
        return pooling_lib.pool(hidden, inputs["input_mask"], self.pooling, self.pooled_layers, starts)


# === Sentence (pair) classification and regression ===
def pair_example(row: Any, where: str, pair: bool | None, task: str = "") -> PairExample:
    """A `PairExample` of a text or a (text_a, text_b) tuple; `pair` says which the task takes (None: either)."""
    if isinstance(row, tuple):
        if len(row) != 2:
            raise BertTfError(f"{where} is a tuple of {len(row)} items; a pair is (text_a, text_b).")
        if pair is False:
            raise BertTfError(f"{where} is a pair of texts, but {task} classifies single texts; give one text.")
        return PairExample(where, as_text(row[0], f"{where} text_a"), as_text(row[1], f"{where} text_b"), None, where)
    if isinstance(row, list):  # JSON's pairs are lists
        raise BertTfError(f"{where} is a list; give a pair of texts as a (text_a, text_b) tuple.")
    if pair:
        raise BertTfError(f"{where} is one text, but {task} classifies pairs; give a (text_a, text_b) tuple.")
    return PairExample(where, as_text(row, where), None, None, where)


def count_truncated(examples: Sequence[PairExample], features: Features, tokenizer, max_seq_length: int) -> int:
    """How many examples `pack_pair` cut (only a row of full length can have been)."""
    count = 0
    for example, length in zip(examples, features.lengths):
        if length == max_seq_length:
            pieces = len(tokenizer.tokenize(example.text_a)) + 2
            if example.text_b is not None:
                pieces += len(tokenizer.tokenize(example.text_b)) + 1
            count += pieces > max_seq_length
    return count


class Classifier(TaskModel):
    """A run_classifier.py model: `predict(texts)` or `predict(pairs)` -> `Classification`."""

    kind = "classifier"
    script = "run_classifier.py"

    @property
    def takes_pairs(self) -> bool:
        """Whether the task classifies pairs (a tsv run: whether it had --text_b_column)."""
        return self.run.task.reader.takes_pairs

    def example(self, row: Any, where: str, index: int) -> tuple[PairExample, None]:
        return pair_example(row, where, self.takes_pairs, self.task_name), None

    def result(self, example: PairExample, context: None, prediction: Prediction) -> Classification:
        label_id = int(np.argmax(prediction.probabilities))
        return Classification(prediction.label, label_id, tuple(float(p) for p in prediction.probabilities))

    def truncated(self, examples: Sequence[PairExample], features: Features) -> int:
        return count_truncated(examples, features, self.tokenizer, self.max_seq_length)


class Regressor(Classifier):
    """A regression run (STS-B, tsv --regression): `predict(pairs)` -> `Score`."""

    kind = "regressor"

    def result(self, example: PairExample, context: None, prediction: float) -> Score:
        return Score(float(prediction))


# === Tagging ===
class Tagger(TaskModel):
    """A run_ner.py model: `predict(texts)` -> `Tagging`."""

    kind = "tagger"
    script = "run_ner.py"

    def example(self, row: Any, where: str, index: int) -> tuple[TaggedSentence, tuple[str, list]]:
        if isinstance(row, tuple):
            text, spans = joined_spans([as_text(word, f"{where} word {number}") for number, word in enumerate(row)])
        else:
            text = as_text(row, where)
            spans = split_words(text)
        words = tuple(text[start:end] for start, end in spans)
        # Each input is a document of its own (document context, if the run used it, stays inside it).
        return TaggedSentence(where, words, None, (), index, None, where), (text, spans)

    def result(self, example: TaggedSentence, context: tuple[str, list], tags: Sequence[str]) -> Tagging:
        text, spans = context
        words = tuple(Word(text[s:e], s, e, tag) for (s, e), tag in zip(spans, tags, strict=True))
        entities = tuple(
            Entity(chunk.type, text[spans[chunk.start][0] : spans[chunk.end - 1][1]], spans[chunk.start][0],
                   spans[chunk.end - 1][1])
            for chunk in metrics.chunks(tags)
        )
        return Tagging(text, words, entities)


# === Question answering ===
class QuestionAnswerer(TaskModel):
    """A run_squad.py model: `answer(question, context)` or `predict([(question, context), ...])` -> `Answer`."""

    kind = "question answerer"
    script = "run_squad.py"

    def answer(self, question: Any, context: Any) -> Answer | list[Answer]:
        """The answer to one question on one context, or to each of two equally long lists."""
        if not isinstance(question, (list, tuple)):
            return self.predict((question, context))  # each checked as a text there
        if not isinstance(context, (list, tuple)) or len(question) != len(context):
            given = f"{len(context)} contexts" if isinstance(context, (list, tuple)) else "one context"
            raise BertTfError(f"answer() got {len(question)} questions but {given}; "
                              "give a list of one context per question.")
        return self.predict(list(zip(question, context)))

    def example(self, row: Any, where: str, index: int) -> tuple[SquadExample, None]:
        if not isinstance(row, tuple) or len(row) != 2:
            raise BertTfError(f"{where} is not a (question, context) pair; a question answerer needs both.")
        question = as_text(row[0], f"{where} question")
        context = as_text(row[1], f"{where} context")
        return SquadExample(str(index), question, Paragraph.from_context(context), None, source=where), None

    def result(self, example: SquadExample, context: None, prediction: SpanPrediction) -> Answer:
        return answer_of(prediction)


def answer_of(prediction: SpanPrediction) -> Answer:
    """The `Answer` of a question's prediction: its text, offsets and n-best probability."""
    entry = next(entry for entry in prediction.nbest if entry.text == prediction.text)
    if entry.start is None:  # the null answer (or the original's "empty": no valid span at all)
        return Answer("", 0, 0, entry.probability, False, prediction.null_score_diff)
    return Answer(prediction.text, entry.start, entry.end, entry.probability, True, prediction.null_score_diff)
