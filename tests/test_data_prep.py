"""create_pretraining_data.py and data_prep: format, algorithm pieces, determinism,
resume, bad inputs, dynamic masking, corpus and vocabulary tools.

Model Garden comparisons (fidelity, interop) are in test_data_prep_fidelity.py.
"""

from __future__ import annotations

import json
import os
import random
import string
import subprocess
from pathlib import Path

import numpy as np
import pytest

import data_prep  # noqa: F401  (before bert_tf: see data_prep/__init__.py)
from data_prep.encoding import SentenceEncoder, chinese_continuations, chinese_word_segmenter
from data_prep.instances import truncate_seq_pair
from data_prep.masking import MaskingOptions, assemble, mask_batch, word_continuation
from data_prep.tfrecord import FloatFeature, IntFeature, serialize_examples
from tests.conftest import PROJECT, REPO_ROOT, require_module, shared_file

UNCASED = "vocab/google_uncased_en_vocab.txt"
CHINESE = "vocab/google_zh_vocab.txt"
MASK_ID, CLS_ID, SEP_ID = 103, 101, 102


def cut(source: Path, directory: Path, max_bytes: int) -> Path:
    """The first lines of `source` (about `max_bytes`), ending at a blank line if any."""
    data = source.read_bytes()[:max_bytes]
    end = data.rfind(b"\n\n")
    data = data[: end + 1] if end > 0 else data[: data.rfind(b"\n") + 1]
    path = directory / f"{source.stem}.{max_bytes}.txt"
    path.write_bytes(data)
    return path


def generate(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    """Runs create_pretraining_data.py with `args`."""
    return PROJECT.run("create_pretraining_data.py", "--noprogress", *args, cwd=cwd, timeout=300)


def read_file_list(paths: list[str]) -> dict[str, np.ndarray]:
    from data_prep.analysis import load_examples

    return load_examples(paths)


def read_file(path: Path) -> dict[str, np.ndarray]:
    return read_file_list([str(path)])


# ----------------------------------------------------------------------------------
# TFRecord writing without TensorFlow


def test_records_are_byte_identical_to_tensorflow_deterministic_serialization(tmp_path):
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(0)
    n = 40
    values = {  # sorted names: deterministic protobuf serialization sorts map keys
        "a_small": rng.integers(0, 2, (n, 5)),
        "b_ids": rng.integers(0, 30522, (n, 16)),
        "c_big": rng.integers(0, 2**40, (n, 3)),
        "d_weights": rng.random((n, 4)).astype(np.float32),
        "e_label": rng.integers(0, 2, (n, 1)),
    }
    features = [FloatFeature(k, v) if v.dtype == np.float32 else IntFeature(k, v) for k, v in values.items()]
    ours, offsets = serialize_examples(features)
    path = tmp_path / "reference.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(n):
            feature = {
                k: tf.train.Feature(float_list=tf.train.FloatList(value=v[i].tolist()))
                if v.dtype == np.float32
                else tf.train.Feature(int64_list=tf.train.Int64List(value=v[i].tolist()))
                for k, v in values.items()
            }
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString(deterministic=True))
    assert path.read_bytes() == ours
    assert offsets[-1] == len(ours) and len(offsets) == n + 1


# ----------------------------------------------------------------------------------
# Algorithm pieces


def _original_truncation(length_a: int, length_b: int, max_num_tokens: int, rng: random.Random) -> tuple:
    """The original truncate_seq_pair, one token at a time, as trim counts."""
    trims = [0, 0, 0, 0]
    while length_a + length_b > max_num_tokens:
        side = 0 if length_a > length_b else 2
        trims[side + (0 if rng.random() < 0.5 else 1)] += 1
        if side == 0:
            length_a -= 1
        else:
            length_b -= 1
    return tuple(trims)


@pytest.mark.parametrize("lengths", [(100, 40, 125), (80, 80, 125), (81, 80, 125), (3, 300, 125), (700, 690, 125)])
def test_truncation_has_the_original_distribution(lengths):
    length_a, length_b, limit = lengths
    ours = np.array([truncate_seq_pair(length_a, length_b, limit, random.Random(k)) for k in range(3000)])
    original = np.array([_original_truncation(length_a, length_b, limit, random.Random(k)) for k in range(3000)])
    # Same totals per side, always; same front/back split in distribution.
    assert (ours[:, 0] + ours[:, 1] == original[:, 0] + original[:, 1]).all()
    assert (ours[:, 2] + ours[:, 3] == original[:, 2] + original[:, 3]).all()
    spread = np.maximum(original.std(axis=0), 0.5) * 4 / np.sqrt(3000) * np.sqrt(2)
    assert np.all(np.abs(ours.mean(axis=0) - original.mean(axis=0)) <= spread)


def test_sentence_encoder_matches_the_full_tokenizer():
    from bert_tf.tokenization import FullTokenizer

    for vocab, corpus in [(UNCASED, "pretrain/wikitext2_valid.tokens.txt"), (CHINESE, "pretrain/clue_zh_small.txt")]:
        tokenizer = FullTokenizer(str(shared_file(vocab)), do_lower_case=True)
        encoder = SentenceEncoder(tokenizer)
        lines = shared_file(corpus).read_text(encoding="utf-8").splitlines()[:3000]
        for line in lines + ["Ünïcödé\u00a0a\u2028b\x0bc", "\u03a3\u0391\u03a3 \u03bf\u03b4\u03bf\u03a3."]:
            assert encoder.encode(line) == tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)), line


