"""The original BERT tokenizer as TensorFlow graph ops, for whole batches of text.

`FastBertTokenizer` gives the same WordPiece ids as `bert_tf.tokenization.FullTokenizer`
(and so as Google's original) for every input, as a `tf.Module` that runs inside
`tf.data` and in a SavedModel, with no Python per text.

Each text takes one of two paths, both exact:

- The string path (nearly every text): a few whole-string ops (RE2 deletion of the
  characters the original cleans away; for uncased vocabularies ICU lower-casing,
  NFD and RE2 removal of the Mn marks) and then `tf_text.FastWordpieceTokenizer`,
  which splits words on whitespace, punctuation and CJK itself, in C++. These ops
  follow ICU's and RE2's Unicode versions and rules, not Python's; so every code
  point is run through them in the probe `a<c>a` and compared with what the original
  makes of it (at the first construction for a Python, TensorFlow and tensorflow-text
  build and locale; the tables are then read from a cache file, see `cache_dir`). The
  code points that disagree (new characters that one Unicode version knows and the
  other doesn't), together with the two cases where the original is not "one
  character at a time" (the final sigma of `str.lower()`, and NFD reordering of non-Mn
  combining marks), send a text to the exact path. So do invalid
  UTF-8 and words longer than the length limit in bytes, which the string path cannot
  judge in characters. None of the shared corpora has such a text.
- The exact path: the text as code points, each looked up in a table computed from
  Python's own `unicodedata` through `tokenization.char_pieces` (what the original
  makes of that character alone), the context cases resolved with vectorised ops,
  words cut from the per-character kinds, and FastWordpieceTokenizer on those words.

"The original" is the original run by the Python that builds the tokenizer (Unicode
14 for Python 3.11): a SavedModel keeps that Python's tables.

Example:
>>> import tempfile, os
>>> tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", ",", "!"]
>>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
>>> _ = open(path, "w", encoding="utf-8").write("\\n".join(tokens) + "\\n")
>>> tokenizer = FastBertTokenizer(path, do_lower_case=True)
>>> tokenizer(tf.constant(["UNaffable, Unaffäble!", "", "ΣΑΣ"])).to_list()
[[5, 6, 7, 8, 5, 6, 7, 9], [], [1]]
>>> tokenizer.tokenize_to_ids(["unaffable"])
[[5, 6, 7]]
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pathlib
import sys
import tempfile
import unicodedata
from collections.abc import Iterable, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf import tokenization

_NUM_CODE_POINTS = 0x110000
_SURROGATES = range(0xD800, 0xE000)
_CAPITAL_SIGMA, _SMALL_SIGMA, _FINAL_SIGMA = 0x3A3, 0x3C3, 0x3C2

# Layout of one entry of the exact path's code point table (int32):
#   bits 0-20   payload: the output code point, or an index into the expansion table
#   bits 21-22  kind: WORD, SOLO or SPACE of `tokenization`, or _DELETED
#   bit  23     _EXPAND: the code point gives several characters (payload = index)
#   bit  24     _REORDER: its NFD holds a non-Mn combining mark (canonical reordering)
#   bits 25-26  its part in the final-sigma rule: _TRANSPARENT, _CASED or _OTHER
_KIND_SHIFT = 21
_PAYLOAD_MASK = (1 << _KIND_SHIFT) - 1
_DELETED = 3
_EXPAND = 1 << 23
_REORDER = 1 << 24
_SIGMA_SHIFT = 25
_TRANSPARENT, _CASED, _OTHER = 0, 1, 2
# Payload, kind and _EXPAND: what an entry means once flags and sigma bits are dropped.
_ENTRY_MASK = (1 << 24) - 1
_EXPAND_OR_DELETED = _DELETED << _KIND_SHIFT  # Masked entries at or above this do either.


# ---------------------------------------------------------------------------------------
# Tables, computed from Python's `unicodedata` (once per build: see the cache below).


@functools.lru_cache(maxsize=1)
def _code_points_to_compute() -> tuple[int, ...]:
    """Code points whose treatment may differ from "itself, a word character".

    Unassigned, private-use and surrogate code points are left alone by every step of
    the original, except inside the CJK ranges, which are split off regardless.
    """
    cjk = {cp for low, high in tokenization.CJK_RANGES for cp in range(low, high + 1)}
    return tuple(
        cp for cp in range(_NUM_CODE_POINTS) if cp in cjk or unicodedata.category(chr(cp)) not in ("Cn", "Co", "Cs")
    )


@functools.lru_cache(maxsize=2)
def _pieces(do_lower_case: bool) -> dict[int, tuple[tuple[str, int], ...]]:
    """`tokenization.char_pieces` of every code point of `_code_points_to_compute`."""
    return {cp: tokenization.char_pieces(chr(cp), do_lower_case) for cp in _code_points_to_compute()}


@functools.lru_cache(maxsize=1)
def _context_code_points() -> frozenset[int]:
    """The code points for which `tokenization.needs_context` holds."""
    return frozenset(cp for cp in _code_points_to_compute() if tokenization.needs_context(chr(cp)))


def _entry(cp: int, kind: int) -> int:
    return cp | kind << _KIND_SHIFT


def _sigma_role(cp: int) -> int:
    """Where `chr(cp)` stands in Python's final-sigma rule, found by asking `str.lower()`.

    Python lower-cases `Σ` to `ς` when a cased letter precedes it (skipping
    case-ignorable characters) and none follows it. Neither property is exposed by
    `unicodedata`, so we probe: `ch + Σ` is final only if `ch` is cased and not
    ignorable; `A + ch + Σ` is final if `ch` is cased or ignorable.
    """
    ch = chr(cp)
    if not _pieces(True)[cp]:
        return _TRANSPARENT  # Cleaned away before lower-casing ever sees it.
    if tokenization.is_word_separator(ch) or tokenization.is_cjk(cp):
        return _OTHER  # They end the word that `str.lower()` sees.
    if (ch + "\u03a3").lower()[-1] == "\u03c2":
        return _CASED
    if ("A" + ch + "\u03a3").lower()[-1] == "\u03c2":
        return _TRANSPARENT
    return _OTHER


def _ragged_table(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`rows` as (starts, lengths, values), each with a dummy element (an empty row at
    the end, a value at the start) so that gathering at index 0 is always valid, even
    when there are no rows: `tf.where` computes both of its sides."""
    lengths = np.array([len(row) for row in rows] + [0], dtype=np.int32)
    starts = (1 + np.cumsum(lengths) - lengths).astype(np.int32)
    values = np.array([0] + [v for row in rows for v in row], dtype=np.int32)
    return starts, lengths, values


