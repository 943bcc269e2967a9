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