def test_chinese_word_continuations_follow_jieba():
    require_module("rjieba", "Chinese whole-word masking segments with rjieba (jieba-rs)")
    text = "我爱北京天安门，English words too。"
    tokens = ["我", "爱", "北", "京", "天", "安", "门", "，", "english", "words", "too", "。"]
    words = chinese_word_segmenter()(text)
    flags = chinese_continuations(text, tokens, words)
    assert "".join(words) == text
    assert flags[:7] == [False, False, False, True, False, True, True]  # 我 爱 北京 天安门
    assert not any(flags[7:])


def test_chinese_whole_word_encoder_matches_chinese_continuations_on_real_text():
    # The encoder's fast path against the token-by-token search, on real Chinese lines.
    require_module("rjieba", "Chinese whole-word masking segments with rjieba (jieba-rs)")
    from bert_tf.tokenization import FullTokenizer
    from data_prep.encoding import CONTINUATION_FLAG

    tokenizer = FullTokenizer(str(shared_file(CHINESE)), do_lower_case=True)
    segment = chinese_word_segmenter()
    encoder = SentenceEncoder(tokenizer, segment)
    lines = shared_file("pretrain/clue_zh_small.txt").read_text(encoding="utf-8").splitlines()[:3000]
    continued = 0
    lines += ["穿T恤的卡拉OK歌手在北京", "English only", "鿿 is [UNK], 北京 is a word", "", "北京\x01天安门", "恤恤T"]
    expected_lines = []
    for line in lines:
        tokens = tokenizer.tokenize(line)
        flags = chinese_continuations(line, tokens, segment(line))
        expected = [i | CONTINUATION_FLAG if f else i for i, f in zip(tokenizer.convert_tokens_to_ids(tokens), flags)]
        assert encoder.encode(line) == expected, line
        expected_lines.append(expected)
        continued += sum(flags)
    assert continued > 10_000  # most lines have words of two characters or more
    # All lines in one call, as data generation encodes a chunk: the same ids per line.
    ids, lengths = encoder.encode_lines(lines)
    assert lengths.tolist() == [len(expected) for expected in expected_lines]
    assert ids.tolist() == [index for expected in expected_lines for index in expected]


def test_rjieba_segments_like_jieba():
    # rjieba replaced jieba (pure Python, unmaintained): the same words, nearly everywhere.
    require_module("rjieba", "Chinese whole-word masking segments with rjieba (jieba-rs)")
    require_module("jieba", "the reference segmenter that rjieba replaced")
    import warnings

    with warnings.catch_warnings():  # jieba imports the deprecated pkg_resources
        warnings.simplefilter("ignore")
        import jieba
    both = either = 0
    for line in shared_file("pretrain/clue_zh_small.txt").read_text(encoding="utf-8").splitlines()[:2000]:
        ends = [set(np.cumsum([len(word) for word in cut(line)]).tolist()) for cut in (jieba.lcut, chinese_word_segmenter())]
        both += len(ends[0] & ends[1])
        either += len(ends[0] | ends[1])
    assert both / either > 0.99


def _batch(rng: np.random.Generator, n: int = 2000, length: int = 128):
    a_length = rng.integers(1, 70, n)
    b_length = rng.integers(1, length - 3 - a_length + 1)
    tokens = rng.integers(1000, 30000, 10_000).astype(np.int32)
    a_start = rng.integers(0, 5000, n)
    b_start = rng.integers(0, 5000, n)
    labels = rng.integers(0, 2, n).astype(np.int8)
    return assemble(tokens, a_start, a_length, b_start, b_length, labels, length, CLS_ID, SEP_ID), tokens


@pytest.mark.parametrize("whole_word", [False, True])
def test_masking_follows_the_original_rates(whole_word):
    rng = np.random.default_rng(1)
    batch, _ = _batch(rng)
    suffix = np.zeros(30522, dtype=bool)
    suffix[::4] = True  # a quarter of the ids are '##' pieces
    continuation = word_continuation(batch, suffix)
    options = MaskingOptions(0.15, 20, 30522, MASK_ID, whole_word)
    masked = mask_batch(batch, continuation, options, np.random.default_rng(2))
    real = masked.weights > 0
    per_row = real.sum(axis=1)
    budget = np.minimum(20, np.maximum(1, np.rint(batch.lengths * 0.15)))
    if whole_word:
        assert (per_row <= budget).all() and per_row.mean() > 0.9 * budget.mean()
        # A chosen word is chosen whole: no chosen token is followed by an unchosen
        # continuation of its word.
        chosen = np.zeros_like(batch.candidates)
        rows = np.broadcast_to(np.arange(len(real))[:, None], real.shape)
        chosen[rows[real], masked.positions[real]] = True
        assert not (chosen[:, :-1] & continuation[:, 1:] & ~chosen[:, 1:]).any()
    else:
        assert (per_row == budget).all()
    positions = np.where(real, masked.positions, 10_000 + np.arange(real.shape[1]))
    assert (np.diff(positions, axis=1) > 0).all()  # sorted, distinct
    rows = np.broadcast_to(np.arange(len(real))[:, None], real.shape)
    assert batch.candidates[rows[real], masked.positions[real]].all()
    assert (batch.input_ids[rows[real], masked.positions[real]] == masked.label_ids[real]).all()
    total = masked.replaced + masked.kept + masked.random
    assert abs(masked.replaced / total - 0.8) < 0.01
    assert abs(masked.kept / total - 0.1) < 0.01
    assert abs(masked.random / total - 0.1) < 0.01


def _original_whole_words(candidates, continuation, budget, word_order):
    """The original's loop for one row: words in `word_order`, stop once `budget` tokens
    are chosen, skip a word that would overflow it."""
    words: list[list[int]] = []
    for position in np.flatnonzero(candidates):
        if words and continuation[position] and position != 1:
            words[-1].append(position)
        else:
            words.append([position])
    chosen: list[int] = []
    for index in word_order[: len(words)]:
        if len(chosen) >= budget:
            break
        if len(chosen) + len(words[index]) > budget:
            continue
        chosen += words[index]
    return sorted(chosen)