@functools.lru_cache(maxsize=2)
def _tables(do_lower_case: bool) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The exact path's code point table, and the ragged table of its expansions."""
    table = np.arange(_NUM_CODE_POINTS, dtype=np.int32) | np.int32(_OTHER << _SIGMA_SHIFT)
    expansions: list[list[int]] = []
    for cp, pieces in _pieces(do_lower_case).items():
        if not pieces:
            entry = _entry(0, _DELETED)
        elif len(pieces) == 1:
            entry = _entry(ord(pieces[0][0]), pieces[0][1])
        else:
            entry = _EXPAND | len(expansions)
            expansions.append([_entry(ord(c), kind) for c, kind in pieces])
        if do_lower_case:
            entry |= _sigma_role(cp) << _SIGMA_SHIFT
            if cp != _CAPITAL_SIGMA and cp in _context_code_points():
                entry |= _REORDER
        table[cp] = entry
    return table, _ragged_table(expansions)


@functools.lru_cache(maxsize=1)
def _reorder_tables() -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray, np.ndarray]:
    """For the canonical-reordering branch (lower-casing only).

    Returns the code points whose "clean, lower-case, NFD" (Mn kept) is not themselves,
    with those results as a ragged table; and the code points that are combining or
    Mn, with `2 * combining class + is_mn` for each.
    """
    keys, rows, mark_keys, mark_values = [], [], [], []
    for cp, pieces in _pieces(False).items():
        ch = chr(cp)
        if not pieces or pieces[0][1] == tokenization.SPACE:
            full = [c for c, _ in pieces]  # Cleaned away, or whitespace.
        else:
            full = list(unicodedata.normalize("NFD", ch.lower()))
        if full != [ch]:
            keys.append(cp)
            rows.append([ord(c) for c in full])
        ccc, is_mn = unicodedata.combining(ch), unicodedata.category(ch) == "Mn"
        if ccc or is_mn:
            mark_keys.append(cp)
            mark_values.append(2 * ccc + is_mn)
    return np.array(keys, np.int64), _ragged_table(rows), np.array(mark_keys, np.int64), np.array(mark_values, np.int64)


