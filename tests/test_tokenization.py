"""Acceptance tests of the tokenizers: ids identical to the original BERT tokenizer.

The oracle is Model Garden's `official.nlp.tools.tokenization.FullTokenizer` (the
original's code) with the original's `max_input_chars_per_word = 200`. Both of our
paths are checked: `bert_tf.tokenization.FullTokenizer` (Python) and
`bert_tf.fast_tokenizer.FastBertTokenizer` (TF graph), with the uncased, cased and
Chinese vocabularies, on

- an adversarial set (control characters, final sigma, dotted I, CJK planes, NFD
  reordering, long words, invalid UTF-8...) and every code point in a word;
- the shared corpora (pre-training text, GLUE, SQuAD, CoNLL-2003, Chinese sets):
  every text against each other, and the oracle on every pre-training line and on a
  deterministic fifth of the rest, to stay CI-sized. `python -m bench.tokenizer`
  runs the oracle on every text (see its report in bench/results/tokenizer.json).
"""

from __future__ import annotations

import functools
import json
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from bert_tf.errors import BertTfError
from bert_tf.tokenization import (
    CJK_RANGES,
    BasicTokenizer,
    FullTokenizer,
    WordpieceTokenizer,
    load_vocab,
    validate_vocab,
)
from tests.conftest import data_dir, require_module, shared_file

# name -> (vocabulary file under the shared data, do_lower_case)
VOCABS = {
    "uncased": ("vocab/google_uncased_en_vocab.txt", True),
    "cased": ("vocab/google_cased_en_vocab.txt", False),
    "zh": ("vocab/google_zh_vocab.txt", True),
}
# The oracle sees every `ORACLE_STRIDE`-th distinct text of the corpora outside pretrain/.
ORACLE_STRIDE = 5

ADVERSARIAL = [
    "",
    " ",
    "\t\n\r  \u3000\u00a0",
    "a\tb\nc\rd",
    "a\u00a0b\u202fc\u2028d\u2029e\u1680f\u3000g",
    "\x00",
    "a\x00b",
    "a\ufffdb",
    "\x01\x02\x1f\x7f\x80\x9f",
    "a\x0bb\x0cc\x1cd\x1de\x1ef\x1fg\x85h",
    "a\u200bb\u200cc\u200dd\u2060e\ufeffF\u00adg\u200e\u200f",
    "👨\u200d👩\u200d👧 😀👍🏽 🇺🇸",
    "ＡＢＣ１２３！？ ｈｅｌｌｏ",
    "e\u0301 a\u0300\u0301\u0302 \u0301abc \u0301 \u0345",
    "Crème brûlée, naïve façade, Ångström, Øresund, Łódź",
    "ΟΔΟΣ ΣΑΣ Σ ΑΣ.Β ΑΣ\u0301 ΑΣ\u200dΒ Α\u00adΣ ΑΣ'Β ΑΣ1 ΣΣΣ Α\u0345Σ ΑΣ\u0345",
    "ὈΔΥΣΣΕΎΣ Ὀδυσσεύς",
    "İstanbul I ı İ i̇ IJ ǅ ǈ",
    "Straße ẞ STRASSE ß",
    "ﬁ ﬂ ﬀ Ⅻ ⅻ Å K ㎏ x² ½",
    "\U00020000\U0002A700\U0002B740\U0002B820\U0002CEB0\U0002F800\U00030000\u3400\u9fff",
    "\uf900\ufa6a\ufad9 \U0002F800\U0002FA1D compatibility",
    "한국어 조선말 カタカナ ひらがな ｶﾀｶﾅ",
    "Hello мир 世界 مرحبا שלום नमस्ते ไทย Ελληνικά",
    "ꦏ꧀ꦏ ꦲꦤꦕꦫꦏ꧀",
    "a\U0001D16D\U0001D165 a\u0301\U0001D16D\u0300\U0001D165 \U0001D160 \u302e\u302f \U00016FF0\U00016FF1",
    "\U00010570\U00010571 \u2c2f \U00011F43 \u1b4e \ue000 \U000E0080 \U0010FFFF \uffff \U000E0001",
    "¿¡«»“”‘’—–…·•§¶†‡※ $^`+<=>|~ #hash ##double",
    "[UNK] [CLS] [SEP] [MASK] [PAD]",
    "don't U.S.A. e-mail 3.14 1,000,000 C++ a/b",
    "a" * 199,
    "a" * 200,
    "a" * 201,
    "a" * 300,
    "é" * 200 + " " + "é" * 201,
    "ж" * 150 + " " + "ж" * 201 + " ok",
    "中" * 300,
    "ก" * 210,
    "x" * 250 + "," + "y" * 10,
]
# Bytes the fast path receives as they are; Python's `decode("utf-8", "ignore")` is the
# original's reading of them.
INVALID_UTF8 = [b"a\xffb", b"\xe4\xb8 ok", b"\xed\xa0\x80x", b"a\xc0\x80b", b"ok\xf4\x90\x80\x80ok", b"\xef\xbf\xbd"]


