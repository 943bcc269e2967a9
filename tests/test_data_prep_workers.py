"""The records do not depend on how the work is split: any --num_workers gives the
same multiset of records (order and shard split may differ), and each worker reads
only its own byte ranges of the input."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import data_prep  # noqa: F401  (before bert_tf: see data_prep/__init__.py)
from data_prep.chunks import GenerationOptions
from data_prep.generate import Job, run
from data_prep.tfrecord import read_records
from tests.conftest import shared_file

# corpus, vocabulary, bytes of it (slices keep this fast), extra options.
CORPORA = {
    "wikitext2": ("pretrain/wikitext2_valid.tokens.txt", "vocab/google_uncased_en_vocab.txt", 300_000, {}),
    "clue_zh": ("pretrain/clue_zh_small.txt", "vocab/google_zh_vocab.txt", 200_000, {"do_whole_word_mask": True}),
}


def corpus_slice(name: str, directory: Path) -> tuple[Path, Path, dict]:
    """The first lines of a shared corpus (about `size` bytes), and its vocabulary."""
    relative, vocab, size, extra = CORPORA[name]
    data = shared_file(relative).read_bytes()[:size]
    path = directory / f"{name}.txt"
    path.write_bytes(data[: data.rfind(b"\n") + 1])
    return path, shared_file(vocab), extra


def record_multiset(paths: list[str]) -> Counter:
    return Counter(record for path in paths for record in read_records(path))


def generate(corpus: list[Path], vocab: Path, output: Path, num_workers: int, shards: int = 2, **extra) -> Counter:
    output.mkdir()
    files = [str(output / f"part-{k}") for k in range(shards)]
    options = GenerationOptions(**{"dupe_factor": 2, "random_seed": 7, **extra})
    run(Job([str(path) for path in corpus], files, str(vocab), options=options, num_workers=num_workers), progress=False)
    return record_multiset(files)


@pytest.mark.parametrize("name", list(CORPORA))
def test_any_worker_count_writes_the_same_records(tmp_path, name):
    corpus, vocab, extra = corpus_slice(name, tmp_path)
    one = generate([corpus], vocab, tmp_path / "w1", 1, **extra)
    assert sum(one.values()) > 1_000
    for workers in (2, 3):
        assert generate([corpus], vocab, tmp_path / f"w{workers}", workers, **extra) == one, workers
    # Not a vacuous equality: another seed gives other records (all but a few).
    other = generate([corpus], vocab, tmp_path / "seed", 2, random_seed=8, **extra)
    assert sum((other & one).values()) < 0.01 * sum(one.values())


def test_many_files_give_the_same_records_with_any_worker_count(tmp_path):
    corpus, vocab, _ = corpus_slice("wikitext2", tmp_path)
    lines = corpus.read_bytes().splitlines(keepends=True)
    files = []
    for k, part in enumerate((lines[:400], lines[400:410], lines[410:])):  # a 10-line file too
        files.append(tmp_path / f"part{k}.txt")
        files[-1].write_bytes(b"".join(part))
    one = generate(files, vocab, tmp_path / "w1", 1, shards=3)
    assert generate(files, vocab, tmp_path / "w2", 2, shards=3) == one


class CountingOpener:
    """`open` that counts the bytes read through it."""

    def __init__(self):
        self.bytes_read = 0

    def __call__(self, path, mode):
        file = open(path, mode)  # noqa: SIM115 (closed by span_documents' `with`)
        counter, read, readline = self, file.read, file.readline

        def counted(function):
            def wrapper(*args):
                data = function(*args)
                counter.bytes_read += len(data)
                return data

            return wrapper

        file.read, file.readline = counted(read), counted(readline)
        return _Lines(file)


class _Lines:
    """Iterates a file by `readline` (so that reads are counted)."""

    def __init__(self, file):
        self.file = file

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()

    def __iter__(self):
        return iter(self.file.readline, b"")


@pytest.mark.parametrize("num_workers", [4, 16])
def test_each_worker_reads_only_its_own_spans(tmp_path, num_workers):
    from data_prep.corpus import InputProblems, read_documents, span_documents
    from data_prep.generate import ChunkPlan, Share

    enwiki = sorted(shared_file("pretrain/enwiki/wiki_00").parent.glob("wiki_0[0-3]"))
    sizes = [(str(path), path.stat().st_size) for path in enwiki]
    total = sum(size for _, size in sizes)
    plan = ChunkPlan(sizes, num_shards=4)
    documents, reads = [], []
    for worker in range(num_workers):
        opener = CountingOpener()
        for chunk in Share(worker, num_workers, set(range(4))).chunks(plan):
            documents += [(d.start, d.lines) for d in span_documents(chunk.span, InputProblems(), print, opener)]
        reads.append(opener.bytes_read)
    # Every document once, whoever read it; each worker read about its 1/N of the bytes
    # (a document across a span's end is read by both spans' readers: 7% more here).
    assert sorted(documents) == [(d.start, d.lines) for d in read_documents([p for p, _ in sizes], InputProblems(), print)]
    assert max(reads) < 1.2 * total / num_workers + 2 * (64 << 10), (reads, total)
    assert sum(reads) < 1.1 * total


def test_input_problems_are_reported_whichever_worker_reads_them(tmp_path):
    corpus, vocab, _ = corpus_slice("wikitext2", tmp_path)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"A first sentence.\r\nA bad \xff byte.\r\n\r\nAnother document here.\r\n")
    seen = {}
    for workers in (1, 2, 3):
        (tmp_path / f"w{workers}").mkdir()
        warnings: list[str] = []
        job = Job([str(corpus), str(bad)], [str(tmp_path / f"w{workers}" / "out")], str(vocab),
                  options=GenerationOptions(dupe_factor=1), num_workers=workers)
        stats = run(job, progress=False, warn=warnings.append)
        seen[workers] = (stats["undecodable_lines"], stats["crlf_files"], stats["documents"], sorted(warnings))
    assert seen[1][:2] == (1, [str(bad)])
    assert seen[2] == seen[1] and seen[3] == seen[1]
    assert any("CRLF" in message for message in seen[1][3]) and any("UTF-8" in message for message in seen[1][3])


def test_records_are_shuffled_across_the_whole_shard(tmp_path, monkeypatch):
    """As the original shuffles all of a file's instances: a record lands anywhere in its
    shard, not near its place in the corpus. Document i's sentences are made of the
    token d<i>, so each record names the document its first segment comes from. With 8
    buckets of at most 64 KB the shuffle takes its second, recursive pass, and writes the
    same records."""
    import numpy as np
    import tensorflow as tf

    from data_prep import generate as generation

    documents = 3_000
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"d{i}" for i in range(documents))]))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"d{i} d{i} d{i} d{i} d{i}\n" * 8 + "\n" for i in range(documents)))
    options = GenerationOptions(max_seq_length=32, max_predictions_per_seq=4, dupe_factor=2, random_seed=3)

    def shuffled(name: str) -> list[bytes]:
        (tmp_path / name).mkdir()
        output = str(tmp_path / name / "train.tfrecord")
        run(Job([str(corpus)], [output], str(vocab), options=options), progress=False)
        return read_records(output)

    in_memory = shuffled("one_pass")
    monkeypatch.setattr(generation, "SHUFFLE_BUCKETS", 8)
    monkeypatch.setattr(generation, "BUCKET_BYTES", 64 << 10)
    records = shuffled("two_passes")
    assert Counter(records) == Counter(in_memory) and records != in_memory

    def source(record: bytes) -> int:
        """The most frequent word of the first segment: masking changes 15% of them."""
        features = tf.train.Example.FromString(record).features.feature
        ids, segments = features["input_ids"].int64_list.value, features["segment_ids"].int64_list.value
        return Counter(i for i, segment in zip(ids, segments) if segment == 0 and i >= 5).most_common(1)[0][0] - 5

    sources = np.array([source(record) for record in records])
    assert len(sources) > 10_000 and len(set(sources.tolist())) > 0.99 * documents
    assert abs(np.corrcoef(np.arange(len(sources)), sources)[0, 1]) < 0.03  # in corpus order it is 1
    # Each tenth of the file draws from the whole corpus: its mean document is the
    # middle one to within ~4 standard errors (in corpus order: 150, 450, ..., 2850).
    means = [tenth.mean() for tenth in np.array_split(sources, 10)]
    assert all(abs(mean - documents / 2) < 250 for mean in means), means