def test_whole_word_choice_is_the_original_loop():
    from data_prep.masking import _choose_whole_words

    rng = np.random.default_rng(3)
    batch, _ = _batch(rng)
    suffix = np.zeros(30522, dtype=bool)
    suffix[rng.integers(0, 30522, 20_000)] = True  # words of one to many pieces
    continuation = word_continuation(batch, suffix)
    budget = rng.integers(0, 25, len(batch.lengths))
    chosen = _choose_whole_words(batch.candidates, continuation, budget, np.random.default_rng(4))
    # The same word order: the function's one draw, a key per word slot, sorted.
    word_order = np.argsort(np.random.default_rng(4).random(batch.candidates.shape), axis=1)
    for row in range(len(budget)):
        num_words = int((batch.candidates[row] & (~continuation[row] | (np.arange(chosen.shape[1]) == 1))).sum())
        order = [int(i) for i in word_order[row] if i < num_words]
        expected = _original_whole_words(batch.candidates[row], continuation[row], budget[row], order)
        assert np.flatnonzero(chosen[row]).tolist() == expected, row
    # One row of words of 2, 3 and 1 pieces, budget 3: its last word decides, in some orders.
    candidates = np.zeros((1, 8), dtype=bool)
    candidates[0, 1:7] = True
    continues = np.zeros((1, 8), dtype=bool)
    continues[0, [2, 4, 5]] = True
    for seed in range(20):
        chosen = _choose_whole_words(candidates, continues, np.array([3]), np.random.default_rng(seed))
        order = [int(i) for i in np.argsort(np.random.default_rng(seed).random((1, 8)), axis=1)[0] if i < 3]
        assert np.flatnonzero(chosen[0]).tolist() == _original_whole_words(candidates[0], continues[0], 3, order)


# ----------------------------------------------------------------------------------
# The command line tool


def test_same_inputs_seed_and_workers_give_identical_bytes(tmp_path):
    corpus = cut(shared_file("pretrain/wikitext2_valid.tokens.txt"), tmp_path, 300_000)
    vocab = str(shared_file(UNCASED))
    outputs = {}
    for name, extra in [
        ("w2a", ["--num_workers=2"]),
        ("w2b", ["--num_workers=2"]),
        ("w1", []),
        ("seed", ["--random_seed=7"]),
    ]:
        result = generate(
            f"--input_file={corpus}",
            f"--output_file={tmp_path / name}",
            f"--vocab_file={vocab}",
            "--dupe_factor=3",
            "--num_output_shards=2",
            *extra,
        )
        assert result.returncode == 0, result.stderr
        outputs[name] = [(tmp_path / f"{name}-0000{k}-of-00002").read_bytes() for k in range(2)]
    assert outputs["w2a"] == outputs["w2b"]
    assert outputs["w1"] != outputs["w2a"]  # the same records (test_data_prep_workers), in another order
    assert outputs["seed"] != outputs["w1"]


def test_two_workers_write_whole_shards_gzip_too(tmp_path):
    corpus = cut(shared_file("pretrain/wikitext2_valid.tokens.txt"), tmp_path, 150_000)
    common = [f"--input_file={corpus}", f"--vocab_file={shared_file(UNCASED)}", "--dupe_factor=2"]
    shards = ["--num_output_shards=3"]
    for name, extra in [("one", []), ("two", ["--num_workers=2"]), ("twogz", ["--num_workers=2", "--gzip"])]:
        result = generate(*common, *shards, *extra, f"--output_file={tmp_path / name}",
                          f"--stats_file={tmp_path / (name + '.json')}")
        assert result.returncode == 0, result.stderr
    hidden = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    assert hidden == [f".{name}-0000{k}-of-00003.settings.json" for name in ("one", "two", "twogz") for k in range(3)]
    # (no parts left)
    paths = {name: [str(tmp_path / f"{name}-0000{k}-of-00003") for k in range(3)] for name in ("one", "two", "twogz")}
    one, two, twogz = (read_file_list(paths[name]) for name in ("one", "two", "twogz"))
    # gzip: the workers' compressed parts joined are one gzip file TensorFlow reads whole.
    assert all(np.array_equal(two[k], twogz[k]) for k in two)
    stats = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in ("one", "two")}
    assert len(two["input_word_ids"]) == stats["two"]["instances"]  # counts from every worker
    assert stats["one"]["documents"] == stats["two"]["documents"]
    # The same records (test_data_prep_workers.py checks the multiset), so the same amount.
    assert abs(len(two["input_word_ids"]) / len(one["input_word_ids"]) - 1) < 0.03
    # Each worker's part covers the whole corpus: both halves of a shard mix all of it.
    assert abs(stats["two"]["not_next_rate"] - stats["one"]["not_next_rate"]) < 0.02


def test_a_failing_worker_stops_the_run_and_leaves_no_file(tmp_path, monkeypatch):
    from bert_tf.errors import BertTfError
    from data_prep import generate as generation
    from data_prep.chunks import ChunkProcessor, GenerationOptions

    corpus = cut(shared_file("pretrain/wikitext2_valid.tokens.txt"), tmp_path, 150_000)
    parent = os.getpid()
    process = ChunkProcessor.process

    def fails_in_the_child(self, task):
        if os.getpid() != parent and task.index >= 1:
            raise BertTfError("worker 1 could not go on.")
        return process(self, task)

    monkeypatch.setattr(ChunkProcessor, "process", fails_in_the_child)
    out = tmp_path / "out"
    out.mkdir()
    job = generation.Job([str(corpus)], [str(out / "new" / f"s{k}") for k in range(2)], str(shared_file(UNCASED)),
                         options=GenerationOptions(dupe_factor=1), num_workers=2)
    with pytest.raises(BertTfError, match="worker 1 could not go on"):
        generation.run(job, progress=False)
    assert sorted(out.iterdir()) == []  # the folder it made for its shards too


