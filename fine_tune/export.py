"""`bert-export`: a fine-tuned run as one SavedModel, raw text in, the task's answer out.

    bert-export --model_dir out/mrpc --export_dir export/mrpc [--overwrite] [--mixed_precision=bf16] [--jit_compile]
    bert-export --model_dir out/mrpc --export_dir hf/mrpc --format hf    # or tf1: a checkpoint instead

(`--format hf|tf1`: `fine_tune.checkpoint_export`.)

The SavedModel's `serving_default` signature takes strings (TF Serving's JSON or
gRPC requests, or `tf.saved_model.load` in any Python with `tensorflow` and
`tensorflow_text`; nothing of this repository is needed to run it):

| task | inputs | outputs |
|---|---|---|
| classification | `text_a` (+ `text_b` for pair tasks) | `label` (string), `label_id` (int32), `probabilities` (float32 [batch, labels]), `truncated` (bool: the input was longer than `max_seq_length` and cut as in training) |
| regression (STS-B) | the same | `score` (float32), `truncated` |
| NER | `text` | per word (cut at whitespace, each punctuation or CJK character a word, as `load_task_model` cuts them): `tags`, `word_start`, `word_end` (character offsets in `text`), `num_words`; per entity: `entity_type`, `entity_text`, `entity_start`, `entity_end`, `num_entities` (padded with "" / -1). Words already cut: the `tag_words` signature (`words` padded with "", `num_words`) |
| SQuAD | `question`, `context` | `answer` (string, "" for none), `start`, `end` (int32 character offsets in `context`), `score` (float32 n-best probability); SQuAD 2.0 also `has_answer` (bool), `null_score_diff` (float32) |

Tokenization (`bert_tf.preprocessing.BertPreprocessor`, the run's vocabulary, casing and
`max_seq_length`, truncation as in training) is inside the graph; so are a SQuAD run's
windows, n-best rules and thresholds (`fine_tune.squad.serving`, with its settings as
the run recorded them, or as `--setting name=value` changes them: e.g.
`--setting null_score_diff_threshold=-1.2`, a threshold tuned on dev). The vocabulary, the
label names (`labels.txt`, one a line, in label-id order) and `bert_export.json` (task,
labels, inputs) are the SavedModel's assets. Load it with `import tensorflow_text`
first: its ops must be registered ("Op type not registered 'RegexSplitWithOffsets'"
otherwise).

`--hub_dir` also writes the fine-tuned encoder and its preprocessing as two SavedModels
in TF Hub's BERT layout (`bert_tf.hub_export`). Every export is written to a temporary
folder beside its destination and renamed when complete; an existing destination is
replaced only with `--overwrite`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from absl.flags import FlagValues

from bert_tf import hub_export, tokenization
from bert_tf.atomic import atomic_folder, write_text
from bert_tf.errors import BertTfError
from bert_tf.flags import Flag, file_in_the_way, flag_values, path_within, require, run_main, set_help
from bert_tf.hub_export import save_atomically, serving_function
from bert_tf.preprocessing import BertPreprocessor
from fine_tune.checkpoint_export import FORMATS as CHECKPOINT_FORMATS
from fine_tune.checkpoint_export import LABELS_FILE, export_checkpoint
from fine_tune.run_dir import LoadedRun, load_run, settings_of
from fine_tune.squad.serving import SpanAnswerer

SIGNATURE = "serving_default"
WORDS_SIGNATURE = "tag_words"  # a tagger's signature for text already cut into words
EXPORT_INFO = "bert_export.json"
SAVED_MODEL = "saved_model"
FORMATS = (SAVED_MODEL, *CHECKPOINT_FORMATS)


# === What the task takes ===
def task_inputs(run: LoadedRun) -> tuple[str, ...]:
    """("text_a",) or ("text_a", "text_b"): what the task's examples hold."""
    return ("text_a", "text_b") if run.task.reader.takes_pairs else ("text_a",)


