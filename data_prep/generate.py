"""Streaming, parallel, resumable generation of pre-training TFRecords.

Data flow (memory stays bounded whatever the corpus size), in each of N workers:

    input files --ChunkPlan--> byte spans of ~CHUNK_BYTES --this worker's spans-->
    documents that start in them (tokenize, pack, mask, serialize) --> per-shard
    shuffle (temporary bucket files) --> the worker's part of the shard

The corpus (the input files back to back) is cut into spans at multiples of
CHUNK_BYTES, at file ends and at shard boundaries: positions that depend on the file
sizes only, so the plan is known before anything is read. A chunk is the documents
that start in a span. Chunk k of the plan is worker k mod N's, and a worker reads only
its own spans (each to the end of its last document), whether the input is one big
file or many, so reading costs 1/N of the corpus per worker and no text or records
travel between processes. The main process is worker 0; it hears the others' counts
and warnings through pipes and, once every part of a shard is complete, joins them
(in the kernel) into the shard file under a temporary name and renames it. A single
worker writes the shard file directly.

Shard i holds the instances of the documents that start in the i-th 1/N of the input
bytes, so shards complete one after another, and a re-run can skip the complete ones
without changing the others. Only when they were made from the same inputs and settings:
once a shard is complete, its settings are written beside it (`.NAME.settings.json`,
hidden: readers' globs skip it; the record of a shard being redone is removed first), and
a re-run with other flags refuses a shard that exists, naming what changed, instead of
keeping stale records. Each chunk's records are a function of its text, the
options, the seed and its position (see `data_prep.chunks`), so any worker count
writes the same multiset of records; only their order within a shard differs.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import gzip
import hashlib
import json
import multiprocessing
import multiprocessing.connection
import os
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

from bert_tf.atomic import folders_of, incomplete_path, write_text
from bert_tf.errors import BertTfError
from bert_tf.flags import check_output_file, setting_changes
from bert_tf.tokenization import FullTokenizer
from data_prep.chunks import ChunkProcessor, ChunkResult, ChunkTask, GenerationOptions
from data_prep.corpus import InputProblems, Span, file_spans, non_empty_files, span_documents
from data_prep.encoding import chinese_word_segmenter
from data_prep.tfrecord import RecordFileWriter, concatenate_files, split_records

# Text per chunk: big enough that numpy works on thousands of instances at once, small
# enough to balance work between workers on a 1 MB corpus.
CHUNK_BYTES = 64 << 10
# The original shuffles all of a file's instances in memory. A shard part can be any
# size here, so it is shuffled in two passes in bounded memory (`BucketShuffle`): groups
# of consecutive records of a chunk (already in random order within the chunk) go to
# temporary files at random, then each file is shuffled in memory and written out. A
# record can land anywhere in its part, as in the original. A buffer of 16 MB, the way
# before, kept a record within ~16 MB of records of its place in the corpus: the 83 MB
# of records of 30,000 numbered documents came out with a correlation of 0.82 between a
# record's position and its document (now -0.01), a 374 MB shard of Wikipedia had a
# passage's dupe_factor copies within a few hundred steps of each other, and a corpus of
# several sources (news, then encyclopedia, then reviews) was trained on one source after
# the other.
SHUFFLE_BUCKETS = 64  # open files per shard being written: Beam may write several in one process
BUCKET_BYTES = 256 << 20  # a bucket file larger than this is shuffled again in buckets
SHUFFLE_GROUP = 8
# Above this share of NotNext instances the corpus is mostly one-sentence documents.
NOT_NEXT_WARNING = 0.6


@dataclass
class Job:
    """A generation run: the inputs, outputs and how to run it."""

    input_files: list[str]
    output_files: list[str]
    vocab_file: str
    do_lower_case: bool = True
    options: GenerationOptions = field(default_factory=GenerationOptions)
    gzip: bool = False
    num_workers: int = 1
    overwrite: bool = False
    stats_file: str | None = None


def validate(options: GenerationOptions, num_workers: int) -> None:
    """Raises `BertTfError` for flag values the algorithm cannot work with."""
    if options.max_seq_length < 5:
        raise BertTfError(
            f"--max_seq_length is {options.max_seq_length}; it must be at least 5 ([CLS] A [SEP] B [SEP])."
        )
    if not 1 <= options.max_predictions_per_seq <= options.max_seq_length:
        raise BertTfError(
            f"--max_predictions_per_seq ({options.max_predictions_per_seq}) must be between 1 and "
            f"--max_seq_length ({options.max_seq_length})."
        )
    if not 0 < options.masked_lm_prob <= 1:
        raise BertTfError(f"--masked_lm_prob is {options.masked_lm_prob}; it must be in (0, 1].")
    if not 0 <= options.short_seq_prob <= 1:
        raise BertTfError(f"--short_seq_prob is {options.short_seq_prob}; it must be in [0, 1].")
    if options.dupe_factor < 1:
        raise BertTfError(f"--dupe_factor is {options.dupe_factor}; it must be at least 1.")
    if num_workers < 1:
        raise BertTfError(f"--num_workers is {num_workers}; it must be at least 1.")
    if options.pool_documents < 1:
        raise BertTfError(f"--notnext_pool_documents is {options.pool_documents}; it must be at least 1.")


class Progress:
    """One line on stderr: documents, instances, MB/s, ETA (rewritten in place on a tty)."""

    def __init__(self, total_bytes: int, enabled: bool):
        self.total_bytes = total_bytes
        self.enabled = enabled
        self.start = time.monotonic()
        self._last = 0.0
        self._tty = sys.stderr.isatty()

    def update(self, done_bytes: int, documents: int, instances: int, final: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not final and now - self._last < (0.5 if self._tty else 15.0)):
            return
        self._last = now
        elapsed = max(now - self.start, 1e-9)
        rate = done_bytes / elapsed
        eta = (self.total_bytes - done_bytes) / rate if rate > 0 else float("inf")
        line = (
            f"{documents:,} documents, {instances:,} instances, {done_bytes / 1e6:,.1f}/"
            f"{self.total_bytes / 1e6:,.1f} MB, {rate / 1e6:.2f} MB/s, "
            + (f"{elapsed:.1f} s" if final else f"ETA {eta:.0f} s")
        )
        end = "\n" if final or not self._tty else ""
        print(("\r" if self._tty else "") + line.ljust(79), end=end, file=sys.stderr, flush=True)


class BucketShuffle:
    """Shuffles any number of items in bounded memory, in two passes.

    `push` sends each item at random to one of `buckets` (by default `SHUFFLE_BUCKETS`)
    unnamed temporary files in `directory` (the system's when None); `drain` reads the
    files back one at a time, shuffles each in memory and returns its items. Memory: one
    file's items, at most about `BUCKET_BYTES`: a larger file is shuffled again in
    buckets of its own, once (64 x 64 buckets of 256 MB: 1 TB). The files vanish when
    closed, or with the process if it is killed.

    >>> shuffle = BucketShuffle(random.Random(0), buckets=4)
    >>> shuffle.push([bytes([i]) for i in range(10)])
    >>> out = [item[0] for items in shuffle.drain() for item in items]
    >>> out, sorted(out) == list(range(10))
    ([5, 2, 7, 8, 3, 9, 4, 0, 1, 6], True)
    """

    def __init__(self, rng: random.Random, directory: str | None = None, buckets: int | None = None,
                 nested: bool = False):  # fmt: skip
        self._rng = rng
        self._directory = directory
        self._buckets = buckets or SHUFFLE_BUCKETS
        self._nested = nested
        self._files: list = []  # opened on the first push: an empty shard part opens none

    def push(self, items: list[bytes]) -> None:
        if not self._files:
            self._files = [tempfile.TemporaryFile(dir=self._directory) for _ in range(self._buckets)]
        uniform, buckets, files = self._rng.random, self._buckets, self._files
        for item in items:
            files[int(uniform() * buckets)].write(len(item).to_bytes(4, "little") + item)

    def drain(self) -> Iterator[list[bytes]]:
        """Every item, one shuffled bucket after another; closes the files."""
        try:
            for file in self._files:
                size = file.tell()  # each file is at its end after the pushes
                file.seek(0)
                if size <= BUCKET_BYTES or self._nested:
                    items, _ = _split_items(file.read())
                    self._rng.shuffle(items)
                    yield items
                    continue
                inner = BucketShuffle(self._rng, self._directory, self._buckets, nested=True)
                rest = b""
                for block in iter(lambda: file.read(BUCKET_BYTES), b""):
                    data = rest + block
                    items, used = _split_items(data)
                    inner.push(items)
                    rest = data[used:]
                yield from inner.drain()
        finally:
            self.close()

    def close(self) -> None:
        for file in self._files:
            file.close()
        self._files = []


def _split_items(data: bytes) -> tuple[list[bytes], int]:
    """The whole length-prefixed items at the start of `data`, and how many bytes they take."""
    items, position = [], 0
    while position + 4 <= len(data):
        end = position + 4 + int.from_bytes(data[position : position + 4], "little")
        if end > len(data):
            break
        items.append(data[position + 4 : end])
        position = end
    return items, position


class ShardSink:
    """Writes one shard: shuffles, then appends to its temporary file until `commit`.

    `writer` is a `RecordFileWriter` or one with its methods (the Beam pipeline's, on
    the runner's file system).
    """

    def __init__(self, writer: RecordFileWriter, random_seed: int, shard: int, worker: int,
                 scratch_dir: str | None = None):  # fmt: skip
        self.writer = writer
        self.shuffle = BucketShuffle(random.Random(f"{random_seed}/shuffle/{shard}/{worker}"), scratch_dir)

    def add(self, result: ChunkResult) -> None:
        self.shuffle.push(split_records(result.records, result.offsets, SHUFFLE_GROUP))

    def commit(self, sync: bool = True) -> None:
        for items in self.shuffle.drain():
            self.writer.write(b"".join(items))
        self.writer.commit(sync)

    def abort(self) -> None:
        self.shuffle.close()
        self.writer.abort()


# === The plan: chunks as byte spans ===
@dataclass(frozen=True)
class PlannedChunk:
    """A chunk before it is read: its shard and the span it reads."""

    shard: int
    index: int  # its position: where its span starts in the corpus (seeds its random streams)
    span: Span


class ChunkPlan:
    """The chunks of files of the given (path, size), in corpus order: their spans are
    cut at multiples of `chunk_bytes` of the corpus, at file ends and where shards start.

    Computed, not stored: a corpus of 365 GB has 5.6 million chunks. Each file's
    chunks can be made on their own (a Beam pipeline makes them on its workers).

    Cuts every 4 bytes, at the end of "a" and where shard 1 starts (byte 7 of 14):

    >>> plan = ChunkPlan([("a", 5), ("b", 9)], num_shards=2, chunk_bytes=4)
    >>> [(c.shard, c.index, c.span.path, c.span.start, c.span.end) for c in plan]
    [(0, 0, 'a', 0, 4), (0, 4, 'a', 4, 5), (0, 5, 'b', 0, 2), (1, 7, 'b', 2, 3), (1, 8, 'b', 3, 7), (1, 12, 'b', 7, 9)]
    """

    def __init__(self, sizes: list[tuple[str, int]], num_shards: int, chunk_bytes: int = CHUNK_BYTES):
        self.sizes = list(sizes)
        self.num_shards = num_shards
        self.chunk_bytes = chunk_bytes
        self.total_bytes = sum(size for _, size in sizes)

    def files(self) -> list[tuple[str, int, int]]:
        """(path, size, base): each file and where it starts in the corpus."""
        bases = [0]
        for _, size in self.sizes:
            bases.append(bases[-1] + size)
        return [(path, size, base) for (path, size), base in zip(self.sizes, bases, strict=False)]

    def file_chunks(self, file: tuple[str, int, int]) -> list[PlannedChunk]:
        path, size, base = file
        step = self.chunk_bytes
        grid = range((base // step + 1) * step, base + size, step)
        # Shard k starts at the first offset o with shard_of(o) == k.
        shard_starts = (-(-k * self.total_bytes // self.num_shards) for k in range(1, self.num_shards))
        cuts = sorted({*grid, *(cut for cut in shard_starts if base < cut < base + size)})
        return [
            PlannedChunk(shard_of(span.base + span.start, self.num_shards, self.total_bytes), span.base + span.start, span)
            for span in file_spans(path, size, base, cuts)
        ]

    def __iter__(self) -> Iterator[PlannedChunk]:
        for file in self.files():
            yield from self.file_chunks(file)


def shard_of(offset: int, num_shards: int, total_bytes: int) -> int:
    """The shard of the documents that start at `offset` of the corpus."""
    return min(num_shards - 1, offset * num_shards // total_bytes)


def read_chunk(
    planned: PlannedChunk, problems: InputProblems, warn: Callable[[str], None], opener: Callable = open
) -> ChunkTask:
    """Reads the documents of a planned chunk (`opener` opens its file, see `span_documents`)."""
    documents = [document.lines for document in span_documents(planned.span, problems, warn, opener)]
    return ChunkTask(planned.shard, planned.index, documents, planned.span.base + planned.span.end)


# === One worker's share ===
def part_path(path: str, worker: int, num_workers: int) -> str:
    """Where `worker` writes its part of shard `path` (hidden, like every unfinished file)."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.part-{worker}-of-{num_workers}")


@dataclass
class Share:
    """Which chunks a worker processes and where its shards go."""

    worker: int
    num_workers: int
    todo: set[int]  # the shards to generate

    def chunks(self, plan: ChunkPlan) -> Iterator[PlannedChunk]:
        """Chunk k of the plan is worker k mod N's."""
        for k, chunk in enumerate(plan):
            if k % self.num_workers == self.worker and chunk.shard in self.todo:
                yield chunk

    def path(self, output_file: str) -> str:
        return output_file if self.num_workers == 1 else part_path(output_file, self.worker, self.num_workers)


def produce_share(
    job: Job,
    processor: ChunkProcessor,
    plan: ChunkPlan,
    share: Share,
    problems: InputProblems,
    warn: Callable[[str], None],
    report: Callable[[str, object], None],
) -> None:
    """Reads this worker's chunks and processes them into its parts of the shards.

    `report` hears ("chunk", (counts, end_offset)) after each chunk and ("shard", k)
    once the worker's part of shard k is complete (an empty part too).
    """
    sinks: dict[int, ShardSink] = {}
    finished: set[int] = set()

    def sink(shard: int) -> ShardSink:
        if shard not in sinks:
            writer = RecordFileWriter(share.path(job.output_files[shard]), job.gzip)
            # The bucket files beside the output: one shard part's worth of disk more, while it is written.
            scratch = os.path.dirname(os.path.abspath(job.output_files[shard]))
            sinks[shard] = ShardSink(writer, job.options.random_seed, shard, share.worker, scratch)
        return sinks[shard]

    def finish_shards_before(shard: int) -> None:
        # Shards come in order, so every shard below `shard` is complete here.
        for k in sorted(share.todo - finished):
            if k >= shard:
                break
            sink(k).commit(sync=share.num_workers == 1)
            del sinks[k]
            finished.add(k)
            report("shard", k)

    try:
        for planned in share.chunks(plan):
            finish_shards_before(planned.shard)
            result = processor.process(read_chunk(planned, problems, warn))
            sink(planned.shard).add(result)
            report("chunk", (result.counts, result.end_offset))
        finish_shards_before(len(job.output_files))
    except BaseException:
        for open_sink in sinks.values():
            open_sink.abort()
        raise


# === Several workers ===
def _child_main(job, processor, plan, share: Share, connection) -> None:
    """A forked worker: produces its share and tells the parent through `connection`."""
    try:
        send = _send(connection)
        problems = InputProblems()
        produce_share(job, processor, plan, share, problems, lambda message: send("warn", message), send)
        send("problems", problems)
        connection.send(("done", None))
    except BaseException as error:  # reported to the parent, which raises
        connection.send(("error", error if isinstance(error, BertTfError) else traceback.format_exc()))
    finally:
        connection.close()


def _send(connection) -> Callable[[str, object], None]:
    return lambda event, value: connection.send((event, value))


class _Coordinator:
    """Runs in the main process, itself worker 0: hears every worker's events, keeps the
    counts and the progress line, joins a shard's parts once all are complete and then
    writes its settings beside it."""

    def __init__(
        self,
        job: Job,
        todo: set[int],
        settings: dict,
        counts: Counter,
        tracker: Progress,
        problems: InputProblems,
        warn: Callable[[str], None],
    ):
        self.job = job
        self.todo = todo
        self.settings = settings
        self.counts = counts
        self.tracker = tracker
        self.problems = problems
        self.warn = warn
        self.num_workers = job.num_workers
        self.parts_done: Counter = Counter()
        self.offsets = [0] * job.num_workers
        self.children: dict[int, tuple[multiprocessing.Process, object]] = {}

    def start_children(self, plan: ChunkPlan, processor: ChunkProcessor) -> None:
        # Forked: each child starts with its own copy of the processor, whose vocabulary
        # tables are built once, and with numpy already imported.
        context = multiprocessing.get_context("fork")
        # Frozen objects are left alone by the children's garbage collector, so the
        # pages they share with this process stay shared (Python's advice for fork).
        gc.freeze()
        try:
            self._fork(context, plan, processor)
        finally:
            gc.unfreeze()

    def _fork(self, context, plan: ChunkPlan, processor: ChunkProcessor) -> None:
        for worker in range(1, self.num_workers):
            receiver, sender = context.Pipe(duplex=False)
            share = Share(worker, self.num_workers, self.todo)
            process = context.Process(
                target=_child_main, args=(self.job, processor, plan, share, sender), daemon=True
            )
            process.start()
            sender.close()
            self.children[worker] = (process, receiver)

    def hear(self, worker: int, event: str, value) -> None:
        if event == "chunk":
            chunk_counts, end_offset = value
            self.counts.update(chunk_counts)
            self.offsets[worker] = end_offset
            self.tracker.update(min(self.offsets), self.counts["documents"], self.counts["instances"])
        elif event == "shard" and self._whole(value):
            write_json(settings_path(self.job.output_files[value]), self.settings)
        elif event == "warn":
            self.warn(value)
        elif event == "problems":
            self.problems.merge(value)
        elif event == "error":
            raise value if isinstance(value, BertTfError) else RuntimeError(f"data worker {worker} failed:\n{value}")
        if worker == 0:
            self.poll_children(timeout=0)

    def _whole(self, shard: int) -> bool:
        """Whether `shard`'s file is now complete: a single worker wrote it itself; the
        parts of several are joined once the last is done."""
        if self.num_workers == 1:
            return True
        self.parts_done[shard] += 1
        if self.parts_done[shard] < self.num_workers:
            return False
        output = self.job.output_files[shard]
        concatenate_files([part_path(output, w, self.num_workers) for w in range(self.num_workers)], output)
        return True

    def poll_children(self, timeout: float) -> None:
        """Handles what the children have said; waits up to `timeout` s for a word."""
        receivers = {receiver: worker for worker, (_, receiver) in self.children.items()}
        for receiver in multiprocessing.connection.wait(list(receivers), timeout):
            worker = receivers[receiver]
            while receiver.poll():
                try:
                    event, value = receiver.recv()
                except EOFError:
                    process = self.children[worker][0]
                    process.join(timeout=5)
                    raise RuntimeError(f"data worker {worker} died (exit code {process.exitcode}).") from None
                if event == "done":
                    self.children[worker][0].join()
                    del self.children[worker]
                    break
                self.hear(worker, event, value)

    def wait_for_children(self) -> None:
        while self.children:
            self.poll_children(timeout=1.0)

    def kill(self) -> None:
        """Stops the children and deletes every part file, finished or not."""
        for process, _ in self.children.values():
            if process.is_alive():
                process.kill()
            process.join(timeout=5)
        for shard in self.todo:
            for worker in range(self.num_workers):
                path = part_path(self.job.output_files[shard], worker, self.num_workers)
                for leftover in (path, incomplete_path(path)):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(leftover)


def _keep_freed_memory() -> None:
    """Lets glibc keep freed blocks of up to 32 MB in the heap for reuse.

    Each chunk's numpy temporaries (tens of MB) are otherwise mmap'ed and returned to
    the system one by one, and every chunk pays for fresh pages again: measured, this
    was 15% of the CPU time (300k page faults for an 8 MB corpus) and changed no RSS.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
    mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def run(job: Job, progress: bool = True, warn: Callable[[str], None] = _warn) -> dict:
    """Generates the shards of `job` that are not complete yet; returns the statistics.

    Raises `BertTfError` for bad flags or inputs, before any output file is created.
    """
    options = job.options
    validate(options, job.num_workers)
    _keep_freed_memory()
    tokenizer = FullTokenizer(job.vocab_file, do_lower_case=job.do_lower_case)
    files = non_empty_files(job.input_files, warn)
    for path in job.output_files:
        check_output_file(path, "--output_file")
    if job.stats_file:
        check_output_file(job.stats_file, "--stats_file")
    if options.zh_whole_word_mask:
        chinese_word_segmenter()  # fails now (not in a worker) when rjieba is missing; workers share it
    sizes = [(path, os.path.getsize(path)) for path in files]
    settings = shard_settings(job, sizes)
    todo = [k for k, path in enumerate(job.output_files) if job.overwrite or not _complete(path, settings)]
    for k in todo:  # until the shard is made again, what is there is not known to be made with `settings`
        with contextlib.suppress(FileNotFoundError):
            os.remove(settings_path(job.output_files[k]))
    total_bytes = sum(size for _, size in sizes)
    num_shards = len(job.output_files)
    warn = _once(warn)  # every worker that reads a span of a bad file says so
    problems = InputProblems()
    counts: Counter = Counter()
    tracker = Progress(total_bytes, progress)
    if todo:
        with folders_of([job.output_files[k] for k in todo]):
            _generate(job, tokenizer, ChunkPlan(sizes, num_shards), set(todo), settings, problems, counts, tracker, warn)
        tracker.update(total_bytes, counts["documents"], counts["instances"], final=True)
    else:
        warn(f"all {num_shards} output file(s) exist; nothing to do (--overwrite redoes them).")
    stats = statistics(job, counts, problems, total_bytes, time.monotonic() - tracker.start, todo)
    _closing_warnings(stats, problems, warn)
    if job.stats_file:
        write_json(job.stats_file, stats)
    return stats


def _holds_records(path: str, compressed: bool) -> bool:
    with (gzip.open if compressed else open)(path, "rb") as handle:
        return handle.read(1) != b""


# === What made a shard ===
def settings_path(output_file: str) -> str:
    """The settings record of a shard: hidden beside it (`bert_tf.data.reader.list_files`
    and Python's glob skip names that start with a dot)."""
    folder, name = os.path.split(output_file)
    return os.path.join(folder, f".{name}.settings.json")


def shard_settings(job: Job, sizes: list[tuple[str, int]]) -> dict:
    """Everything a shard's records depend on (not the worker count: any writes the same records)."""
    with open(job.vocab_file, "rb") as handle:
        vocab_sha256 = hashlib.sha256(handle.read()).hexdigest()
    return {
        **asdict(job.options),
        "do_lower_case": job.do_lower_case,
        "vocab_sha256": vocab_sha256,
        "gzip": job.gzip,
        "num_output_shards": len(job.output_files),
        "input_files": [[path if "://" in path else os.path.abspath(path), size] for path, size in sizes],
    }


def _complete(output_file: str, settings: dict) -> bool:
    """Whether `output_file` exists, made with `settings`; a `BertTfError` if it was made with others."""
    if not os.path.exists(output_file):
        return False
    try:
        with open(settings_path(output_file), encoding="utf-8") as handle:
            made_with = json.load(handle)
    except (OSError, ValueError):
        raise BertTfError(f"--output_file {output_file} exists, but not the record of the settings that made it "
                          f"({settings_path(output_file)}); pass --overwrite to make it again, or give another "
                          "--output_file.") from None
    # A setting added since the shard was made counts too: its records cannot vouch for it.
    unrecorded = [f"{key} not recorded" for key in settings if key not in made_with]
    changed = ", ".join(filter(None, [setting_changes(made_with, settings), *unrecorded]))
    if changed:
        raise BertTfError(f"--output_file {output_file} exists, made with other settings ({changed}); "
                          "pass --overwrite to make it again with these, or give another --output_file.")
    return True


def _once(warn: Callable[[str], None]) -> Callable[[str], None]:
    said: set[str] = set()

    def warn_once(message: str) -> None:
        if message not in said:
            said.add(message)
            warn(message)

    return warn_once


def _generate(
    job: Job,
    tokenizer: FullTokenizer,
    plan: ChunkPlan,
    todo: set[int],
    settings: dict,
    problems: InputProblems,
    counts: Counter,
    tracker: Progress,
    warn: Callable[[str], None],
) -> None:
    """Streams the corpus into the shards listed in `todo`, on `job.num_workers` processes;
    writes each shard's `settings` beside it once it is complete."""
    coordinator = _Coordinator(job, todo, settings, counts, tracker, problems, warn)
    try:
        processor = ChunkProcessor(job.options, tokenizer)
        coordinator.start_children(plan, processor)
        share = Share(0, job.num_workers, todo)
        produce_share(job, processor, plan, share, problems, warn, lambda e, v: coordinator.hear(0, e, v))
        coordinator.wait_for_children()
    except BaseException:
        coordinator.kill()
        raise


def statistics(
    job: Job, counts: Counter, problems: InputProblems, total_bytes: int, seconds: float, todo: list[int]
) -> dict:
    instances = counts["instances"]
    masked = counts["masked"]
    return {
        "documents": counts["documents"],
        "sentences": counts["sentences"],
        "instances": instances,
        "tokens": counts["tokens"],
        "mean_tokens_per_instance": counts["tokens"] / instances if instances else 0.0,
        "masked_tokens": masked,
        "masked_fraction": masked / counts["tokens"] if counts["tokens"] else 0.0,
        "replaced_with_mask": counts["replaced"],
        "kept": counts["kept"],
        "random": counts["random"],
        "not_next": counts["not_next"],
        "not_next_rate": counts["not_next"] / instances if instances else 0.0,
        "short_instances": counts["short_instances"],
        "undecodable_lines": problems.undecodable_lines,
        "files_with_undecodable_lines": problems.files_with_undecodable_lines,
        "crlf_files": problems.crlf_files,
        "long_lines": problems.long_lines,
        "split_documents": problems.split_documents,
        "input_bytes": total_bytes,
        "seconds": seconds,
        "mb_per_second": total_bytes / 1e6 / seconds if seconds > 0 else 0.0,
        "output_files": job.output_files,
        "shards_written": [job.output_files[k] for k in todo],
        "shards_skipped": [path for k, path in enumerate(job.output_files) if k not in todo],
        "empty_shards": [job.output_files[k] for k in todo if not _holds_records(job.output_files[k], job.gzip)],
        "options": asdict(job.options),
    }


def _closing_warnings(stats: dict, problems: InputProblems, warn: Callable[[str], None]) -> None:
    if problems.undecodable_lines:
        files = ", ".join(problems.files_with_undecodable_lines[:3])
        warn(
            f"{problems.undecodable_lines:,} line(s) of {files} are not valid UTF-8; their bad bytes "
            "were replaced by U+FFFD, which the tokenizer drops."
        )
    if stats["empty_shards"]:
        warn(
            f"{len(stats['empty_shards'])} of the {len(stats['output_files'])} output files hold no record (no document "
            f"starts in their part of the corpus, which has {stats['documents']:,}), e.g. {stats['empty_shards'][0]}: "
            "leave them out of the training input, or use fewer --num_output_shards."
        )
    if stats["instances"] >= 100 and stats["not_next_rate"] > NOT_NEXT_WARNING:
        # Segment B is "next" only when the document has a sentence after A's; one-sentence
        # documents (labelled text: a review, a headline) leave the random one.
        warn(
            f"{stats['not_next_rate']:.0%} of the instances are NotNext (the original's ~50% needs documents of "
            "several sentences): most documents here have one, and next-sentence prediction learns little from "
            "them; join related texts into documents of several sentences."
        )
    if stats["shards_written"] and stats["documents"] == 1:
        warn(
            "the corpus has a single document, so every NotNext segment B comes from that same "
            "document; separate documents with blank lines (python -m data_prep.prepare_corpus)."
        )


def json_text(data: dict) -> str:
    """How the stats file and the shards' settings are written."""
    return json.dumps(data, indent=2) + "\n"


def write_json(path: str, data: dict) -> None:
    write_text(path, json_text(data))
