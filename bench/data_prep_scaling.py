"""How the local data path scales: each worker's read cost, and the efficiency model.

One pass over a many-file corpus (the shared `pretrain/enwiki/wiki_*`, WikiExtractor
output read as text) times, chunk by chunk of the plan that `data_prep.generate` makes,
reading the chunk's span (`read_chunk`) and making its records (`ChunkProcessor`).
Worker w of N does the chunks k with k mod N == w, so its time is the sum of their
costs; the efficiency at N workers is the 1-worker time over N times the slowest
worker's (imbalance and the bytes that two spans' readers both read included; start-up
and the shard joins left out). It also gives the old design's figure, where every
worker read the whole corpus and processed its share, and the model for a corpus of
many chunks per worker (balanced): 1 / (1 + r x) with r the read's share of the
1-worker time and x the extra reads per worker (the corpus' N - 1 other shares before;
now the bytes that two spans' readers both read).

Prints a table and writes bench/results/data_prep_scaling.json.

Usage: python bench/data_prep_scaling.py [--files 16] [--workers 1,2,16,64]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# The repository first: run as `python bench/data_prep_scaling.py`, this folder would
# come first on sys.path and bench/data_prep.py would shadow the data_prep package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import data_dir, print_table, write_json  # noqa: E402

import data_prep  # noqa: F401,E402  (before bert_tf: see data_prep/__init__.py)
from bert_tf.tokenization import FullTokenizer  # noqa: E402
from data_prep.chunks import ChunkProcessor, GenerationOptions  # noqa: E402
from data_prep.corpus import InputProblems  # noqa: E402
from data_prep.generate import ChunkPlan, read_chunk  # noqa: E402


class CountingFile:
    """A binary file that counts the bytes read from it (by `read`, `readline` or lines)."""

    counted = 0

    def __init__(self, path: str, mode: str):
        self._file = open(path, mode)  # noqa: SIM115

    def read(self, *args):
        data = self._file.read(*args)
        CountingFile.counted += len(data)
        return data

    def readline(self, *args):
        return self.read_line(self._file.readline(*args))

    def read_line(self, line: bytes) -> bytes:
        CountingFile.counted += len(line)
        return line

    def seek(self, *args):
        return self._file.seek(*args)

    def __iter__(self):
        return (self.read_line(line) for line in self._file)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()


def chunk_costs(files: list[str], vocab: str, num_shards: int) -> list[dict]:
    """Seconds to read and to process each chunk of the plan, and the bytes read."""
    processor = ChunkProcessor(GenerationOptions(), FullTokenizer(vocab))
    plan = ChunkPlan([(path, os.path.getsize(path)) for path in files], num_shards)
    costs = []
    for planned in plan:
        reads = []
        for _ in range(3):  # the fastest of 3: a read is cheap, a pause of this shared machine is not
            CountingFile.counted = 0
            start = time.perf_counter()
            task = read_chunk(planned, InputProblems(), lambda _: None, CountingFile)
            reads.append(time.perf_counter() - start)
        start = time.perf_counter()
        processor.process(task)
        costs.append({
            "read_s": min(reads),
            "process_s": time.perf_counter() - start,
            "bytes_read": CountingFile.counted,
            "span_bytes": planned.span.end - planned.span.start,
        })
    return costs


def model(costs: list[dict], workers: int) -> dict:
    """The efficiency at `workers` workers, this design's and the whole-corpus read's."""
    total = sum(c["read_s"] + c["process_s"] for c in costs)
    read_all = sum(c["read_s"] for c in costs)
    shares = [costs[w::workers] for w in range(workers)]
    times = [sum(c["read_s"] + c["process_s"] for c in share) for share in shares]
    old_times = [read_all + sum(c["process_s"] for c in share) for share in shares]
    reads = [sum(c["bytes_read"] for c in share) for share in shares]
    read_seconds = [sum(c["read_s"] for c in share) for share in shares]
    corpus_bytes = sum(c["span_bytes"] for c in costs)
    # A corpus of many chunks per worker balances: what is left is the read. Each worker
    # reads its 1/N (plus the documents across its spans' ends) instead of all of it.
    read_share = read_all / total
    extra_bytes = sum(c["bytes_read"] for c in costs) / corpus_bytes - 1
    return {
        "workers": workers,
        "read_mb_per_worker": max(reads) / 1e6,
        "read_share_of_corpus": max(reads) / corpus_bytes,
        "read_s_per_worker": max(read_seconds),
        "read_share_of_work": max(read_seconds) / max(times),
        "efficiency": total / (workers * max(times)),
        "efficiency_whole_corpus_read": total / (workers * max(old_times)),
        "model_spans": 1 / (1 + read_share * extra_bytes),
        "model_whole_corpus_read": 1 / (1 + read_share * (workers - 1)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=16, help="how many of the 64 enwiki files (about 1 MB each)")
    parser.add_argument("--workers", default="1,2,16,64")
    parser.add_argument("--num_shards", type=int, default=16)
    args = parser.parse_args()
    files = sorted(str(p) for p in (data_dir() / "pretrain" / "enwiki").glob("wiki_*"))[: args.files]
    vocab = str(data_dir() / "vocab" / "google_uncased_en_vocab.txt")
    costs = chunk_costs(files, vocab, args.num_shards)
    rows = [model(costs, int(n)) for n in args.workers.split(",")]
    print_table(rows, list(rows[0]))
    read = sum(c["read_s"] for c in costs)
    work = sum(c["read_s"] + c["process_s"] for c in costs)
    summary = {
        "corpus_mb": sum(c["span_bytes"] for c in costs) / 1e6,
        "files": len(files),
        "chunks": len(costs),
        "one_worker_s": work,
        "read_share_of_one_worker": read / work,
        "bytes_read_over_corpus": sum(c["bytes_read"] for c in costs) / sum(c["span_bytes"] for c in costs),
    }
    print(summary)
    print("wrote", write_json("data_prep_scaling", {"summary": summary, "rows": rows}))


if __name__ == "__main__":
    main()