# === The exported module ===
class ClassifierExport(tf.Module):
    """Strings to label, label id and probabilities (or a score), as one module to save."""

    def __init__(self, run: LoadedRun, inputs: tuple[str, ...], assets_dir: str):
        super().__init__(name="bert_classifier")
        self.preprocessor = BertPreprocessor(
            run.vocab_file, run.do_lower_case, run.max_seq_length, padding="longest"
        )
        self.model = run.model
        self.jit_compile = run.jit_compile
        self.regression = run.is_regression
        self.vocab_file = tf.saved_model.Asset(run.vocab_file)
        _attach_info(self, run, inputs, assets_dir)
        specs = [tf.TensorSpec([None], tf.string, name=name) for name in inputs]
        if len(inputs) == 2:
            self.serve = serving_function(lambda text_a, text_b: self.answer([text_a, text_b]), specs)
        else:
            self.serve = serving_function(lambda text_a: self.answer([text_a]), specs)

    def answer(self, texts: list[tf.Tensor]) -> dict[str, tf.Tensor]:
        segments = [self.preprocessor.tokenize(tf.reshape(text, [-1])) for text in texts]
        outputs = self.preprocessor.call_by_length(self.model, self.preprocessor.pack(segments),
                                                   jit_compile=self.jit_compile)
        # Whether a row lost tokens to `max_seq_length` ([CLS] and one [SEP] per segment besides).
        tokens = tf.add_n([segment.merge_dims(1, 2).row_lengths() for segment in segments])
        truncated = tokens + len(segments) + 1 > self.preprocessor.seq_length
        if self.regression:
            return {"score": outputs[:, 0], "truncated": truncated}
        label_id = tf.argmax(outputs, axis=-1, output_type=tf.int32)
        return {
            "label": self.label_names.lookup(tf.cast(label_id, tf.int64)),
            "label_id": label_id,
            "probabilities": tf.nn.softmax(outputs, axis=-1),
            "truncated": truncated,
        }


