"""run_squad.py's prediction as TensorFlow ops: a question and a context in, the answer out.

`SpanAnswerer` is the graph of `bert-export`'s SQuAD SavedModel. Each step is the
Python path's (`fine_tune.squad.features`, `fine_tune.squad.postprocess`), batched:

1. the context is cut into words as `Paragraph.from_context` cuts it (whitespace
   " \\t\\r\\n\\u202f", each CJK ideograph alone) and each word into WordPieces on its
   own (`DocTokens`); the question is cut to `max_query_length` WordPieces;
2. windows of the context start every `doc_stride` tokens (`doc_spans`), each row
   `[CLS] question [SEP] window [SEP]`; a token is predicted only from the window where
   it has the most context (`max_context_masks`);
3. per row, the `n_best_size` best starts x ends among its real tokens give the
   candidates (`window_candidates`: in the context, start's max-context window,
   start <= end, at most `max_answer_length` WordPieces); SQuAD 2.0 adds the null
   candidate of the window with the lowest [CLS] score;
4. candidates sorted by start + end logit (stably: windows, then starts, then ends, the
   null last among equals), repeated texts dropped, the first `n_best_size` kept
   (SQuAD 2.0: the null answer always among them), softmax probabilities in float64;
   the answer is the first, or (SQuAD 2.0) the best span unless null score - its score
   is above `null_score_diff_threshold` (`predict_example`).

The answer's characters: each WordPiece's offsets in its word follow from the lengths
of the WordPieces before it in its basic token (BasicTokenizer's cut of the word at
punctuation and CJK) and from where that token starts: a WordPiece's text, `##` aside,
is as long as the characters it covers, and an [UNK] stands for its whole basic token,
when the word's cleaning, lower-casing and accent stripping keep its length. Where
`get_final_text` gives up and answers the whole words of the span (it holds [UNK], or
a word of it changed length, e.g. a deleted control character, a soft hyphen or a
decomposed accent: `length_changers`), so does the graph. The answer text is the context
there with each whitespace run as one space, as `Paragraph.text` joins words.

One difference, by design: `get_final_text` looks the span's text up with `str.find`
in its words, so when the same text also occurs earlier in the span's first word (a
span starting at "##es" of "successes"), the original answers that earlier
occurrence; the graph answers the span's own characters. A trained model rarely
starts an answer inside a word.
"""

from __future__ import annotations

import functools
import sys

import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf import tokenization
from bert_tf.fast_tokenizer import char_class
from bert_tf.preprocessing import BertPreprocessor, char_offsets, split_basic_tokens
from fine_tune.squad.features import check_lengths
from fine_tune.squad.head import OUTPUT_KEYS
from fine_tune.squad.postprocess import PostprocessConfig

# What the span head (`fine_tune.squad.head.SpanHead`) gives each window: a logit per position.
LOGITS_SPEC = {key: tf.TensorSpec([None, None], tf.float32) for key in OUTPUT_KEYS}

# `Paragraph.from_context`'s word boundaries (reader.SQUAD_WHITESPACE), and its CJK words;
# in a context with CJK, also each punctuation character (`tokenization.is_punctuation`:
# the ASCII symbols and Unicode's P*), as BasicTokenizer cuts it.
CJK_CLASS = "[" + "".join(f"\\x{{{low:x}}}-\\x{{{high:x}}}" for low, high in tokenization.CJK_RANGES) + "]"
PUNCTUATION = "[!-/:-@\\[-`{-~]|\\p{P}"
WORD_DELIMITERS = "[ \\t\\r\\n\\x{202f}]|" + CJK_CLASS
CJK_WORD_DELIMITERS = WORD_DELIMITERS + "|" + PUNCTUATION
WHITESPACE_RUN = "[ \\t\\r\\n\\x{202f}]+"
# `predict_example`'s null score when an example has no window (a context without WordPieces).
NO_WINDOW_NULL_SCORE = 1e6
_UNKNOWN_LENGTH = -1


