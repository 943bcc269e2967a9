"""How the local data path scales: each worker's read cost, and the efficiency model.

On a many-file corpus (the shared `pretrain/enwiki/wiki_*`, WikiExtractor output read
as text) and the plan of chunks that `data_prep.generate` makes, it times making each
chunk's records (`ChunkProcessor`, once read) and reading the whole corpus the way a
worker reads its spans (`read_chunk`: every document parsed and decoded; the fastest
of 3 passes), and counts the bytes each of N workers reads to read its own spans
(worker w does the chunks k with k mod N == w), read at the whole read's rate. Two
figures per N:

- here: the 1-worker time over N times the slowest worker's, on this corpus (a small
  corpus has few chunks per worker: this includes their imbalance), with each worker
  reading its spans, and with each reading the whole corpus (the design before);
- the model for a corpus of many chunks per worker, where only the reads cost extra:
  1 / (1 + r x), r the whole read's share of the 1-worker time and x the extra reads
  of all workers together, in whole-corpus reads: the documents across span ends
  that two readers read (x = N - 1 when every worker read everything).

Start-up and the shard joins are left out.

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
from data_prep.generate import ChunkPlan, Share, read_chunk  # noqa: E402


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


def process_costs(plan: ChunkPlan, vocab: str) -> list[float]:
    """Seconds to make each chunk's records, once read (in plan order)."""
    processor = ChunkProcessor(GenerationOptions(), FullTokenizer(vocab))
    costs = []
    for planned in plan:
        task = read_chunk(planned, InputProblems(), lambda _: None)
        start = time.perf_counter()
        processor.process(task)
        costs.append(time.perf_counter() - start)
    return costs


def read_bytes(plan: ChunkPlan, workers: int) -> list[int]:
    """Per worker: the bytes it reads to read its own spans (`read_chunk`)."""
    sizes = []
    for worker in range(workers):
        CountingFile.counted = 0
        for planned in Share(worker, workers, set(range(plan.num_shards))).chunks(plan):
            read_chunk(planned, InputProblems(), lambda _: None, CountingFile)
        sizes.append(CountingFile.counted)
    return sizes


def whole_read_seconds(plan: ChunkPlan, passes: int = 3) -> float:
    """Seconds to read every chunk once (one worker's read), the fastest of `passes`."""
    seconds = []
    for _ in range(passes):
        start = time.perf_counter()
        for planned in plan:
            read_chunk(planned, InputProblems(), lambda _: None)
        seconds.append(time.perf_counter() - start)
    return min(seconds)


def model(process: list[float], reads: list[int], whole_read_s: float, whole_bytes: int, corpus_bytes: int) -> dict:
    """The efficiency at N = len(reads) workers, here and in the model (module docstring).

    A worker's read takes the whole read's time per byte: timing small shares one by one
    on this shared machine measures its caches more than the reading.
    """
    workers = len(reads)
    total = sum(process) + whole_read_s
    seconds = [whole_read_s * size / whole_bytes for size in reads]
    times = [sum(process[w::workers]) + seconds[w] for w in range(workers)]
    old_times = [sum(process[w::workers]) + whole_read_s for w in range(workers)]
    read_share = whole_read_s / total
    # Against reading the corpus once: spans cut documents that two readers then read.
    extra = sum(reads) / corpus_bytes - 1
    return {
        "workers": workers,
        "read_mb_per_worker": max(reads) / 1e6,
        "read_share_of_corpus": max(reads) / corpus_bytes,
        "read_s_per_worker": max(seconds),
        "efficiency_here": total / (workers * max(times)),
        "efficiency_here_whole_read": total / (workers * max(old_times)),
        "model_spans": 1 / (1 + read_share * extra),
        "model_spans_loss_pct": 100 * (1 - 1 / (1 + read_share * extra)),  # the table shows 3 digits
        "model_whole_read": 1 / (1 + read_share * (workers - 1)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=16, help="how many of the 64 enwiki files (about 1 MB each)")
    parser.add_argument("--workers", default="1,2,16,64")
    parser.add_argument("--num_shards", type=int, default=16)
    args = parser.parse_args()
    files = sorted(str(p) for p in (data_dir() / "pretrain" / "enwiki").glob("wiki_*"))[: args.files]
    vocab = str(data_dir() / "vocab" / "google_uncased_en_vocab.txt")
    plan = ChunkPlan([(path, os.path.getsize(path)) for path in files], args.num_shards)
    process = process_costs(plan, vocab)
    counts = [int(n) for n in args.workers.split(",")]
    whole_read_s = whole_read_seconds(plan)
    corpus_bytes = plan.total_bytes
    reads = {n: read_bytes(plan, n) for n in sorted({1, *counts})}
    (whole_bytes,) = reads[1]
    rows = [model(process, reads[n], whole_read_s, whole_bytes, corpus_bytes) for n in counts]
    print_table(rows, list(rows[0]))
    summary = {
        "corpus_mb": corpus_bytes / 1e6,
        "files": len(files),
        "chunks": len(process),
        "one_worker_s": sum(process) + whole_read_s,
        "whole_read_s": whole_read_s,
        "read_share_of_one_worker": whole_read_s / (sum(process) + whole_read_s),
        "bytes_read_over_corpus": sum(reads[max(counts)]) / corpus_bytes,
    }
    print(summary)
    print("wrote", write_json("data_prep_scaling", {"summary": summary, "rows": rows}))


if __name__ == "__main__":
    main()