def test_rerun_skips_complete_shards_and_redoes_the_rest(tmp_path):
    corpus = cut(shared_file("pretrain/wikitext2_valid.tokens.txt"), tmp_path, 200_000)
    args = [
        f"--input_file={corpus}",
        f"--output_file={tmp_path / 'out'}",
        f"--vocab_file={shared_file(UNCASED)}",
        "--dupe_factor=2",
        "--num_output_shards=3",
        f"--stats_file={tmp_path / 'stats.json'}",
    ]
    assert generate(*args).returncode == 0
    shards = [tmp_path / f"out-0000{k}-of-00003" for k in range(3)]
    before = [(shard.read_bytes(), shard.stat().st_mtime_ns) for shard in shards]
    shards[1].unlink()
    (tmp_path / ".out-00001-of-00003.incomplete").write_bytes(b"left by a crash")
    result = generate(*args)
    assert result.returncode == 0, result.stderr
    after = [(shard.read_bytes(), shard.stat().st_mtime_ns) for shard in shards]
    assert after[0] == before[0] and after[2] == before[2]  # untouched
    assert after[1][0] == before[1][0]  # regenerated, identical
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["shards_written"] == [str(shards[1])]
    assert not list(tmp_path.glob(".*incomplete"))
    result = generate(*args)
    assert result.returncode == 0 and "nothing to do" in result.stderr


def test_an_interrupted_overwrite_leaves_no_shard_labelled_with_settings_it_was_not_made_with(tmp_path, monkeypatch):
    """--overwrite with new flags, interrupted: the shards it redid carry the new settings, the old ones none
    (the new settings were written for every shard up front, so a re-run kept old records as new)."""
    from bert_tf.errors import BertTfError
    from data_prep import generate as generation
    from data_prep.chunks import ChunkProcessor, GenerationOptions

    corpus = cut(shared_file("pretrain/wikitext2_valid.tokens.txt"), tmp_path, 200_000)
    outputs = [str(tmp_path / f"s{k}") for k in range(4)]

    def job(masked_lm_prob: float, overwrite: bool = False) -> generation.Job:
        return generation.Job([str(corpus)], outputs, str(shared_file(UNCASED)), overwrite=overwrite,
                              options=GenerationOptions(dupe_factor=1, masked_lm_prob=masked_lm_prob))

    generation.run(job(0.15), progress=False)
    old = [Path(path).read_bytes() for path in outputs]
    process, calls = ChunkProcessor.process, []

    def interrupted(self, task):
        calls.append(task.index)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return process(self, task)

    monkeypatch.setattr(ChunkProcessor, "process", interrupted)
    with pytest.raises(KeyboardInterrupt):
        generation.run(job(0.3, overwrite=True), progress=False)
    monkeypatch.setattr(ChunkProcessor, "process", process)
    redone = [k for k, path in enumerate(outputs) if Path(path).read_bytes() != old[k]]
    assert redone and len(redone) < 4
    labelled = [k for k, path in enumerate(outputs) if os.path.exists(generation.settings_path(path))]
    assert labelled == redone == list(range(len(redone)))
    first_old = outputs[len(redone)]  # shards are made in order
    with pytest.raises(BertTfError, match=f"--output_file {first_old} exists, but not the record of the settings"):
        generation.run(job(0.3), progress=False)
    generation.run(job(0.3, overwrite=True), progress=False)
    assert generation.run(job(0.3), progress=False)["shards_written"] == []


def test_one_sentence_documents_say_that_next_sentence_prediction_learns_little(tmp_path):
    """Labelled text (a review a document) gives almost only NotNext instances, as the original does: say so."""
    corpus = tmp_path / "reviews.txt"
    corpus.write_text("".join(f"Review {k} says the food was good and the service was quick.\n\n" for k in range(300)))
    result = generate(f"--input_file={corpus}", f"--output_file={tmp_path / 'out'}",
                      f"--vocab_file={shared_file(UNCASED)}", f"--stats_file={tmp_path / 'stats.json'}")
    assert result.returncode == 0, result.stderr
    rate = json.loads((tmp_path / "stats.json").read_text())["not_next_rate"]
    assert rate > 0.95 and f"warning: {rate:.0%} of the instances are NotNext" in result.stderr


def test_more_shards_than_documents_says_which_are_empty(tmp_path):
    """Shards take equal parts of the corpus bytes, so a short corpus leaves some empty: say so when
    writing them, and let the trainer's message point at the cause (it said "regenerate it", which
    made the same empty shard again)."""
    from bert_tf.data.reader import detect_format, list_files
    from bert_tf.errors import BertTfError

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"Document {d} says one thing.\nIt says another thing.\n\n" for d in range(3)))
    result = generate(f"--input_file={corpus}", f"--output_file={tmp_path / 'out'}",
                      f"--vocab_file={shared_file(UNCASED)}", "--num_output_shards=8",
                      f"--stats_file={tmp_path / 'stats.json'}")
    assert result.returncode == 0, result.stderr
    stats = json.loads((tmp_path / "stats.json").read_text())
    empty = [path for path in stats["output_files"] if os.path.getsize(path) == 0]
    assert stats["empty_shards"] == empty and len(empty) == 5 and stats["documents"] == 3
    assert f"5 of the 8 output files hold no record (no document starts in their part of the corpus, which " \
           f"has 3), e.g. {empty[0]}: leave them out" in result.stderr
    # A wildcard leaves out the hidden settings beside the shards (TensorFlow's glob alone matches them).
    assert list_files(str(tmp_path / "*")) == sorted([*stats["output_files"], str(corpus), str(tmp_path / "stats.json")])
    with pytest.raises(BertTfError, match=r"holds no record \(create_pretraining_data.py leaves a shard empty when "):
        detect_format(empty[0])