# --- Corpora ------------------------------------------------------------------------------


def _lines(path: Path) -> list[str]:
    # Split on "\n" only: other line breaks (\r, U+2028...) stay in the text as tests.
    return path.read_bytes().decode("utf-8").split("\n")


def _tsv_fields(paths: list[Path]) -> list[str]:
    return [field for path in paths for line in _lines(path) for field in line.split("\t")]


def _sentences(path: Path, separator: str) -> list[str]:
    """The first column of a CoNLL-style file (one token a line), joined per sentence."""
    sentences, tokens = [], []
    for line in _lines(path) + [""]:
        if line.strip():
            tokens.append(line.split(" ")[0])
        elif tokens:
            sentences.append(separator.join(tokens))
            tokens = []
    return sentences


def _squad(path: Path) -> list[str]:
    paragraphs = [p for article in json.loads(path.read_text(encoding="utf-8"))["data"] for p in article["paragraphs"]]
    return [text for p in paragraphs for text in [p["context"]] + [qa["question"] for qa in p["qas"]]]


def load_corpora(data: Path) -> dict[str, list[str]]:
    """Every text of the shared corpora, by corpus name, in file order."""
    corpora = {f"pretrain/{path.stem}": _lines(path) for path in sorted((data / "pretrain").glob("*.txt"))}
    corpora["glue"] = _tsv_fields(sorted((data / "glue").glob("*/*.tsv")))
    corpora["squad"] = [text for path in sorted((data / "squad").glob("*.json")) for text in _squad(path)]
    corpora["conll2003"] = [s for path in sorted((data / "conll2003").glob("eng.*")) for s in _sentences(path, " ")]
    corpora["zh/chnsenticorp"] = _tsv_fields(sorted((data / "zh" / "chnsenticorp").glob("*.tsv")))
    corpora["zh/peoples_daily_ner"] = _sentences(data / "zh" / "peoples_daily_ner" / "example.dev", "")
    return corpora


def oracle_subset(name: str, texts: list[str]) -> list[str]:
    """The distinct texts of a corpus that the tests give the oracle."""
    distinct = list(dict.fromkeys(texts))
    return distinct if name.startswith("pretrain/") else distinct[::ORACLE_STRIDE]


def model_garden_tokenizer(vocab_file: Path, do_lower_case: bool):
    """The original tokenizer, with the original's word-length limit."""
    from official.nlp.tools import tokenization

    tokenizer = tokenization.FullTokenizer(str(vocab_file), do_lower_case=do_lower_case)
    tokenizer.wordpiece_tokenizer.max_input_chars_per_word = 200
    return tokenizer


def ids_of(tokenizer, texts: list[str]) -> list[list[int]]:
    """Ids from any FullTokenizer-like object."""
    return [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)) for text in texts]


def fast_ids(tokenizer, texts: list, batch_size: int = 2048) -> list[list[int]]:
    """Ids from a FastBertTokenizer, in batches; `texts` are str or UTF-8 bytes."""
    import tensorflow as tf

    encoded = [text.encode("utf-8") if isinstance(text, str) else text for text in texts]
    rows = []
    for start in range(0, len(encoded), batch_size):
        ids = tokenizer(tf.constant(encoded[start : start + batch_size]))
        # Much faster than `RaggedTensor.to_list()`.
        values, splits = ids.flat_values.numpy().tolist(), ids.row_splits.numpy().tolist()
        rows += [values[begin:end] for begin, end in zip(splits, splits[1:])]
    return rows


def mismatches(expected: list[list[int]], got: list[list[int]], texts: list) -> list[str]:
    """One line for each text whose ids differ."""
    return [f"{text!r:.120}: {want[:12]} != {have[:12]}" for text, want, have in zip(texts, expected, got) if want != have]


@functools.lru_cache(maxsize=None)
def _corpora() -> dict[str, list[str]]:
    return load_corpora(data_dir())