class TaggerExport(tf.Module):
    """A text to the tag of every word, and its entities with character offsets.

    The words are those of `bert_tf.load_task_model` (`fine_tune.predictor.split_words`):
    cut at whitespace, and each punctuation or CJK character a word of its own. Text
    already cut into words (CoNLL's) goes to the `tag_words` signature: `words`, padded
    with "", and `num_words`; its offsets are those of the words joined by single spaces.
    As `run_ner.py`: each word is cut into WordPieces (a word with none is [UNK]), labelled
    on its first piece, and a text longer than `max_seq_length` is cut into windows at
    word boundaries (the featuriser's greedy chunks), so every word gets a tag; a
    `--document_context` run fills the rest of each window with the text's words around
    it, as its featuriser does (each text its own document). Entities
    are read from the tags as conlleval does (`fine_tune.metrics.chunks`): `B-X` starts
    one, so does `I-X` after `O` or after another type.
    """

    def __init__(self, run: LoadedRun, assets_dir: str):
        super().__init__(name="bert_tagger")
        self.preprocessor = BertPreprocessor(run.vocab_file, run.do_lower_case, run.max_seq_length, padding="longest")
        self.model = run.model
        self.jit_compile = run.jit_compile
        self.room = run.max_seq_length - 2
        self.document_context = run.task_config.document_context
        self.unk_id = tokenization.load_vocab(run.vocab_file)["[UNK]"]
        self.vocab_file = tf.saved_model.Asset(run.vocab_file)
        _attach_info(self, run, ("text",), assets_dir)
        self.serve = serving_function(self.tag_text, [tf.TensorSpec([None], tf.string, name="text")])
        self.serve_words = serving_function(self.tag_words, [tf.TensorSpec([None, None], tf.string, name="words"),
                                                             tf.TensorSpec([None], tf.int32, name="num_words")])

    def context_taken(self, left: tf.Tensor, right: tf.Tensor, free: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """How many context pieces each window takes from the `left` and `right` available."""
        if not self.document_context:
            return tf.zeros_like(left), tf.zeros_like(right)
        take_right = tf.minimum(right, free - tf.minimum(left, free // 2))
        return tf.minimum(left, free - take_right), take_right

    def tag_text(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        return self.tag(text, *self.preprocessor.tokenize_with_offsets(text, split_punctuation=True))

    def tag_words(self, words: tf.Tensor, num_words: tf.Tensor) -> dict[str, tf.Tensor]:
        words = tf.RaggedTensor.from_tensor(words, lengths=tf.cast(num_words, tf.int64))
        ids = words.with_flat_values(tf.cast(self.preprocessor.tokenizer(words.flat_values), tf.int32))
        # Offsets in the words joined by single spaces (`fine_tune.predictor.joined_spans`).
        lengths = tf.strings.length(words.flat_values, unit="UTF8_CHAR")
        spaced = tf.cast(lengths, tf.int64) + 1
        before = tf.cumsum(spaced, exclusive=True)
        row_start = tf.gather(tf.concat([before, [tf.reduce_sum(spaced)]], axis=0), words.row_starts())
        starts = before - tf.gather(row_start, words.value_rowids())
        text = tf.strings.reduce_join(words, axis=1, separator=" ")
        return self.tag(text, ids, words.with_flat_values(starts), words.with_flat_values(starts + spaced - 1))

    def tag(self, text: tf.Tensor, ids: tf.RaggedTensor, starts: tf.RaggedTensor, ends: tf.RaggedTensor
            ) -> dict[str, tf.Tensor]:
        """The outputs for the words of `text` (`ids` `[batch, (words), (pieces)]`, their offsets)."""
        word_rows = ids.value_rowids()
        is_first = tf.equal(tf.range(tf.size(word_rows, out_type=tf.int64)), tf.gather(ids.row_splits, word_rows))
        words = ids.values[:, : self.room]
        empty = tf.cast(tf.equal(words.row_lengths(), 0), tf.int64)
        unknown = tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(empty)], self.unk_id), empty)
        words = tf.concat([words, unknown], axis=1)
        lengths = words.row_lengths()

        # Windows: a word opens a new one at the start of its text or when it no longer fits.
        def fill(used: tf.Tensor, word: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
            length, first = word
            return tf.where(first | (used + length > self.room), length, used + length)

        used_after = tf.scan(fill, (lengths, is_first), initializer=tf.constant(0, tf.int64))
        used_before = tf.concat([[0], used_after[:-1]], axis=0)
        opens = is_first | (used_before + lengths > self.room)
        window_of_word = tf.cumsum(tf.cast(opens, tf.int64)) - 1
        first_word = tf.where(opens)[:, 0]

        # Each window's pieces, and around them (--document_context) the text's own pieces
        # before and after, the free room split as `TaggingFeaturiser._window` splits it. The
        # texts' pieces lie end to end in `words.flat_values`, so a window is one slice of it.
        piece_start = tf.cumsum(lengths, exclusive=True)
        total = tf.reduce_sum(lengths, keepdims=True)
        window_start = tf.gather(piece_start, first_word)
        window_end = tf.concat([window_start[1:], total], axis=0)
        text_bounds = tf.gather(tf.concat([piece_start, total], axis=0), ids.row_splits)
        text_of_window = tf.gather(word_rows, first_word)
        take_left, take_right = self.context_taken(
            window_start - tf.gather(text_bounds, text_of_window),
            tf.gather(text_bounds, text_of_window + 1) - window_end,
            self.room - (window_end - window_start),
        )
        piece_index = tf.ragged.range(window_start - take_left, window_end + take_right)
        windows = piece_index.with_flat_values(tf.gather(words.flat_values, piece_index.flat_values))
        position = 1 + tf.gather(take_left, window_of_word) + piece_start - tf.gather(window_start, window_of_word)
        logits = self.preprocessor.call_by_length(self.model, self.preprocessor.pack([windows]),
                                                  jit_compile=self.jit_compile)
        word_logits = tf.gather_nd(logits, tf.stack([window_of_word, position], axis=1))
        tags = self.label_names.lookup(tf.argmax(word_logits, axis=-1))
        batch = tf.shape(text, out_type=tf.int64)[0]
        outputs = {
            "tags": tf.RaggedTensor.from_row_splits(tags, ids.row_splits).to_tensor(""),
            "word_start": starts.to_tensor(-1),
            "word_end": ends.to_tensor(-1),
            "num_words": tf.cast(ids.row_lengths(), tf.int32),
        }
        outputs.update(_entities(text, tags, is_first, word_rows, starts.flat_values, ends.flat_values, batch))
        return outputs


class AnswererExport(tf.Module):
    """A question and its context to the answer and its character offsets (`SpanAnswerer`)."""

    def __init__(self, run: LoadedRun, assets_dir: str):
        super().__init__(name="bert_answerer")
        config = run.task_config
        preprocessor = BertPreprocessor(run.vocab_file, run.do_lower_case, run.max_seq_length, padding="longest")
        self.answerer = SpanAnswerer(run.model, preprocessor, config.doc_stride, config.max_query_length,
                                     run.task.head.config, run.jit_compile)
        self.vocab_file = tf.saved_model.Asset(run.vocab_file)
        _attach_info(self, run, ("question", "context"), assets_dir)
        specs = [tf.TensorSpec([None], tf.string, name=name) for name in ("question", "context")]
        self.serve = serving_function(self.answerer.__call__, specs)


def _entities(
    text: tf.Tensor, tags: tf.Tensor, is_first: tf.Tensor, word_rows: tf.Tensor, starts: tf.Tensor, ends: tf.Tensor,
    batch: tf.Tensor,
) -> dict[str, tf.Tensor]:
    """The entities of the word tags (conlleval's reading), padded per text."""
    tagged = tf.strings.regex_full_match(tags, "[BI]-.+")
    kind = tf.where(tagged, tf.strings.regex_replace(tags, "^[BI]-", ""), "")
    previous = tf.where(is_first, "", tf.concat([[""], kind[:-1]], axis=0))
    begins = tf.not_equal(kind, "") & (tf.strings.regex_full_match(tags, "B-.+") | tf.not_equal(previous, kind))
    inside = tf.where(tf.not_equal(kind, ""))[:, 0]
    entity_of_word = tf.gather(tf.cumsum(tf.cast(begins, tf.int64)) - 1, inside)
    count = tf.reduce_sum(tf.cast(begins, tf.int64))
    start = tf.math.unsorted_segment_min(tf.gather(starts, inside), entity_of_word, count)
    end = tf.math.unsorted_segment_max(tf.gather(ends, inside), entity_of_word, count)
    first_words = tf.where(begins)[:, 0]
    rows = tf.gather(word_rows, first_words)
    entity_text = tf.strings.substr(tf.gather(text, rows), start, end - start, unit="UTF8_CHAR")

    def padded(values: tf.Tensor, default) -> tf.Tensor:
        return tf.RaggedTensor.from_value_rowids(values, rows, nrows=batch).to_tensor(default)

    return {
        "entity_type": padded(tf.gather(kind, first_words), ""),
        "entity_text": padded(entity_text, ""),
        "entity_start": padded(start, -1),
        "entity_end": padded(end, -1),
        "num_entities": tf.cast(tf.math.bincount(tf.cast(rows, tf.int32), minlength=tf.cast(batch, tf.int32),
                                                 maxlength=tf.cast(batch, tf.int32)), tf.int32),
    }


def _attach_info(module: tf.Module, run: LoadedRun, inputs: tuple[str, ...], assets_dir: str) -> None:
    """`bert_export.json` and (for label tasks) `labels.txt` as assets, and the id -> label table."""
    info = {"task": run.task.name, "family": run.family, "labels": list(run.labels), "inputs": list(inputs),
            "do_lower_case": run.do_lower_case, "max_seq_length": run.max_seq_length,
            "mixed_precision": run.mixed_precision, "jit_compile": run.jit_compile,
            "task_config": dataclasses.asdict(run.task_config)}
    module.info_file = tf.saved_model.Asset(_asset(assets_dir, EXPORT_INFO, json.dumps(info, indent=2) + "\n"))
    if run.labels:
        module.labels_file = tf.saved_model.Asset(_asset(assets_dir, LABELS_FILE, "".join(f"{l}\n" for l in run.labels)))
        initializer = tf.lookup.TextFileInitializer(
            module.labels_file, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER,
            tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
        )
        module.label_names = tf.lookup.StaticHashTable(initializer, default_value="")


def _asset(folder: str, name: str, text: str) -> str:
    """Writes the asset file `name` into `folder`; returns its path."""
    path = os.path.join(folder, name)
    write_text(path, text)
    return path


# === Writing ===
def check_export_dir(export_dir: str, overwrite: bool, flag: str = "--export_dir") -> None:
    """Refuses an existing `flag` folder without `--overwrite` (and a file in its place always)."""
    if os.path.isfile(export_dir):
        raise BertTfError(f"{flag} {export_dir} is a file; give a folder path for the export.")
    if blocker := file_in_the_way(export_dir):
        raise BertTfError(f"{flag} {export_dir} cannot be made: {blocker} is a file, not a folder.")
    if os.path.exists(export_dir) and not overwrite:
        raise BertTfError(f"{flag} {export_dir} already exists; pass --overwrite to replace it.")


def export(model_dir: str, export_dir: str, overwrite: bool = False, hub_dir: str | None = None,
           mixed_precision: str = "none", format: str = SAVED_MODEL, jit_compile: bool = False,
           **settings: Any) -> str:
    """Exports the fine-tuned run in `model_dir` to `export_dir` (and its encoder in TF Hub's
    layout to `hub_dir/preprocess` and `hub_dir/encoder`), computing in `mixed_precision`
    (`load_run`'s), the model run through XLA when served with `jit_compile`, with the task
    `settings` given (`load_run`'s: e.g. a SQuAD 2.0 threshold tuned after training); returns
    the export's path. `format` "hf" or "tf1" writes a checkpoint instead of the SavedModel
    (`fine_tune.checkpoint_export`)."""
    if format not in FORMATS:
        raise BertTfError(f"Unknown export format {format!r}; use one of {', '.join(FORMATS)}.")
    if jit_compile and format != SAVED_MODEL:
        raise BertTfError(f"--jit_compile is how a SavedModel serves; --format={format} writes weights only: drop it.")
    check_export_dir(export_dir, overwrite)
    if path_within(model_dir, export_dir):  # replacing the export would delete the run
        raise BertTfError(f"--export_dir {export_dir} holds --model_dir {model_dir}; give a folder outside the run.")
    if hub_dir is not None:
        check_export_dir(hub_dir, overwrite, "--hub_dir")
        if path_within(hub_dir, export_dir) or path_within(export_dir, hub_dir):  # each is written whole, replacing the other
            raise BertTfError(f"--hub_dir {hub_dir} and --export_dir {export_dir} overlap; give two separate folders.")
    run = load_run(model_dir, mixed_precision=mixed_precision, jit_compile=jit_compile, **settings)
    if format != SAVED_MODEL:
        export_checkpoint(run, export_dir, format)
    else:
        _export_saved_model(run, export_dir)
    if hub_dir is not None:
        with atomic_folder(hub_dir) as staging:  # both SavedModels, or neither
            hub_export.export_preprocessing(os.path.join(staging, "preprocess"), run.vocab_file, run.do_lower_case,
                                            run.max_seq_length)
            hub_export.export_encoder(os.path.join(staging, "encoder"), hub_export.task_encoder(run.model))
    return export_dir


def _export_saved_model(run: LoadedRun, export_dir: str) -> None:
    with tempfile.TemporaryDirectory() as assets_dir:
        if run.family == "squad":
            module = AnswererExport(run, assets_dir)
        elif run.family == "ner":
            module = TaggerExport(run, assets_dir)
        else:
            module = ClassifierExport(run, task_inputs(run), assets_dir)
        words = {WORDS_SIGNATURE: module.serve_words} if run.family == "ner" else {}
        save_atomically(module, export_dir, {SIGNATURE: module.serve, **words})


# === Command line ===
FLAGS = flag_values(
    "mixed_precision", "jit_compile", "setting",
    own={
        "model_dir": Flag(str, None, "The --output_dir of a run_classifier.py, run_ner.py or run_squad.py run."),
        "export_dir": Flag(str, None, "Where the SavedModel (or --format's checkpoint) goes (a new folder)."),
        "format": Flag(FORMATS, SAVED_MODEL,
                       "saved_model: text in, answers out (TF Serving); hf: the transformers task model "
                       "(BertForSequenceClassification, ...); tf1: the original's checkpoint names."),
        "overwrite": Flag(bool, False, "Replace an existing --export_dir (and --hub_dir)."),
        "hub_dir": Flag(str, None, "Also export the fine-tuned encoder in TF Hub's BERT layout: HUB_DIR/preprocess "
                        "and HUB_DIR/encoder (see bert_tf.hub_export)."),
    },
)  # fmt: skip


set_help(FLAGS, "jit_compile", "The SavedModel's signatures run the model through XLA (not --hub_dir's encoder): "
         "faster small batches (a batch of one 1.3x on an Intel Xeon), each new batch shape compiled once (~1 s) "
         "the first time it comes (bert_tf.by_length).")


def main(argv: Sequence[str] | None = None) -> int:
    """bert-export (`argv` without the program name): exit status 0, or 1 after one
    `error: ...` line on stderr."""
    return run_main(FLAGS, argv, __doc__, _export)


def _export(values: FlagValues) -> None:
    require(values, "model_dir", "export_dir")
    path = export(values.model_dir, values.export_dir, values.overwrite, values.hub_dir, values.mixed_precision,
                  values.format, values.jit_compile, **settings_of(values.setting))
    what = f"signature {SIGNATURE}" if values.format == SAVED_MODEL else f"{values.format} checkpoint"
    print(f"exported {values.model_dir} to {path} ({what}).")


if __name__ == "__main__":
    sys.exit(main())