def test_rerun_with_other_settings_refuses_the_shards_it_would_keep(tmp_path):
    """Skipping a complete shard is right only for the same inputs and flags: with others it kept stale records."""
    corpus = cut(shared_file("pretrain/wikitext2_valid.tokens.txt"), tmp_path, 100_000)
    args = [f"--input_file={corpus}", f"--output_file={tmp_path / 'out'}", f"--vocab_file={shared_file(UNCASED)}",
            "--num_output_shards=2"]
    assert generate(*args).returncode == 0
    shards = [tmp_path / f"out-0000{k}-of-00002" for k in range(2)]
    made = [shard.read_bytes() for shard in shards]
    shards[1].unlink()  # as a killed run leaves it: the rest would be done with the new flags
    settings_of_first = f"error: --output_file {shards[0]} exists, made with other settings"
    for extra, change in [(["--max_seq_length=64"], "max_seq_length was 128, now 64"),
                          (["--masked_lm_prob=0.2"], "masked_lm_prob was 0.15, now 0.2"),
                          (["--nodo_lower_case"], "do_lower_case was True, now False"),
                          ([f"--vocab_file={shared_file(CHINESE)}"], "vocab_sha256 was ")]:
        result = generate(*args, *extra)
        assert result.returncode == 1 and result.stderr.endswith(
            "pass --overwrite to make it again with these, or give another --output_file.\n"), result.stderr
        assert result.stderr.splitlines()[-1].startswith(f"{settings_of_first} ({change}"), result.stderr
    with open(corpus, "a", encoding="utf-8") as handle:
        handle.write("One more sentence.\n")
    result = generate(*args)
    assert result.returncode == 1 and "(input_files differ in names or sizes)" in result.stderr
    assert shards[0].read_bytes() == made[0] and not shards[1].exists()  # a refused run touches nothing
    record = tmp_path / ".out-00000-of-00002.settings.json"  # as a version before --masked_lm_prob was kept wrote it
    record.write_text(json.dumps({k: v for k, v in json.loads(record.read_text()).items() if k != "masked_lm_prob"}))
    result = generate(*args)
    assert result.returncode == 1 and "masked_lm_prob not recorded" in result.stderr, result.stderr
    (tmp_path / ".out-00000-of-00002.settings.json").unlink()  # made by an older version, say
    result = generate(*args)
    assert result.returncode == 1 and "exists, but not the record of the settings that made it" in result.stderr
    assert generate(*args, "--overwrite").returncode == 0 and all(shard.exists() for shard in shards)
    assert generate(*args).returncode == 0  # the same settings again: complete, skipped


def _bad_input_cases(tmp_path: Path) -> dict:
    good = cut(shared_file("pretrain/wikitext2_valid.tokens.txt"), tmp_path, 20_000)
    vocab = shared_file(UNCASED)
    no_mask = tmp_path / "no_mask_vocab.txt"
    no_mask.write_text("\n".join(t for t in vocab.read_text(encoding="utf-8").splitlines() if t != "[MASK]") + "\n")
    (tmp_path / "empty.txt").write_bytes(b"")
    text = good.read_bytes()
    (tmp_path / "latin1.txt").write_bytes(text.replace(b"the ", "thé ".encode("latin-1"), 50))
    (tmp_path / "crlf.txt").write_bytes(text.replace(b"\n", b"\r\n"))
    (tmp_path / "one_document.txt").write_bytes(b"\n".join(line for line in text.split(b"\n") if line.strip()))
    (tmp_path / "long_line.txt").write_bytes(text + b"\n" + b"word " * 210_000 + b"\n")
    return {  # name: (arguments, expected exit code, expected message piece)
        "non_utf8": ([f"--input_file={tmp_path / 'latin1.txt'}"], 0, "not valid UTF-8"),
        "crlf": ([f"--input_file={tmp_path / 'crlf.txt'}"], 0, "CRLF"),
        "empty_file": ([f"--input_file={tmp_path / 'empty.txt'}"], 1, "is empty"),
        "glob_matches_nothing": ([f"--input_file={tmp_path / 'nothing*.txt'}"], 1, "matches no file"),
        "single_document": ([f"--input_file={tmp_path / 'one_document.txt'}"], 0, "single document"),
        "one_megabyte_line": ([f"--input_file={tmp_path / 'long_line.txt'}"], 0, "MB long"),
        "vocab_without_mask": ([f"--input_file={good}", f"--vocab_file={no_mask}"], 1, "[MASK]"),
        "predictions_over_length": ([f"--input_file={good}", "--max_predictions_per_seq=200"], 1, "must be between"),
        "unwritable_output": ([f"--input_file={good}", "--output_file=/etc/passwd/out.tfrecord"], 1,
                              "--output_file /etc/passwd/out.tfrecord cannot be made: /etc/passwd is a file"),
        # A folder as a file: once 'all output files exist; nothing to do', and a traceback after the work.
        "output_is_a_folder": ([f"--input_file={good}", f"--output_file={tmp_path}"], 1,
                               f"--output_file {tmp_path} is a folder; give a file name."),
        "stats_file_is_a_folder": ([f"--input_file={good}", f"--stats_file={tmp_path}"], 1,
                                   f"--stats_file {tmp_path} is a folder; give a file name."),
        # With --overwrite it replaced the corpus by its records, exit 0.
        "output_is_the_input": ([f"--input_file={good}", f"--output_file={good}", "--overwrite"], 1,
                                f"--output_file {good} is (or once written would be) one of the --input_file files"),
        "stats_file_in_the_input_glob": ([f"--input_file={tmp_path / '*.txt'}", f"--stats_file={tmp_path / 's.txt'}"],
                                         1, "--stats_file"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "non_utf8",
        "crlf",
        "empty_file",
        "glob_matches_nothing",
        "single_document",
        "one_megabyte_line",
        "vocab_without_mask",
        "predictions_over_length",
        "unwritable_output",
        "output_is_a_folder",
        "stats_file_is_a_folder",
        "output_is_the_input",
        "stats_file_in_the_input_glob",
    ],
)
def test_bad_input_gives_one_clear_sentence(tmp_path, case):
    args, code, message = _bad_input_cases(tmp_path)[case]
    output = tmp_path / "out" / "data.tfrecord"
    output.parent.mkdir()
    defaults = [
        f"--output_file={output}",
        f"--vocab_file={shared_file(UNCASED)}",
        "--dupe_factor=1",
        f"--stats_file={tmp_path / 'out' / 'stats.json'}",
    ]
    given = {arg.split("=")[0] for arg in args}
    result = generate(*[a for a in defaults if a.split("=")[0] not in given], *args)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    assert any(message in line for line in lines), result.stderr
    prefix = "error: " if code else "warning: "
    assert len([line for line in lines if line.startswith(prefix)]) == 1, result.stderr
    if code:
        assert not any(output.parent.iterdir())  # nothing that looks like output
    else:
        assert output.exists() and len(read_file(output)["input_word_ids"]) > 0