@functools.lru_cache(maxsize=None)
def _python_tokenizer(vocab: str) -> FullTokenizer:
    relative, do_lower_case = VOCABS[vocab]
    return FullTokenizer(data_dir() / relative, do_lower_case=do_lower_case)


@functools.lru_cache(maxsize=None)
def _fast_tokenizer(vocab: str):
    from bert_tf.fast_tokenizer import FastBertTokenizer

    relative, do_lower_case = VOCABS[vocab]
    return FastBertTokenizer(data_dir() / relative, do_lower_case=do_lower_case)


@functools.lru_cache(maxsize=None)
def _oracle(vocab: str):
    relative, do_lower_case = VOCABS[vocab]
    return model_garden_tokenizer(data_dir() / relative, do_lower_case)


@pytest.fixture(params=list(VOCABS))
def vocab(request) -> str:
    shared_file(VOCABS[request.param][0])
    return request.param


@pytest.fixture
def oracle(vocab):
    require_module("official", "Model Garden's FullTokenizer is the reference tokenizer")
    return _oracle(vocab)


# --- Hand-computed expectations and errors (no shared data needed) ------------------------


def _write_vocab(tmp_path: Path, tokens: list[str]) -> Path:
    path = tmp_path / "vocab.txt"
    path.write_text("".join(f"{token}\n" for token in tokens), encoding="utf-8")
    return path


SMALL_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "a", "##a", ",", "!", "é"]


@pytest.mark.parametrize(
    "text, do_lower_case, words",
    [
        (" \tHeLLo!how  \n Are yoU?  ", True, ["hello", "!", "how", "are", "you", "?"]),
        ("ΟΔΟΣ.Α ΣΑΣ Σ ΑΣ\u200dΒ", True, ["οδοσ", ".", "α", "σας", "σ", "ασβ"]),
        ("İstanbul Straße ẞ", True, ["istanbul", "straße", "ß"]),
        ("a\x00b\u200dc\ufffdd\x0be", True, ["abcde"]),
        ("中文字 Ab", False, ["中", "文", "字", "Ab"]),
        ("\uf900 \U0002F800", True, ["\u8c48", "\u4e3d"]),
        ("\uf900", False, ["\uf900"]),
        ("한", True, ["\u1112\u1161\u11ab"]),
        ("a\u2028b\u00a0c", False, ["a", "b", "c"]),
        ("Crème Brûlée", True, ["creme", "brulee"]),
        ("Crème", False, ["Crème"]),
        ("$5^2`", True, ["$", "5", "^", "2", "`"]),
        ("a\U0001D16D\U0001D165", True, ["a\U0001D165\U0001D16D"]),
        ("\u0301\u0300", True, []),
        ("", True, []),
    ],
)
def test_basic_tokenizer_hand_computed(text, do_lower_case, words):
    assert BasicTokenizer(do_lower_case=do_lower_case).tokenize(text) == words


def test_wordpiece_greedy_and_length_limit():
    vocab = {token: index for index, token in enumerate(SMALL_VOCAB)}
    wordpiece = WordpieceTokenizer(vocab)
    assert wordpiece.tokenize("unaffable unaffa un##aff") == ["un", "##aff", "##able", "un", "##aff", "##a", "[UNK]"]
    assert wordpiece.tokenize("a" * 200) == ["a"] + ["##a"] * 199
    assert wordpiece.tokenize("a" * 201) == ["[UNK]"]
    wordpiece.max_input_chars_per_word = 300  # Clears the cache of earlier answers.
    assert wordpiece.tokenize("a" * 201) == ["a"] + ["##a"] * 200


def test_full_tokenizer_ids(tmp_path):
    tokenizer = FullTokenizer(_write_vocab(tmp_path, SMALL_VOCAB), do_lower_case=True)
    tokens = tokenizer.tokenize("UNaffable, Unaffäble! É")
    assert tokens == ["un", "##aff", "##able", ",", "un", "##aff", "##able", "!", "[UNK]"]
    assert tokenizer.convert_tokens_to_ids(tokens[:3]) == [5, 6, 7]
    assert tokenizer.convert_ids_to_tokens([5, 12]) == ["un", "é"]
    assert tokenizer.tokenize(b"un\xffaff") == ["un", "##aff"]  # Bytes: UTF-8, invalid bytes dropped.
    assert FullTokenizer(tmp_path / "vocab.txt", do_lower_case=False).tokenize("É é") == ["[UNK]", "é"]