def piece_lengths(vocab_file: str) -> list[int]:
    """The characters each vocabulary id stands for (`##` aside); -1 for [UNK].

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    >>> _ = open(path, "w", encoding="utf-8").write("[PAD]\\n[UNK]\\n[CLS]\\n[SEP]\\n[MASK]\\nbron\\n##cos\\n")
    >>> piece_lengths(path)
    [5, -1, 5, 5, 6, 4, 3]
    """
    vocab = tokenization.load_vocab(vocab_file)
    lengths = [0] * (max(vocab.values()) + 1)
    for token, index in vocab.items():
        lengths[index] = len(token[2:] if token.startswith("##") else token)
    lengths[vocab["[UNK]"]] = _UNKNOWN_LENGTH
    return lengths


@functools.lru_cache(maxsize=2)
def length_changers(do_lower_case: bool) -> str:
    """An RE2 class of the characters whose cleaning changes the length of their word: those
    the original deletes, those it makes a space (other than SQuAD's word separators), and,
    lower-casing, those whose lower case without accents is not one character (a combining
    mark, a Hangul syllable)."""
    def changes(ch: str) -> bool:
        if tokenization.is_cleaned_away(ch) or tokenization.is_word_separator(ch):
            return True
        return do_lower_case and len(tokenization.lower_and_strip_accents(ch)) != 1

    return char_class(cp for cp in range(sys.maxunicode + 1) if changes(chr(cp)))


def context_words(context: tf.Tensor) -> tuple[tf.RaggedTensor, tf.RaggedTensor, tf.RaggedTensor]:
    """Each context's words with their byte offsets, as `reader.Paragraph.from_context` cuts
    them: the punctuation cuts only in the contexts that hold a CJK character."""
    splittable = tf.strings.regex_replace(context, "\\x00", "\x01")  # regex_split stops at NUL
    with_cjk = tf.strings.regex_full_match(splittable, "(?s).*(" + CJK_CLASS + ").*")
    plain = tf_text.regex_split_with_offsets(splittable, WORD_DELIMITERS, CJK_CLASS)
    cut = tf_text.regex_split_with_offsets(splittable, CJK_WORD_DELIMITERS, CJK_CLASS + "|" + PUNCTUATION)

    def rows_where(parts: tuple, keep: tf.Tensor) -> list[tf.RaggedTensor]:  # the other rows emptied
        mask = tf.gather(keep, parts[0].value_rowids())
        return [tf.ragged.boolean_mask(part, part.with_flat_values(mask)) for part in parts]

    # Row i: the cut words where context i has CJK, else the plain ones (one side is empty).
    return tuple(
        tf.concat([a, b], axis=1) for a, b in zip(rows_where(cut, with_cjk), rows_where(plain, ~with_cjk))
    )


def _segment_first(mask: tf.Tensor, segments: tf.Tensor, count: tf.Tensor) -> tf.Tensor:
    """The first position where `mask` holds in each segment, `size(mask)` where none."""
    size = tf.size(mask, out_type=tf.int64)
    positions = tf.where(mask, tf.range(size), size)
    return tf.minimum(tf.math.unsorted_segment_min(positions, segments, count), size)


def _pick(values: tf.Tensor, positions: tf.Tensor, default) -> tf.Tensor:
    """`values[positions]`, `default` at the position past the end."""
    return tf.gather(tf.concat([values, tf.fill([1], tf.constant(default, values.dtype))], axis=0), positions)


def _count_between(flags: tf.Tensor, first: tf.Tensor, last: tf.Tensor) -> tf.Tensor:
    """How many of `flags[first..last]` hold (inclusive ranges)."""
    total = tf.concat([[0], tf.cumsum(tf.cast(flags, tf.int64))], axis=0)
    return tf.gather(total, last + 1) - tf.gather(total, first)