def test_non_utf8_lines_are_counted(tmp_path):
    corpus = tmp_path / "bad.txt"
    corpus.write_bytes(b"caf\xe9 au lait .\nok line .\n\nanother doc \xff\xfe .\nmore .\n")
    stats = tmp_path / "stats.json"
    result = generate(
        f"--input_file={corpus}",
        f"--output_file={tmp_path / 'o'}",
        f"--vocab_file={shared_file(UNCASED)}",
        f"--stats_file={stats}",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(stats.read_text())["undecodable_lines"] == 2


def test_gzip_v2_names_and_dynamic_masking_files(tmp_path):
    corpus = cut(shared_file("pretrain/wikitext2_valid.tokens.txt"), tmp_path, 100_000)
    common = [f"--input_file={corpus}", f"--vocab_file={shared_file(UNCASED)}"]
    assert generate(*common, f"--output_file={tmp_path / 'static'}").returncode == 0
    assert generate(*common, f"--output_file={tmp_path / 'gz'}", "--gzip", "--use_v2_feature_names").returncode == 0
    assert generate(*common, f"--output_file={tmp_path / 'dynamic'}", "--dynamic_masking").returncode == 0
    assert (tmp_path / "gz").read_bytes()[:2] == b"\x1f\x8b"
    static, gz = read_file(tmp_path / "static"), read_file(tmp_path / "gz")
    assert all(np.array_equal(static[k], gz[k]) for k in static)  # same content, other names
    dynamic = read_file(tmp_path / "dynamic")
    assert "masked_lm_ids" not in dynamic
    # Each instance once and unmasked: about 1/dupe_factor of the static size.
    assert (tmp_path / "dynamic").stat().st_size <= 0.15 * (tmp_path / "static").stat().st_size


@pytest.mark.parametrize(
    "options",
    [{}, {"use_v2_feature_names": True}, {"dynamic_masking": True, "do_whole_word_mask": True}],
    ids=["v1", "v2", "dynamic"],
)
def test_the_reader_reads_the_writer_records_under_the_original_names(tmp_path, options):
    # The names as the original's create_pretraining_data.py and Model Garden's v2 write
    # them, spelled out here: the writer and the reader share bert_tf.data.schema.
    tf = pytest.importorskip("tensorflow")
    from bert_tf.data.reader import pretraining_dataset
    from bert_tf.tokenization import FullTokenizer
    from data_prep.analysis import undo_masking
    from data_prep.chunks import ChunkProcessor, ChunkTask, GenerationOptions

    v2, dynamic = options.get("use_v2_feature_names", False), options.get("dynamic_masking", False)
    ids, types = ("input_word_ids", "input_type_ids") if v2 else ("input_ids", "segment_ids")
    masked = ["word_continuation"] if dynamic else ["masked_lm_positions", "masked_lm_ids", "masked_lm_weights"]
    names = {ids, types, "input_mask", "next_sentence_labels", *masked}
    generation = GenerationOptions(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=2, **options)
    lines = [f"the {word} of sentence number {i} is unaffable and playing ." for i, word in enumerate("abcdefgh")]
    task = ChunkTask(0, 0, [lines[:4], lines[4:]], 0)
    path = tmp_path / "records"
    path.write_bytes(ChunkProcessor(generation, FullTokenizer(str(shared_file(UNCASED)))).process(task).records)
    written = [tf.train.Example.FromString(r.numpy()).features.feature for r in tf.data.TFRecordDataset(str(path))]
    assert len(written) > 4 and {frozenset(example) for example in written} == {frozenset(names)}
    masking = {"dynamic_masking": True, "vocab_size": 30522, "whole_word_mask": True, "seed": 0} if dynamic else {}
    batch = next(iter(pretraining_dataset(str(path), len(written), 32, 5, is_training=False, **masking)))
    batch = {name: value.numpy() for name, value in batch.items()}
    if dynamic:  # the reader masked the records anew: put their tokens back
        batch["input_word_ids"] = undo_masking(batch)
    model_names = {ids: "input_word_ids", types: "input_type_ids"}
    for name in names - {"word_continuation"}:  # the reader masks with it and drops it
        values = [example[name].float_list.value or example[name].int64_list.value for example in written]
        np.testing.assert_array_equal(batch[model_names.get(name, name)], values, err_msg=name)


@pytest.mark.parametrize("whole_word", [False, True])
def test_dynamic_masking_reader_rates(tmp_path, whole_word):
    from bert_tf.data.reader import pretraining_dataset

    corpus = cut(shared_file("pretrain/wikitext2_valid.tokens.txt"), tmp_path, 150_000)
    flags = ["--do_whole_word_mask"] if whole_word else []
    result = generate(
        f"--input_file={corpus}",
        f"--output_file={tmp_path / 'dyn'}",
        f"--vocab_file={shared_file(UNCASED)}",
        "--dynamic_masking",
        *flags,
    )
    assert result.returncode == 0, result.stderr
    originals = read_file(tmp_path / "dyn")

    def masked(seed: int):
        return pretraining_dataset(
            str(tmp_path / "dyn"),
            256,
            128,
            20,
            is_training=False,
            dynamic_masking=True,
            vocab_size=30522,
            whole_word_mask=whole_word,
            seed=seed,
        )

    batches = [{k: v.numpy() for k, v in batch.items()} for batch in masked(seed=3)]
    got = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    real = got["masked_lm_weights"] > 0
    rows = np.broadcast_to(np.arange(len(real))[:, None], real.shape)
    positions, labels = got["masked_lm_positions"], got["masked_lm_ids"]
    assert (originals["input_word_ids"][rows[real], positions[real]] == labels[real]).all()
    assert (np.diff(np.where(real, positions, 999 + np.arange(real.shape[1])), axis=1) > 0).all()
    shown = got["input_word_ids"][rows[real], positions[real]]
    share = {"mask": (shown == MASK_ID).mean(), "kept": (shown == labels[real]).mean()}
    assert abs(share["mask"] - 0.8) < 0.01 and abs(share["kept"] - 0.1) < 0.01
    tokens = got["input_mask"].sum()
    assert abs(real.sum() / tokens - 0.15) < (0.01 if not whole_word else 0.02)
    unchanged = np.ones_like(got["input_word_ids"], dtype=bool)
    unchanged[rows[real], positions[real]] = False
    assert (got["input_word_ids"][unchanged] == originals["input_word_ids"][unchanged]).all()
    if whole_word:
        chosen = ~unchanged
        continuation = originals["word_continuation"] > 0
        assert not (chosen[:, :-1] & continuation[:, 1:] & ~chosen[:, 1:]).any()
        # (A '##' piece right after [SEP] belongs to A's last word, as in the original;
        # one right after [CLS], where front truncation cut A mid-word, starts a word.)
        after_sep = originals["input_word_ids"][:, :-1] == SEP_ID
        after_cls = originals["input_word_ids"][:, :-1] == CLS_ID
        assert not (~chosen[:, :-1] & ~after_sep & ~after_cls & continuation[:, 1:] & chosen[:, 1:]).any()
    # Another seed, other masks.
    again = next(iter(masked(seed=4)))
    assert not np.array_equal(again["masked_lm_positions"].numpy(), batches[0]["masked_lm_positions"])


def test_chinese_whole_word_masking_masks_jieba_words_whole(tmp_path):
    require_module("rjieba", "Chinese whole-word masking segments with rjieba (jieba-rs)")
    corpus = cut(shared_file("pretrain/clue_zh_small.txt"), tmp_path, 60_000)
    result = generate(
        f"--input_file={corpus}",
        f"--output_file={tmp_path / 'zh'}",
        f"--vocab_file={shared_file(CHINESE)}",
        "--dynamic_masking",
        "--zh_whole_word_mask",
    )
    assert result.returncode == 0, result.stderr
    examples = read_file(tmp_path / "zh")
    continuation = examples["word_continuation"] > 0
    # Jieba joins most Chinese characters into words of two or more.
    assert 0.2 < continuation.sum() / examples["input_mask"].sum() < 0.6


def test_chinese_whole_word_masking_without_rjieba_says_what_to_install(tmp_path):
    # A user without rjieba: an `rjieba` that fails to import, first on the path.
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "rjieba.py").write_text('raise ImportError("not installed (test)")\n')
    corpus = cut(shared_file("pretrain/clue_zh_small.txt"), tmp_path, 2_000)
    result = PROJECT.run(
        "create_pretraining_data.py", "--noprogress", f"--input_file={corpus}", f"--output_file={tmp_path / 'zh'}",
        f"--vocab_file={shared_file(CHINESE)}", "--zh_whole_word_mask",
        env={"PYTHONPATH": os.pathsep.join([str(blocked), str(REPO_ROOT)])}, timeout=300,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --zh_whole_word_mask needs the rjieba word segmenter: pip install rjieba."
    )
    assert "Traceback" not in result.stderr
    assert list(tmp_path.glob("zh*")) == []