def char_class(code_points: Iterable[int]) -> str:
    """An RE2 character class of exactly `code_points` (as ranges)."""
    ranges: list[list[int]] = []
    for cp in sorted(code_points):
        if ranges and cp == ranges[-1][1] + 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return "[" + "".join(f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in ranges) + "]"


@functools.lru_cache(maxsize=1)
def _string_path_code_points() -> tuple[np.ndarray, np.ndarray]:
    """The characters the original cleans away, and the Mn marks."""
    cleaned = [cp for cp, pieces in _pieces(False).items() if not pieces]
    marks = [cp for cp in _code_points_to_compute() if unicodedata.category(chr(cp)) == "Mn"]
    return np.array(cleaned, np.int32), np.array(marks, np.int32)


def _string_path_classes(cleaned: np.ndarray, marks: np.ndarray) -> tuple[str, str]:
    """RE2 classes of `_string_path_code_points`."""
    return char_class(cleaned.tolist()), char_class(marks.tolist())


def _normalize_strings(texts: tf.Tensor, do_lower_case: bool, classes: tuple[str, str]) -> tf.Tensor:
    """The string path's normalisation: clean, then lower-case + NFD + strip Mn
    (`classes`: `_string_path_classes`).

    Texts must be valid UTF-8. Lower-casing ASCII texts needs neither ICU nor NFD.
    ICU lower-cases for the process's locale: ASCII letters are lower-cased before it
    sees them, so that its Turkish rule (I to dotless ı) never applies; its other
    locale rules (Lithuanian, and Turkish İ) only add or drop marks, which are stripped.
    """
    cleaned, marks = classes
    # Also removes NUL, before ICU's lower-casing would stop at it.
    texts = tf.strings.regex_replace(texts, cleaned, "")
    if not do_lower_case:
        return texts
    is_ascii = tf.cast(tf.equal(tf.strings.length(texts), tf.strings.length(texts, unit="UTF8_CHAR")), tf.int32)
    other, ascii_ = tf.dynamic_partition(texts, is_ascii, 2)
    other_rows, ascii_rows = tf.dynamic_partition(tf.range(tf.size(texts)), is_ascii, 2)
    other = tf.strings.lower(tf.strings.lower(other), encoding="utf-8")
    other = tf.strings.regex_replace(tf_text.normalize_utf8(other, "NFD"), marks, "")
    return tf.dynamic_stitch([other_rows, ascii_rows], [other, tf.strings.lower(ascii_)])


def _probe_words(probes: list[str], do_lower_case: bool) -> list[str]:
    """The words the string path cuts each probe into, joined by spaces."""
    # Every word becomes one token (no "##" piece matches), so offsets give the words.
    splitter = tf_text.FastWordpieceTokenizer(vocab=["[UNK]", "a"], no_pretokenization=False)
    classes = _string_path_classes(*_string_path_code_points())
    normalized = _normalize_strings(tf.constant(probes), do_lower_case, classes)
    _, starts, ends = splitter.tokenize_with_offsets(normalized)
    words = tf.strings.substr(
        tf.gather(normalized, starts.value_rowids()), starts.flat_values, ends.flat_values - starts.flat_values
    )
    joined = tf.strings.reduce_join(starts.with_flat_values(words), axis=1, separator=" ")
    return [text.decode("utf-8") for text in joined.numpy()]