class SpanAnswerer(tf.Module):
    """Questions and contexts `[batch]` (strings) to `answer`, `start`, `end` (character offsets
    in the context), `score` (n-best probability) and, for SQuAD 2.0, `has_answer` and
    `null_score_diff`.

    Args:
        model: the span model (`SpanHead.build`): encoder inputs -> start and end logits.
        preprocessor: the run's vocabulary, casing and `max_seq_length`.
        doc_stride, max_query_length: the windows (`SpanFeaturiser`).
        config: the n-best rules and thresholds (`PostprocessConfig`).
        jit_compile: run the model through XLA (`bert_tf.by_length`).
    """

    def __init__(self, model, preprocessor: BertPreprocessor, doc_stride: int, max_query_length: int,
                 config: PostprocessConfig, jit_compile: bool = False):
        super().__init__(name="span_answerer")
        check_lengths(preprocessor.seq_length, max_query_length, doc_stride)
        self.model = model
        self.preprocessor = preprocessor
        self.doc_stride = doc_stride
        self.max_query_length = max_query_length
        self.config = config
        self.jit_compile = jit_compile
        self.piece_lengths = tf.constant(piece_lengths(preprocessor.vocab_file), tf.int64)

    def __call__(self, question: tf.Tensor, context: tf.Tensor) -> dict[str, tf.Tensor]:
        batch = tf.shape(context, out_type=tf.int64)[0]
        doc = self._context_tokens(context)
        query = self.preprocessor.tokenize(question).merge_dims(1, 2)[:, : self.max_query_length]
        windows = self._windows(query.row_lengths(), doc["splits"])
        logits = self._logits(query, doc["ids"], windows)
        spans = self._candidates(logits, windows)
        spans.update(self._span_texts(context, doc, spans))
        if self.config.version_2_with_negative:
            null = self._null(logits, windows, batch)
            spans = {key: tf.concat([spans[key], null[key]], axis=0) for key in spans}
        else:
            null = None
        return self._answers(spans, null, batch)

    # === 1. Words and WordPieces of the contexts ===
    def _context_tokens(self, context: tf.Tensor) -> dict[str, tf.Tensor]:
        """Every WordPiece of the batch's contexts (flat), with its word and character offsets."""
        words, byte_starts, byte_ends = context_words(context)
        word_starts = char_offsets(context, byte_starts).flat_values
        word_ends = char_offsets(context, byte_ends).flat_values
        num_words = tf.size(word_starts, out_type=tf.int64)
        # The ids: each word tokenized whole, as `SpanFeaturiser` does.
        pieces = self.preprocessor.tokenizer(words.flat_values)
        ids, word = pieces.flat_values, pieces.value_rowids()
        within_word = tf.range(tf.size(ids, out_type=tf.int64)) - tf.gather(pieces.row_splits, word)
        # The characters: each of the word's basic tokens (cut at punctuation, CJK and other
        # spaces, as BasicTokenizer cuts it) tokenized alone, so that an [UNK] is known to
        # stand for exactly its basic token.
        layout = self._basic_token_pieces(words.flat_values, num_words)
        aligned_words = tf.equal(layout["count"], pieces.row_lengths())  # not so only in rare Greek final-sigma cases
        exact_words = aligned_words & layout["regular"]
        exact = tf.gather(exact_words, word)
        at = tf.where(tf.gather(aligned_words, word), tf.gather(layout["first"], word) + within_word, 0)
        starts = tf.gather(word_starts, word) + tf.gather(layout["starts"], at)
        return {
            "ids": ids,
            "splits": tf.gather(pieces.row_splits, words.row_splits),  # each context's first WordPiece
            "word": word,
            "unknown": tf.equal(tf.gather(self.piece_lengths, ids), _UNKNOWN_LENGTH),
            "starts": tf.where(exact, starts, tf.gather(word_starts, word)),
            "ends": tf.where(exact, starts + tf.gather(layout["lengths"], at), tf.gather(word_ends, word)),
            "irregular_word": ~exact_words,
            "word_starts": word_starts,
            "word_ends": word_ends,
        }

    def _basic_token_pieces(self, words: tf.Tensor, num_words: tf.Tensor) -> dict[str, tf.Tensor]:
        """The WordPieces of the basic tokens of `words` (flat, word by word): each one's
        character offset in its word and length (an [UNK]'s: its basic token's), where each
        word's pieces begin and how many it has, and whether its characters map one to one
        (`get_final_text`'s test: its cleaning keeps its length)."""
        tokens, byte_starts, byte_ends = split_basic_tokens(words)
        token_starts = char_offsets(words, byte_starts).flat_values
        token_lengths = char_offsets(words, byte_ends).flat_values - token_starts
        token_word = tokens.value_rowids()
        pieces = self.preprocessor.tokenizer(tokens.flat_values)
        token = pieces.value_rowids()
        lengths = tf.gather(self.piece_lengths, pieces.flat_values)
        lengths = tf.where(tf.equal(lengths, _UNKNOWN_LENGTH), tf.gather(token_lengths, token), lengths)
        before = tf.concat([[0], tf.cumsum(lengths)], axis=0)
        starts = tf.gather(token_starts, token) + before[:-1] - tf.gather(before, tf.gather(pieces.row_splits, token))
        covered = tf.equal(tf.math.unsorted_segment_sum(lengths, token, tf.size(token_starts, out_type=tf.int64)),
                           token_lengths)
        changers = length_changers(self.preprocessor.do_lower_case)
        unchanged = ~tf.strings.regex_full_match(words, f"(?s).*{changers}.*")
        count = tf.math.unsorted_segment_sum(pieces.row_lengths(), token_word, num_words)
        return {
            "count": count,
            "first": tf.cumsum(count, exclusive=True),
            "starts": tf.concat([starts, [0]], axis=0),  # one more: a safe place to point at
            "lengths": tf.concat([lengths, [0]], axis=0),
            "regular": unchanged & (tf.math.unsorted_segment_min(tf.cast(covered, tf.int32), token_word, num_words) > 0),
        }

    # === 2. Windows ===
    def _windows(self, query_lengths: tf.Tensor, doc_splits: tf.Tensor) -> dict[str, tf.Tensor]:
        """Every window of every context: its example, first WordPiece (flat), length and row offset."""
        num_tokens = doc_splits[1:] - doc_splits[:-1]
        room = self.preprocessor.seq_length - query_lengths - 3
        past_first = (tf.maximum(num_tokens - room, 0) + self.doc_stride - 1) // self.doc_stride
        counts = tf.where(num_tokens > 0, 1 + past_first, 0)
        index = tf.ragged.range(counts)
        example = index.value_rowids()
        start = index.flat_values * self.doc_stride
        length = tf.minimum(tf.gather(num_tokens, example) - start, tf.gather(room, example))
        return {"example": example, "first": tf.gather(doc_splits, example) + start, "length": length,
                "offset": tf.gather(query_lengths, example) + 2, "count": counts}

    def _logits(self, query: tf.RaggedTensor, doc_ids: tf.Tensor, windows: dict[str, tf.Tensor]) -> dict:
        """The model's start and end logits of every window's row, and the max-context mask of its tokens."""
        positions = tf.ragged.range(windows["length"])
        tokens = positions + tf.expand_dims(windows["first"], 1)
        inputs = self.preprocessor.pack([tf.gather(query, windows["example"]), tf.gather(doc_ids, tokens)])
        outputs = self.preprocessor.call_by_length(self.model, inputs, LOGITS_SPEC, self.jit_compile)
        real = tf.cast(inputs["input_mask"], tf.bool)
        return {
            "start": outputs["start_logits"],
            "end": outputs["end_logits"],
            "real": real,
            "max_context": self._max_context(positions, tokens).to_tensor(False),
        }

    @staticmethod
    def _max_context(positions: tf.RaggedTensor, tokens: tf.RaggedTensor) -> tf.RaggedTensor:
        """Whether each window is the one with the most context for each of its tokens (the first of equals)."""
        row = positions.value_rowids()
        place = positions.flat_values
        length = tf.gather(positions.row_lengths(), row)
        score = tf.cast(tf.minimum(place, length - 1 - place), tf.float64) + 0.01 * tf.cast(length, tf.float64)
        token = tokens.flat_values
        num_tokens = tf.reduce_max(tf.concat([[-1], token], axis=0)) + 1
        best = tf.math.unsorted_segment_max(score, token, num_tokens)
        winner = tf.math.unsorted_segment_min(tf.where(tf.equal(score, tf.gather(best, token)), row,
                                                       tf.int64.max), token, num_tokens)
        return positions.with_flat_values(tf.equal(row, tf.gather(winner, token)))

    # === 3. Candidates ===
    def _candidates(self, logits: dict, windows: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """The valid spans of every row, in the original's order (rows, then starts, then ends)."""
        k = tf.minimum(self.config.n_best_size, tf.shape(logits["start"])[1])
        hidden = tf.fill(tf.shape(logits["start"]), float("-inf"))
        _, starts = tf.math.top_k(tf.where(logits["real"], logits["start"], hidden), k)
        _, ends = tf.math.top_k(tf.where(logits["real"], logits["end"], hidden), k)
        starts, ends = tf.cast(starts, tf.int64), tf.cast(ends, tf.int64)
        first = windows["offset"][:, None]
        last = first + windows["length"][:, None] - 1
        start_in = (starts >= first) & (starts <= last)
        end_in = (ends >= first) & (ends <= last)
        start_place = tf.clip_by_value(starts - first, 0, tf.maximum(windows["length"][:, None] - 1, 0))
        max_context = tf.gather(logits["max_context"], start_place, batch_dims=1)
        s, e = starts[:, :, None], ends[:, None, :]
        valid = ((start_in & max_context)[:, :, None] & end_in[:, None, :] & (e >= s)
                 & (e - s + 1 <= self.config.max_answer_length))
        found = tf.where(valid)
        row = found[:, 0]
        start = tf.gather_nd(starts, found[:, :2])
        end = tf.gather_nd(ends, tf.stack([row, found[:, 2]], axis=1))
        shift = tf.gather(windows["first"] - windows["offset"], row)
        return {
            "example": tf.gather(windows["example"], row),
            "start_logit": tf.gather_nd(logits["start"], tf.stack([row, start], axis=1)),
            "end_logit": tf.gather_nd(logits["end"], tf.stack([row, end], axis=1)),
            "first_token": start + shift,
            "last_token": end + shift,
        }

    @staticmethod
    def _span_texts(context: tf.Tensor, doc: dict[str, tf.Tensor], spans: dict[str, tf.Tensor]) -> dict:
        """Each span's characters in its context (its whole words where `get_final_text` falls back)."""
        first, last = spans.pop("first_token"), spans.pop("last_token")
        first_word, last_word = tf.gather(doc["word"], first), tf.gather(doc["word"], last)
        whole_words = ((_count_between(doc["irregular_word"], first_word, last_word) > 0)
                       | (_count_between(doc["unknown"], first, last) > 0))
        start = tf.where(whole_words, tf.gather(doc["word_starts"], first_word), tf.gather(doc["starts"], first))
        end = tf.where(whole_words, tf.gather(doc["word_ends"], last_word), tf.gather(doc["ends"], last))
        characters = tf.strings.substr(tf.gather(context, spans["example"]), start, end - start, unit="UTF8_CHAR")
        return {"text": tf.strings.regex_replace(characters, WHITESPACE_RUN, " "), "start": start, "end": end,
                "null": tf.zeros_like(start, tf.bool)}

    def _null(self, logits: dict, windows: dict[str, tf.Tensor], batch: tf.Tensor) -> dict[str, tf.Tensor]:
        """SQuAD 2.0: each example's null candidate (the window with the lowest [CLS] score) and null score."""
        # [:, :1], not [:, 0]: a batch without any window has rows of no position at all.
        start, end = (tf.reshape(logits[name][:, :1], [-1]) for name in ("start", "end"))
        score = tf.cast(start, tf.float64) + tf.cast(end, tf.float64)
        example = windows["example"]
        lowest = tf.math.unsorted_segment_min(score, example, batch)
        window = _segment_first(tf.equal(score, tf.gather(lowest, example)), example, batch)
        has_window = windows["count"] > 0
        zeros = tf.zeros([batch], tf.int64)
        return {
            "example": tf.range(batch),
            "start_logit": _pick(start, window, 0.0),
            "end_logit": _pick(end, window, 0.0),
            "text": tf.fill([batch], ""),
            "start": zeros,
            "end": zeros,
            "null": tf.ones([batch], tf.bool),
            "null_score": tf.where(has_window, lowest, NO_WINDOW_NULL_SCORE),
        }

    # === 4. The n best and the answer ===
    def _answers(self, candidates: dict[str, tf.Tensor], null: dict | None, batch: tf.Tensor) -> dict:
        null_score = None if null is None else null["null_score"]
        score = tf.cast(candidates["start_logit"], tf.float64) + tf.cast(candidates["end_logit"], tf.float64)
        # Stable sorts: by score (descending), then by example; equal scores keep the original's order.
        order = tf.argsort(-score, stable=True)
        order = tf.gather(order, tf.argsort(tf.gather(candidates["example"], order), stable=True))
        ranked = {key: tf.gather(value, order) for key, value in candidates.items()}
        ranked["score"] = tf.gather(score, order)
        # The first of each text per example (the null answer is one of its own).
        key = tf.strings.join([tf.strings.as_string(ranked["example"]),
                               tf.where(ranked["null"], "null", tf.strings.join(["text:", ranked["text"]]))], "\x00")
        _, text_index = tf.unique(key, out_idx=tf.int64)
        size = tf.size(key, out_type=tf.int64)
        first = tf.math.unsorted_segment_min(tf.range(size), text_index, tf.reduce_max(tf.concat([[-1], text_index], 0)) + 1)
        distinct = {name: tf.boolean_mask(value, tf.equal(tf.range(size), tf.gather(first, text_index)))
                    for name, value in ranked.items()}
        example = distinct["example"]
        count = tf.size(example, out_type=tf.int64)
        rank = tf.range(count) - tf.gather(_segment_first(tf.ones([count], tf.bool), example, batch), example)
        nbest = {name: tf.boolean_mask(value, (rank < self.config.n_best_size) | distinct["null"])
                 for name, value in distinct.items()}
        probability = self._softmax(nbest["score"], nbest["example"], batch)
        if null is None:
            best = _segment_first(tf.ones_like(nbest["null"]), nbest["example"], batch)
            return {"answer": _pick(nbest["text"], best, ""),
                    "start": tf.cast(_pick(nbest["start"], best, 0), tf.int32),
                    "end": tf.cast(_pick(nbest["end"], best, 0), tf.int32),
                    # No valid span at all: the original's lone "empty" entry, probability 1.
                    "score": tf.cast(_pick(probability, best, 1.0), tf.float32)}
        best = _segment_first(~nbest["null"], nbest["example"], batch)
        null_entry = _segment_first(nbest["null"], nbest["example"], batch)
        has_span = best < tf.size(nbest["null"], out_type=tf.int64)
        difference = tf.where(
            has_span,
            null_score - tf.cast(_pick(nbest["start_logit"], best, 0.0), tf.float64)
            - tf.cast(_pick(nbest["end_logit"], best, 0.0), tf.float64),
            null_score,
        )
        answered = has_span & ~(difference > self.config.null_score_diff_threshold)
        return {
            "answer": tf.where(answered, _pick(nbest["text"], best, ""), ""),
            "start": tf.cast(tf.where(answered, _pick(nbest["start"], best, 0), 0), tf.int32),
            "end": tf.cast(tf.where(answered, _pick(nbest["end"], best, 0), 0), tf.int32),
            "score": tf.cast(tf.where(answered, _pick(probability, best, 0.0), _pick(probability, null_entry, 1.0)),
                             tf.float32),
            "has_answer": answered,
            "null_score_diff": tf.cast(difference, tf.float32),
        }

    @staticmethod
    def _softmax(score: tf.Tensor, example: tf.Tensor, batch: tf.Tensor) -> tf.Tensor:
        """Probabilities of the scores of each example (float64, max-shifted, as `postprocess.softmax`)."""
        shifted = tf.exp(score - tf.gather(tf.math.unsorted_segment_max(score, example, batch), example))
        return shifted / tf.gather(tf.math.unsorted_segment_sum(shifted, example, batch), example)