def test_load_vocab_like_the_original(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"[PAD]\r\n  [UNK] \nsame\nsame\n\nlast")
    vocab = load_vocab(path)
    assert list(vocab.items()) == [("[PAD]", 0), ("[UNK]", 1), ("same", 3), ("", 4), ("last", 5)]


def test_vocab_errors(tmp_path):
    with pytest.raises(BertTfError, match="missing.txt does not exist"):
        load_vocab(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(BertTfError, match="empty.txt is empty"):
        FullTokenizer(tmp_path / "empty.txt")
    path = _write_vocab(tmp_path, ["[PAD]", "[UNK]", "hello"])
    with pytest.raises(BertTfError, match=r"vocab.txt lacks the special tokens \[CLS\], \[SEP\], \[MASK\] "):
        FullTokenizer(path)
    validate_vocab(load_vocab(_write_vocab(tmp_path, SMALL_VOCAB)), "vocab.txt")


def test_fast_tokenizer_vocab_errors(tmp_path):
    from bert_tf.fast_tokenizer import FastBertTokenizer

    with pytest.raises(BertTfError, match="lacks the special tokens"):
        FastBertTokenizer(_write_vocab(tmp_path, ["[PAD]", "[UNK]"]))


# --- Against the oracle --------------------------------------------------------------------


def test_python_path_adversarial(oracle, vocab):
    texts = ADVERSARIAL + ["lone \ud800 surrogate \udfff"]
    expected, got = ids_of(oracle, texts), ids_of(_python_tokenizer(vocab), texts)
    assert not mismatches(expected, got, texts)


def test_fast_path_adversarial(oracle, vocab):
    texts = ADVERSARIAL + INVALID_UTF8
    expected = ids_of(oracle, texts)
    assert not mismatches(expected, fast_ids(_fast_tokenizer(vocab), texts), texts)
    # One text at a time and all in one batch take different mixes of the two paths.
    assert not mismatches(expected, [fast_ids(_fast_tokenizer(vocab), [text])[0] for text in texts], texts)


def probe_code_points() -> list[int]:
    """Every assigned code point, every one of the CJK ranges, and every 16th of the rest
    (unassigned and private use, which the original leaves alone)."""
    cjk = {cp for low, high in CJK_RANGES for cp in range(low, high + 1)}
    assigned = [cp for cp in range(0x110000) if unicodedata.category(chr(cp)) not in ("Cn", "Co", "Cs")]
    rest = [cp for cp in range(0x110000) if unicodedata.category(chr(cp)) in ("Cn", "Co") and cp not in cjk]
    return sorted(set(assigned) | cjk | set(rest[::16]))


@pytest.mark.parametrize("vocab", ["uncased", "cased"])  # One of each do_lower_case.
def test_every_code_point_in_a_word(vocab):
    """`a<c>a` for each code point c: Python path == oracle (basic tokenizer), fast == Python."""
    require_module("official", "Model Garden's FullTokenizer is the reference tokenizer")
    shared_file(VOCABS[vocab][0])
    texts = [f"a{chr(cp)}a" for cp in probe_code_points()]
    python = _python_tokenizer(vocab)
    basic = _oracle(vocab).basic_tokenizer
    wrong = [text for text in texts if basic.tokenize(text) != python.basic_tokenizer.tokenize(text)]
    assert not wrong, [unicodedata.name(text[1], hex(ord(text[1]))) for text in wrong[:10]]
    assert not mismatches(ids_of(python, texts), fast_ids(_fast_tokenizer(vocab), texts, batch_size=65536), texts)


# --- The shared corpora --------------------------------------------------------------------


@pytest.fixture
def corpora(shared_data) -> dict[str, list[str]]:
    return _corpora()


def test_corpora_python_path_matches_oracle(corpora, oracle, vocab):
    report = {}
    for name, texts in corpora.items():
        subset = oracle_subset(name, texts)
        report[name] = mismatches(ids_of(oracle, subset), ids_of(_python_tokenizer(vocab), subset), subset)
    assert not any(report.values()), {name: bad[:3] for name, bad in report.items() if bad}


def test_corpora_fast_path_matches_python_path(corpora, vocab):
    """Every text: the fast path against the Python path (itself checked above)."""
    report = {}
    for name, texts in corpora.items():
        expected = ids_of(_python_tokenizer(vocab), texts)
        report[name] = mismatches(expected, fast_ids(_fast_tokenizer(vocab), texts), texts)
    assert not any(report.values()), {name: bad[:3] for name, bad in report.items() if bad}


def test_corpora_exact_path(corpora, vocab):
    """The fast tokenizer's exact path (which the corpora barely need) on a fifth of them."""
    import tensorflow as tf

    tokenizer = _fast_tokenizer(vocab)
    exact = tf.function(tokenizer._exact_ids, input_signature=[tf.TensorSpec([None], tf.string)])
    report = {}
    for name, texts in corpora.items():
        subset = list(dict.fromkeys(texts))[::ORACLE_STRIDE]
        report[name] = mismatches(ids_of(_python_tokenizer(vocab), subset), fast_ids(exact, subset), subset)
    assert not any(report.values()), {name: bad[:3] for name, bad in report.items() if bad}


LOCALE_SCRIPT = """
import tensorflow as tf
from bert_tf.fast_tokenizer import _normalize_strings, _string_path_classes, _string_path_code_points
from bert_tf.tokenization import lower_and_strip_accents
texts = ["Iñtërnâtiônàlizætiøn İstanbul", "IİıiÌĮ́ J̇ I\u0307", "ΙΣ Ii"]
classes = _string_path_classes(*_string_path_code_points())
got = [t.decode() for t in _normalize_strings(tf.constant(texts), True, classes).numpy()]
assert got == [lower_and_strip_accents(t) for t in texts], got
"""


def test_fast_path_ignores_the_process_locale(project):
    """ICU lower-cases for the process's locale (Turkish: I to dotless ı); Python never."""
    result = project.run("-c", LOCALE_SCRIPT, env={"LC_ALL": "tr_TR.UTF-8", "LANG": "tr_TR.UTF-8"})
    assert result.returncode == 0, result.stderr[-2000:]


# --- The fast tokenizer in tf.data and in a SavedModel -------------------------------------


def test_fast_tokenizer_in_dataset_and_saved_model(tmp_path):
    import tensorflow as tf

    from bert_tf.fast_tokenizer import FastBertTokenizer

    tokenizer = FastBertTokenizer(_write_vocab(tmp_path, SMALL_VOCAB), do_lower_case=True)
    texts = ["UNaffable, Unaffäble!", "", "ΣΑ unaffable", "a" * 201, "ж" * 150]
    expected = ids_of(FullTokenizer(tmp_path / "vocab.txt"), texts)
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(2).map(tokenizer)
    assert [row for batch in dataset for row in batch.to_list()] == expected

    tf.saved_model.save(tokenizer, str(tmp_path / "saved"))
    restored = tf.saved_model.load(str(tmp_path / "saved"))
    assert restored(tf.constant(texts)).to_list() == expected
    assert tokenizer.tokenize_to_ids(texts) == expected


# === The tables' disk cache ===
TEXT = ["UNaffable, Unaffäble! ΣΑΣ"]


@pytest.mark.parametrize("lower", [True, False])
def test_tables_are_computed_once_then_read_from_the_cache(tmp_path, monkeypatch, lower):
    """The first construction computes the tables and writes them to $BERT_TF_CACHE; a later one (the
    in-memory copy dropped, as in a new process) reads them and computes nothing. The file holds exactly
    the computed arrays (the corpora tests above run on whichever this machine has)."""
    from bert_tf import fast_tokenizer

    vocab = _write_vocab(tmp_path, SMALL_VOCAB)
    monkeypatch.setenv("BERT_TF_CACHE", str(tmp_path / "cache"))
    computed, compute = [], fast_tokenizer._compute_tables
    monkeypatch.setattr(fast_tokenizer, "_compute_tables", lambda do_lower_case: computed.append(do_lower_case)
                        or compute(do_lower_case))  # fmt: skip
    ids = []
    for _ in range(2):
        fast_tokenizer._construction_tables.cache_clear()
        ids.append(fast_tokenizer.FastBertTokenizer(vocab, do_lower_case=lower).tokenize_to_ids(TEXT))
    fast_tokenizer._construction_tables.cache_clear()  # later tests: the default folder's tables
    assert computed == [lower] and ids[0] == ids[1]
    written = list((tmp_path / "cache").iterdir())
    assert [path.name for path in written] == [fast_tokenizer._tables_file(lower).name]  # nothing temporary left
    assert oct(written[0].stat().st_mode & 0o777) == "0o644"
    with np.load(written[0]) as stored:
        computed_here = compute(lower)
        assert sorted(stored.files) == sorted(computed_here)
        for name, array in computed_here.items():
            np.testing.assert_array_equal(stored[name], array, err_msg=name)


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "flipped":  # Inside the first member's deflate stream: zlib's error, not the zip's.
        path.write_bytes(data[:100] + bytes(b ^ 0xFF for b in data[100:116]) + data[116:])
    elif how == "garbage":
        path.write_bytes(b"\x93NUMPY not really" * 10)
    else:  # Another shape: a well-formed file of other tables.
        np.savez(path, **{name: np.zeros(3, np.int32) for name in np.load(path).files})


@pytest.mark.parametrize("how", ["empty", "truncated", "flipped", "garbage", "reshaped"])
def test_a_damaged_cache_file_is_computed_again_and_replaced(tmp_path, monkeypatch, how):
    from bert_tf import fast_tokenizer

    vocab = _write_vocab(tmp_path, SMALL_VOCAB)
    expected = fast_tokenizer.FastBertTokenizer(vocab).tokenize_to_ids(TEXT)
    monkeypatch.setenv("BERT_TF_CACHE", str(tmp_path / "cache"))
    fast_tokenizer._construction_tables.cache_clear()
    fast_tokenizer._construction_tables(True)
    path = fast_tokenizer._tables_file(True)
    _damage(path, how)
    assert fast_tokenizer._read_tables(path, True) is None
    fast_tokenizer._construction_tables.cache_clear()
    assert fast_tokenizer.FastBertTokenizer(vocab).tokenize_to_ids(TEXT) == expected
    assert fast_tokenizer._read_tables(path, True) is not None  # replaced by a whole one
    fast_tokenizer._construction_tables.cache_clear()  # later tests: the default folder's tables


def test_no_usable_cache_folder_costs_only_the_time(tmp_path, monkeypatch):
    """A cache folder that cannot be created, and no home directory at all: the tokenizer works as
    without a cache."""
    from bert_tf import fast_tokenizer

    vocab = _write_vocab(tmp_path, SMALL_VOCAB)
    expected = fast_tokenizer.FastBertTokenizer(vocab).tokenize_to_ids(TEXT)
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("BERT_TF_CACHE", str(tmp_path / "file" / "cache"))
    fast_tokenizer._construction_tables.cache_clear()
    assert fast_tokenizer.FastBertTokenizer(vocab).tokenize_to_ids(TEXT) == expected
    monkeypatch.delenv("BERT_TF_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory")

    monkeypatch.setattr(Path, "home", no_home)
    assert fast_tokenizer._tables_file(True) is None
    fast_tokenizer._construction_tables.cache_clear()
    assert fast_tokenizer.FastBertTokenizer(vocab).tokenize_to_ids(TEXT) == expected
    fast_tokenizer._construction_tables.cache_clear()


def test_the_cache_file_names_everything_the_tables_depend_on(monkeypatch):
    """Python, TensorFlow and tensorflow-text builds, the locale, and the bytes of both modules that
    compute the tables (as imported)."""
    from bert_tf import fast_tokenizer, tokenization

    names = {fast_tokenizer._tables_file(True).name, fast_tokenizer._tables_file(False).name}
    assert len(names) == 2
    for module, attribute in ((fast_tokenizer.tf, "__version__"), (fast_tokenizer.tf.version, "GIT_VERSION"),
                              (fast_tokenizer.tf_text, "__version__"), (fast_tokenizer.sys, "version"),
                              (fast_tokenizer, "_SOURCE_DIGEST")):
        with monkeypatch.context() as patch:
            patch.setattr(module, attribute, "0.0")
            assert fast_tokenizer._tables_file(True).name not in names, (module, attribute)
    for variable in ("LC_ALL", "LC_CTYPE", "LANG"):
        with monkeypatch.context() as patch:
            patch.setenv(variable, "tr_TR.UTF-8")
            assert fast_tokenizer._tables_file(True).name not in names, variable
    assert fast_tokenizer._source_digest() == fast_tokenizer._SOURCE_DIGEST
    read_bytes = Path.read_bytes
    for source in (tokenization.__file__, fast_tokenizer.__file__):
        with monkeypatch.context() as patch:
            patch.setattr(Path, "read_bytes", lambda path: read_bytes(path) + (b"#" if str(path) == source else b""))
            assert fast_tokenizer._source_digest() != fast_tokenizer._SOURCE_DIGEST, source