@functools.lru_cache(maxsize=2)
def _unsafe_code_points(do_lower_case: bool, chunk: int = 256) -> tuple[int, ...]:
    """The code points that send a text to the exact path (see the module docstring).

    The computed code points are probed one by one. The others, which the original
    leaves alone, are probed `chunk` at a time as one word, which the string path must
    leave alone too; a chunk where it does not (characters that ICU or RE2 know and
    Python does not) is unsafe as a whole, since their NFD reordering, if any, is not
    known here.
    """
    computed = _pieces(do_lower_case)
    probes = [f"a{chr(cp)}a" for cp in computed]
    expected = [" ".join(f"a{tokenization.pieces_to_text(pieces)}a".split()) for pieces in computed.values()]
    others = [cp for cp in range(_NUM_CODE_POINTS) if cp not in computed and cp not in _SURROGATES]
    chunks = [others[start : start + chunk] for start in range(0, len(others), chunk)]
    chunk_probes = ["a" + "".join(map(chr, cps)) + "a" for cps in chunks]
    words = _probe_words(probes + chunk_probes, do_lower_case)
    unsafe = set(_SURROGATES)  # Not valid in UTF-8: RE2 accepts them, Python does not.
    unsafe.update(cp for cp, got, want in zip(computed, words, expected) if got != want)
    for cps, got, want in zip(chunks, words[len(probes) :], chunk_probes):
        if got != want:
            unsafe.update(cps)
    if do_lower_case:
        unsafe.update(_context_code_points())
    return tuple(sorted(unsafe))


# ---------------------------------------------------------------------------------------
# The tables on disk. Computing them takes seconds (Python over every code point, then
# the probe through TensorFlow's ops), every process, for every export and every
# preprocessing layer. They depend only on the code that computes them, the Python that
# runs it, and the TensorFlow / tensorflow-text builds whose ops the probe asks (and the
# locale, which ICU reads): all of these are in the file's name. A missing, damaged or unwritable cache only costs the
# seconds again: it is never an error.

_ARRAY_NAMES = ("unsafe", "table", "expansion_starts", "expansion_lengths", "expansion_values", "cleaned", "marks")
_REORDER_NAMES = ("nfd_keys", "nfd_starts", "nfd_lengths", "nfd_values", "mark_keys", "mark_values")


def _source_digest() -> str | None:
    """The sources of the code that computes the tables, as imported: hashed at import, so
    that a file edited under a running process cannot name tables its old code computed."""
    try:
        sources = [pathlib.Path(path).read_bytes() for path in (tokenization.__file__, __file__)]
    except (OSError, TypeError):  # Frozen or zip-imported: no cache.
        return None
    return hashlib.sha256(b"\0".join(sources)).hexdigest()


_SOURCE_DIGEST = _source_digest()