# ----------------------------------------------------------------------------------
# Corpus and vocabulary tools


def test_prepare_corpus_makes_documents_and_sentences_of_wikitext(tmp_path):
    require_module("sentencex", "the sentence segmenter of prepare_corpus")
    corpus = cut(shared_file("pretrain/wikitext2_valid.tokens.txt"), tmp_path, 300_000)
    prepared = tmp_path / "corpus" / "prepared.txt"  # every tool makes the folders of its outputs
    flags = [f"--input_file={corpus}", f"--output_file={prepared}", "--preset=wikitext"]
    result = PROJECT.run("-m", "data_prep.prepare_corpus", *flags, timeout=120)
    assert result.returncode == 0, result.stderr
    documents = prepared.read_text(encoding="utf-8").split("\n\n")
    titles = [
        line
        for line in corpus.read_text(encoding="utf-8").splitlines()
        if line.startswith(" = ") and not line.startswith(" = = ")
    ]
    assert len(documents) == len(titles)
    assert not any(line.startswith(" =") for line in prepared.read_text(encoding="utf-8").splitlines())
    stats = {}
    for name, source in [("raw", corpus), ("prepared", prepared)]:
        out = tmp_path / "stats" / f"{name}.json"
        assert (
            generate(
                f"--input_file={source}",
                f"--output_file={tmp_path / 'records' / name}",
                f"--vocab_file={shared_file(UNCASED)}",
                f"--stats_file={out}",
            ).returncode
            == 0
        )
        stats[name] = json.loads(out.read_text())
    assert stats["raw"]["not_next_rate"] > 0.85  # one paragraph a document
    assert stats["prepared"]["not_next_rate"] < 0.6