def cache_dir() -> pathlib.Path:
    """Where the tables are kept: `$BERT_TF_CACHE`, else `$XDG_CACHE_HOME/bert_tf` (if
    absolute), else `~/.cache/bert_tf`."""
    if os.environ.get("BERT_TF_CACHE"):
        return pathlib.Path(os.environ["BERT_TF_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (pathlib.Path(xdg) if os.path.isabs(xdg) else pathlib.Path.home() / ".cache") / "bert_tf"


def _tables_file(do_lower_case: bool) -> pathlib.Path | None:
    """The cache file of these tables, or None where there can be none."""
    if _SOURCE_DIGEST is None:
        return None
    locale = [os.environ.get(name, "") for name in ("LC_ALL", "LC_CTYPE", "LANG")]
    builds = (sys.version, tf.__version__, tf.version.GIT_VERSION, tf_text.__version__, *locale, _SOURCE_DIGEST)
    digest = hashlib.sha256("|".join(builds).encode()).hexdigest()[:16]
    try:
        folder = cache_dir()
    except RuntimeError:  # No home directory (no $HOME, a uid without a passwd entry).
        return None
    return folder / f"fast_tokenizer_{'uncased' if do_lower_case else 'cased'}_{digest}.npz"


def _table_names(do_lower_case: bool) -> tuple[str, ...]:
    return _ARRAY_NAMES + (_REORDER_NAMES if do_lower_case else ())


def _compute_tables(do_lower_case: bool) -> dict[str, np.ndarray]:
    table, expansions = _tables(do_lower_case)
    arrays = [np.array(_unsafe_code_points(do_lower_case), np.int32), table, *expansions, *_string_path_code_points()]
    if do_lower_case:
        keys, nfd, mark_keys, mark_values = _reorder_tables()
        arrays += [keys, *nfd, mark_keys, mark_values]
    return dict(zip(_table_names(do_lower_case), arrays, strict=True))


def _read_tables(path: pathlib.Path, do_lower_case: bool) -> dict[str, np.ndarray] | None:
    """The tables of a cache file, or None if it is missing, damaged or not of this shape."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            tables = {name: stored[name] for name in _table_names(do_lower_case)}
    except Exception:  # noqa: BLE001 (zip, zlib, numpy and OS errors alike: recompute)
        return None
    return tables if tables["table"].shape == (_NUM_CODE_POINTS,) else None


def _write_tables(path: pathlib.Path, tables: dict[str, np.ndarray]) -> None:
    """Writes under a unique temporary name beside `path`, then renames: a reader sees the
    whole file or none, and two writers (even with the same pid, in two containers
    sharing the folder) never write into the same file."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(handle, "wb") as file:
                np.savez_compressed(file, **tables)  # (a file name would get ".npz" appended)
            os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide it from the folder's other users
            os.replace(temporary, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(temporary)


@functools.lru_cache(maxsize=2)
def _construction_tables(do_lower_case: bool) -> dict[str, np.ndarray]:
    """Every table the constructor needs: from the cache file, else computed (and written there)."""
    path = _tables_file(do_lower_case)
    tables = _read_tables(path, do_lower_case) if path is not None else None
    if tables is None:
        tables = _compute_tables(do_lower_case)
        if path is not None:
            _write_tables(path, tables)
    return tables


def _static_table(keys: np.ndarray, values: np.ndarray, default: int) -> tf.lookup.StaticHashTable:
    initializer = tf.lookup.KeyValueTensorInitializer(keys, values)
    return tf.lookup.StaticHashTable(initializer, default_value=default)


def _wordpiece_vocab(vocab: dict[str, int]) -> list[str]:
    """The vocabulary as FastWordpieceTokenizer wants it: a list, token i at index i.

    Ids that no token maps to (the earlier line of a repeated token, like in the
    original), the empty token and a bare "##" (which the original can never output:
    every piece has a character) get a filler with U+FFFD, which no word contains.
    """
    tokens = [f"\ufffdunused{index}" for index in range(max(vocab.values()) + 1)]
    for token, index in vocab.items():
        if token not in ("", "##"):
            tokens[index] = token
    return tokens


# ---------------------------------------------------------------------------------------
# Graph helpers.


def _row_ids(row_splits: tf.Tensor) -> tf.Tensor:
    """`RaggedTensor.value_rowids()` as int32, without its `tf.repeat`, whose cost grows
    with the longest row times the number of rows."""
    num_values = tf.cast(row_splits[-1], tf.int32)
    starts = tf.math.bincount(tf.cast(row_splits[1:-1], tf.int32), minlength=num_values, maxlength=num_values)
    return tf.cumsum(starts)


def _spell_out(
    lengths: tf.Tensor, starts: tf.Tensor, table_values: tf.Tensor, singles: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """Replaces input j by `lengths[j]` elements: `table_values[starts[j]:][:lengths[j]]`
    when `starts[j] >= 0`, else `singles[j]` (then `lengths[j]` is 0 or 1).

    Returns the elements and, for each, the index of the input it came from.
    """
    row_splits = tf.concat([tf.zeros([1], tf.int32), tf.cumsum(lengths)], axis=0)
    source = _row_ids(row_splits)
    offsets = tf.range(tf.size(source)) - tf.gather(row_splits, source)
    source_starts = tf.gather(starts, source)
    from_table = tf.gather(table_values, tf.maximum(source_starts, 0) + offsets)
    return tf.where(source_starts >= 0, from_table, tf.gather(singles, source)), source


def _shifted_right(x: tf.Tensor, first: bool | int) -> tf.Tensor:
    """`x[i - 1]` at each position i, and `first` at position 0."""
    return tf.concat([tf.fill([1], tf.constant(first, x.dtype)), x], axis=0)[:-1]


class FastBertTokenizer(tf.Module):
    """Batched, exact BERT tokenization: strings `[batch]` to ids `[batch, (tokens)]`.

    The first construction for a Python, TensorFlow and tensorflow-text takes a few
    seconds (the tables and the probe of every code point); the tables are then kept
    in `cache_dir()` (`$BERT_TF_CACHE`, default `~/.cache/bert_tf`), which later
    processes read in milliseconds. A SavedModel of it loads without either.

    Args:
        vocab_file: a BERT `vocab.txt`.
        do_lower_case: lower-case and strip accents, as for the uncased models.
        max_input_chars_per_word: longer words become `[UNK]` (the original's 200).
    """

    def __init__(
        self, vocab_file: str | os.PathLike, do_lower_case: bool = True, max_input_chars_per_word: int = 200
    ):
        super().__init__(name="fast_bert_tokenizer")
        vocab = tokenization.load_vocab(vocab_file)
        tokenization.validate_vocab(vocab, vocab_file)
        self.do_lower_case = do_lower_case
        self.max_input_chars_per_word = max_input_chars_per_word
        self.unk_token = "[UNK]"
        self._unk_id = vocab[self.unk_token]
        wordpiece_vocab = _wordpiece_vocab(vocab)
        # String path. A word of at most `max_input_chars_per_word` bytes has at most
        # that many characters; a longer one comes out as [UNK] and is re-judged by
        # the exact path.
        tables = _construction_tables(do_lower_case)
        self._safe_pattern = "[^" + char_class(tables["unsafe"].tolist())[1:] + "*"
        self._classes = _string_path_classes(tables["cleaned"], tables["marks"])
        self._end_to_end = tf_text.FastWordpieceTokenizer(
            vocab=wordpiece_vocab,
            max_bytes_per_word=max_input_chars_per_word,
            token_out_type=tf.int64,
            unknown_token=self.unk_token,
        )
        # Exact path.
        self._table = tf.constant(tables["table"])
        self._expansion_starts = tf.constant(tables["expansion_starts"])
        self._expansion_lengths = tf.constant(tables["expansion_lengths"])
        self._expansion_values = tf.constant(tables["expansion_values"])
        if do_lower_case:
            keys = tables["nfd_keys"]
            self._nfd_index = _static_table(keys, np.arange(len(keys), dtype=np.int64), -1)
            self._nfd_starts = tf.constant(tables["nfd_starts"])
            self._nfd_lengths = tf.constant(tables["nfd_lengths"])
            self._nfd_values = tf.constant(tables["nfd_values"])
            self._marks = _static_table(tables["mark_keys"], tables["mark_values"], 0)
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=wordpiece_vocab,
            # The exact path applies the character limit itself, before this; the byte
            # limit only has to let every word within it through.
            max_bytes_per_word=4 * max_input_chars_per_word,
            token_out_type=tf.int64,
            unknown_token=self.unk_token,
            no_pretokenization=True,
        )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)  # plain ops and tf.cond
    def __call__(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """WordPiece ids of each text (UTF-8 bytes): int64 `[batch, (tokens)]`."""
        safe = tf.strings.regex_full_match(texts, self._safe_pattern)
        string_rows = tf.where(safe)[:, 0]
        ids, redo = self._string_path_ids(tf.gather(texts, string_rows))
        exact_rows = tf.concat([tf.where(~safe)[:, 0], tf.boolean_mask(string_rows, redo)], axis=0)

        def merged() -> tf.RaggedTensor:
            kept = tf.where(~redo)[:, 0]
            all_ids = tf.concat([tf.gather(ids, kept), self._exact_ids(tf.gather(texts, exact_rows))], axis=0)
            order = tf.concat([tf.gather(string_rows, kept), exact_rows], axis=0)
            return tf.gather(all_ids, tf.math.invert_permutation(order))

        return tf.cond(tf.size(exact_rows) > 0, merged, lambda: ids)

    def tokenize_to_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Eager convenience: a list of texts to lists of ids."""
        ids = self(tf.constant([text.encode("utf-8") for text in texts], tf.string))
        # Much faster than `RaggedTensor.to_list()`.
        values, splits = ids.flat_values.numpy().tolist(), ids.row_splits.numpy().tolist()
        return [values[start:end] for start, end in zip(splits, splits[1:])]

    # String path -----------------------------------------------------------------------

    def _string_path_ids(self, texts: tf.Tensor) -> tuple[tf.RaggedTensor, tf.Tensor]:
        """The ids of the string path, and which texts it could not judge."""
        normalized = _normalize_strings(texts, self.do_lower_case, self._classes)
        ids, starts, ends = self._end_to_end.tokenize_with_offsets(normalized)
        too_long = tf.equal(ids.flat_values, self._unk_id) & (
            ends.flat_values - starts.flat_values > self.max_input_chars_per_word
        )
        positions = tf.where(too_long)[:, 0]
        rows = tf.searchsorted(ids.row_splits, positions, side="right", out_type=tf.int64) - 1
        hits = tf.scatter_nd(tf.expand_dims(rows, 1), tf.ones(tf.shape(rows), tf.int32), tf.shape(texts, tf.int64))
        return ids, hits > 0

    # Exact path ------------------------------------------------------------------------

    def _exact_ids(self, texts: tf.Tensor) -> tf.RaggedTensor:
        # Invalid UTF-8 becomes U+FFFD, which is then cleaned away: the same as the
        # original's `decode("utf-8", "ignore")`.
        code_points = tf.strings.unicode_decode(texts, "UTF-8", errors="replace")
        values = code_points.flat_values
        rows = _row_ids(code_points.row_splits)
        entries = tf.gather(self._table, values)
        if self.do_lower_case:
            values, entries = tf.cond(
                tf.reduce_any(tf.equal(values, _CAPITAL_SIGMA)),
                lambda: self._resolve_sigmas(values, entries, rows),
                lambda: (values, entries),
            )
            chars, rows = tf.cond(
                tf.reduce_any(tf.not_equal(tf.bitwise.bitwise_and(entries, _REORDER), 0)),
                lambda: self._reordered_chars(values, rows),
                lambda: self._chars(entries, rows),
            )
        else:
            chars, rows = self._chars(entries, rows)
        return self._word_ids(chars, rows, tf.cast(code_points.nrows(), tf.int32))

    def _resolve_sigmas(self, values: tf.Tensor, entries: tf.Tensor, rows: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Replaces each `Σ` by `ς` or `σ`, as `str.lower()` does on the word around it."""
        roles = tf.bitwise.right_shift(entries, _SIGMA_SHIFT)
        is_visible = tf.not_equal(roles, _TRANSPARENT)
        visible = tf.cast(tf.where(is_visible)[:, 0], tf.int32)
        visible_rows = tf.gather(rows, visible)
        visible_cased = tf.equal(tf.gather(roles, visible), _CASED)
        # The rank of each position among the visible ones. A sigma is visible: its
        # visible neighbours have its rank -1 and +1.
        rank = tf.cumsum(tf.cast(is_visible, tf.int32), exclusive=True)
        sigmas = tf.cast(tf.where(tf.equal(values, _CAPITAL_SIGMA))[:, 0], tf.int32)
        sigma_rank, sigma_rows = tf.gather(rank, sigmas), tf.gather(rows, sigmas)

        def cased_neighbour(neighbour_rank: tf.Tensor) -> tf.Tensor:
            inside = (neighbour_rank >= 0) & (neighbour_rank < tf.size(visible))
            safe = tf.clip_by_value(neighbour_rank, 0, tf.size(visible) - 1)
            same_row = tf.equal(tf.gather(visible_rows, safe), sigma_rows)
            return inside & same_row & tf.gather(visible_cased, safe)

        final = cased_neighbour(sigma_rank - 1) & ~cased_neighbour(sigma_rank + 1)
        replacements = tf.where(final, _FINAL_SIGMA, _SMALL_SIGMA)
        indices = tf.expand_dims(sigmas, 1)
        values = tf.tensor_scatter_nd_update(values, indices, replacements)
        entries = tf.tensor_scatter_nd_update(entries, indices, tf.gather(self._table, replacements))
        return values, entries

    def _chars(self, entries: tf.Tensor, rows: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The output characters (as entries) and their rows: expansions spelled out,
        deleted characters gone."""
        entries = tf.bitwise.bitwise_and(entries, _ENTRY_MASK)
        return tf.cond(
            tf.reduce_any(entries >= _EXPAND_OR_DELETED),
            lambda: self._expand(entries, rows),
            lambda: (entries, rows),
        )

    def _expand(self, entries: tf.Tensor, rows: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        expanding = entries >= _EXPAND
        index = tf.where(expanding, tf.bitwise.bitwise_and(entries, _PAYLOAD_MASK), 0)
        deleted = tf.equal(tf.bitwise.right_shift(entries, _KIND_SHIFT), _DELETED)
        lengths = tf.where(expanding, tf.gather(self._expansion_lengths, index), tf.cast(~deleted, tf.int32))
        starts = tf.where(expanding, tf.gather(self._expansion_starts, index), -1)
        chars, source = _spell_out(lengths, starts, self._expansion_values, entries)
        return chars, tf.gather(rows, source)

    def _reordered_chars(self, values: tf.Tensor, rows: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """`_chars` for texts where NFD's canonical reordering may matter.

        Spells out the full NFD (Mn included) of every character, sorts each run of
        combining characters by combining class (stably, as NFD does), and only then
        drops the Mn characters.
        """
        index = tf.cast(self._nfd_index.lookup(tf.cast(values, tf.int64)), tf.int32)
        known = index >= 0
        safe_index = tf.maximum(index, 0)
        lengths = tf.where(known, tf.gather(self._nfd_lengths, safe_index), 1)
        starts = tf.where(known, tf.gather(self._nfd_starts, safe_index), -1)
        code_points, source = _spell_out(lengths, starts, self._nfd_values, values)
        rows = tf.gather(rows, source)
        marks = tf.cast(self._marks.lookup(tf.cast(code_points, tf.int64)), tf.int32)
        combining_class = tf.bitwise.right_shift(marks, 1)
        # A run starts at every starter (class 0) and at every new text.
        run_starts = tf.equal(combining_class, 0) | tf.not_equal(rows, _shifted_right(rows, -1))
        runs = tf.cumsum(tf.cast(run_starts, tf.int64))
        order = tf.argsort(runs * 256 + tf.cast(combining_class, tf.int64), stable=True)
        kept = tf.gather(order, tf.where(tf.equal(tf.gather(marks, order) % 2, 0))[:, 0])
        # The kept characters are already lower-cased, NFD and mark-free: their table
        # entries are themselves, with their kind.
        entries = tf.bitwise.bitwise_and(tf.gather(self._table, tf.gather(code_points, kept)), _ENTRY_MASK)
        return entries, tf.gather(rows, kept)

    def _word_ids(self, chars: tf.Tensor, rows: tf.Tensor, num_rows: tf.Tensor) -> tf.RaggedTensor:
        """Cuts the characters into words and WordPiece-tokenizes them."""
        kinds = tf.bitwise.right_shift(chars, _KIND_SHIFT)
        is_space = tf.equal(kinds, tokenization.SPACE)
        is_solo = tf.equal(kinds, tokenization.SOLO)
        # A word starts at a non-space character that is solo, begins its text, or
        # follows a space or a solo character.
        after_break = _shifted_right(is_space | is_solo, True) | tf.not_equal(rows, _shifted_right(rows, -1))
        kept = tf.where(~is_space)[:, 0]
        word_starts = tf.cast(tf.where(tf.gather(is_solo | after_break, kept))[:, 0], tf.int32)
        word_splits = tf.concat([word_starts, tf.fill([1], tf.size(kept, out_type=tf.int32))], axis=0)
        words = tf.RaggedTensor.from_row_splits(
            tf.bitwise.bitwise_and(tf.gather(chars, kept), _PAYLOAD_MASK), word_splits, validate=False
        )
        strings = tf.strings.unicode_encode(words, "UTF-8")
        too_long = words.row_lengths() > self.max_input_chars_per_word
        pieces = self._wordpiece.tokenize(tf.where(too_long, self.unk_token, strings))
        # Pieces per text: the piece counts of its words, summed.
        word_rows = tf.gather(tf.gather(rows, kept), word_starts)
        counts = tf.math.unsorted_segment_sum(tf.cast(pieces.row_lengths(), tf.int32), word_rows, num_rows)
        splits = tf.concat([tf.zeros([1], tf.int32), tf.cumsum(counts)], axis=0)
        return tf.RaggedTensor.from_row_splits(pieces.flat_values, tf.cast(splits, tf.int64), validate=False)