def test_build_vocab_has_bert_layout_and_covers_the_corpus(tmp_path):
    require_module("tokenizers", "the WordPiece trainer of build_vocab")
    from bert_tf.tokenization import FullTokenizer

    corpus = shared_file("pretrain/wikitext2_valid.tokens.txt")
    vocab = tmp_path / "vocab" / "vocab.txt"
    flags = [f"--input_file={corpus}", f"--output_file={vocab}", "--vocab_size=5000"]
    result = PROJECT.run("-m", "data_prep.build_vocab", *flags, timeout=120)
    assert result.returncode == 0, result.stderr
    tokens = vocab.read_text(encoding="utf-8").splitlines()
    assert len(tokens) == len(set(tokens)) == 5000
    assert (
        tokens[0] == "[PAD]" and tokens[1] == "[unused0]" and tokens[100:104] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    )
    assert any(t.startswith("##") for t in tokens)
    tokenizer = FullTokenizer(str(vocab), do_lower_case=True)
    pieces = tokenizer.tokenize(" ".join(corpus.read_text(encoding="utf-8").splitlines()[:500]))
    assert pieces.count("[UNK]") / len(pieces) < 0.001


def test_build_vocab_breaks_ties_the_same_way_on_every_run(tmp_path):
    """`tokenizers`' trainer alone breaks ties (characters at the alphabet's limit, `##`
    forms' numbers, equally frequent merges) in hash order: six runs on this corpus of
    ties gave six vocabularies, and two on a Wikipedia slice two (tokenizers#1794)."""
    require_module("tokenizers", "the WordPiece trainer of build_vocab")
    from data_prep.build_vocab import train_wordpiece

    ties = tmp_path / "ties.txt"  # 26 letters, each as often as every other: all ties
    ties.write_text(("".join(f"{letter * 3} " for letter in string.ascii_lowercase) + "\n") * 20)
    runs = {tuple(train_wordpiece([str(ties)], 200, do_lower_case=True, limit_alphabet=10)) for _ in range(6)}
    assert len(runs) == 1
    (pieces,) = runs
    # The 10 most frequent characters, ties in code-point order; then their ## forms.
    assert list(pieces[:20]) == [*"abcdefghij", *(f"##{letter}" for letter in "abcdefghij")]

    wiki = shared_file("pretrain/zh/zhwiki_wiki_00")  # more than 1,000 characters: ties at the limit
    vocabularies = []
    for run in range(2):
        vocab = tmp_path / f"vocab{run}.txt"
        flags = [f"--input_file={wiki}", f"--output_file={vocab}", "--vocab_size=3000"]
        assert PROJECT.run("-m", "data_prep.build_vocab", *flags, timeout=120).returncode == 0
        vocabularies.append(vocab.read_bytes())
    assert vocabularies[0] == vocabularies[1]


@pytest.mark.parametrize("flags, message", [
    (["--vocab_size=50"], "--vocab_size 50 leaves no room for pieces after the 104 special tokens"),  # an OverflowError
    (["--vocab_size=0"], "--vocab_size 0 leaves no room for pieces"),
    (["--num_unused=-1"], "--num_unused must be 0 or more, got -1."),
    (["--output_file={tmp}"], "--output_file {tmp} is a folder; give a file name."),  # left a .incomplete file
    (["--output_file={corpus}"], "--output_file {corpus} is (or once written would be) one of the --input_file files"),
])
def test_build_vocab_refuses_bad_flags_before_training(tmp_path, flags, message):
    require_module("tokenizers", "the WordPiece trainer of build_vocab")
    corpus = cut(shared_file("pretrain/wikitext2_valid.tokens.txt"), tmp_path, 20_000)
    names = {"tmp": tmp_path, "corpus": corpus}
    given = [flag.format(**names) for flag in flags]
    defaults = [f"--input_file={corpus}", f"--output_file={tmp_path / 'vocab.txt'}", "--vocab_size=500"]
    named = {flag.split("=")[0] for flag in given}
    result = PROJECT.run("-m", "data_prep.build_vocab", *[f for f in defaults if f.split("=")[0] not in named], *given,
                         timeout=120)
    assert result.returncode == 1 and result.stderr.startswith("error: " + message.format(**names)), result.stderr
    assert result.stderr.count("\n") == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == [corpus.name]  # nothing written, nothing replaced
