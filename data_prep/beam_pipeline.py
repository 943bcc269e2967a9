"""Pre-training TFRecords from an Apache Beam pipeline: DirectRunner here; Dataflow,
Flink or Spark on a cluster.

The flags are create_pretraining_data's, plus `--runner`; every other flag is Beam's
own pipeline option and goes to Beam untouched (`--project`, `--region`,
`--temp_location`, `--flink_master`, `--direct_num_workers`...). The pipeline is the
local path's, step by step:

    file sizes --> files --ChunkPlan.file_chunks--> chunks (byte spans, a few
    hundred bytes each to describe) --GroupByKey(shard)--> per shard, on a worker:
    read_chunk, ChunkProcessor.process (tokenize, pack, mask, serialize), the local
    path's ShardSink (shuffle) --> PATH-0000k-of-0000N

A chunk's records depend only on its text, the flags, the seed and its position, and
a shard holds the chunks of its 1/N of the input bytes, so each shard holds the same
multiset of records as `create_pretraining_data.py`'s with the same flags, whatever
the runner (uncompressed, the same bytes as with `--num_workers=1`: same chunk order,
same shuffle). Only chunk descriptions are grouped (shuffled): a worker holds one
chunk's records and one bucket of its shard's shuffle (the buckets are files on its
local disk), so memory stays bounded even on DirectRunner, which keeps a shuffle's data
in memory. The parallelism is the number of shards: give --num_output_shards of at
least the runner's workers. The vocabulary travels inside
the pickled tokenizer. A shard is written under a temporary name
(`.NAME.incomplete`) and renamed when complete; a retried shard is written again
whole. Every run writes every shard (`--overwrite` and `--num_workers` are the local
command's). Only DirectRunner is tested here.

Example (in-process, 2 worker processes):
  python -m data_prep.beam_pipeline --input_file='corpus/*.txt' \\
    --output_file=out/train.tfrecord --num_output_shards=16 --vocab_file=vocab.txt \\
    --runner=DirectRunner --direct_running_mode=multi_processing --direct_num_workers=2
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

from absl.flags import FlagValues

import data_prep  # noqa: F401  (before bert_tf: keeps bert_tf/__init__, hence Keras, out of this process)
from bert_tf.atomic import incomplete_path, write_text
from bert_tf.errors import BertTfError, run_command
from bert_tf.flags import HELP_ARGS, Flag, flag_values, help_text, parse, require
from bert_tf.tokenization import FullTokenizer
from data_prep.chunks import ChunkProcessor, GenerationOptions
from data_prep.create_pretraining_data import OWN_FLAGS, SHARED_FLAGS, generation_options, output_paths
from data_prep.corpus import InputProblems, check_not_an_input
from data_prep.generate import (
    ChunkPlan,
    Job,
    PlannedChunk,
    ShardSink,
    json_text,
    read_chunk,
    settings_path,
    shard_settings,
    statistics,
    validate,
)

try:
    import apache_beam as beam
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.metrics import Metrics
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import PipelineOptions
except ModuleNotFoundError:  # an optional extra: main() says how to install it
    beam = None

# === Flags ===
# Beam's runner names, and the options each cannot run without. (FlinkRunner and
# SparkRunner would otherwise start a local embedded cluster, which needs Java.)
RUNNERS = {
    "DirectRunner": (),
    "PrismRunner": (),
    "DataflowRunner": ("project", "region", "temp_location"),
    "FlinkRunner": ("flink_master",),
    "SparkRunner": ("spark_master_url",),
    "PortableRunner": ("job_endpoint",),
}

# The local command's flags (`--num_workers` and `--overwrite` have no effect here), plus the runner.
FLAGS = flag_values(
    *SHARED_FLAGS,
    own={**OWN_FLAGS, "runner": Flag(str, "DirectRunner", f"The Beam runner: {', '.join(RUNNERS)}.")},
)


def require_beam() -> None:
    """Raises `BertTfError`, saying how to install it, when Apache Beam is missing."""
    if beam is None:
        raise BertTfError("--runner needs Apache Beam, which is not installed: pip install .[beam]")


# === Validation ===
def pipeline_options(runner: str, beam_args: list[str]) -> PipelineOptions:
    """Beam's options for `runner`; raises `BertTfError` for an unknown runner or a
    missing option the runner needs."""
    if runner not in RUNNERS:
        raise BertTfError(f"--runner={runner} is not a Beam runner this tool knows; use one of {', '.join(RUNNERS)}.")
    options = PipelineOptions([*beam_args, f"--runner={runner}"])
    given = options.get_all_options(drop_default=True)
    missing = [name for name in RUNNERS[runner] if given.get(name) is None]
    if missing:
        names = ", ".join(f"--{name}" for name in missing)
        raise BertTfError(f"--runner={runner} needs {names} (Beam's pipeline options; see the README).")
    return options


def match_inputs(patterns: str) -> list[tuple[str, int]]:
    """(path, size) of the non-empty files of comma-separated patterns, on the runner's
    file system (local, gs://, hdfs://...), each pattern's matches sorted."""
    files: dict[str, int] = {}
    for pattern in (p.strip() for p in patterns.split(",") if p.strip()):
        # As the local command's: a folder stands for every file beneath it, also a folder a
        # glob matches (text/* reads WikiExtractor's text/AA/wiki_00), and a hidden name is
        # left out unless the pattern names it (Beam's own match does none of these).
        folder = pattern.endswith("/") or ("://" not in pattern and os.path.isdir(pattern))
        searched = [pattern.rstrip("/") + "/**"] if folder else [pattern]
        if not folder and any(wildcard in pattern for wildcard in "*?["):
            searched.append(pattern + "/**")
        try:
            matched = [m for result in FileSystems.match(searched) for m in result.metadata_list]
        except Exception as error:  # Beam raises its own errors per file system
            raise BertTfError(f"--input_file pattern {pattern!r} cannot be listed: {error}") from None
        base = pattern.rstrip("/") if folder else os.path.dirname(pattern)
        matched = [m for m in matched if not _hidden_below(m.path, base) or os.path.basename(pattern).startswith(".")]
        if not matched:
            raise BertTfError(f"--input_file pattern {pattern!r} matches no file.")
        for metadata in sorted(matched, key=lambda m: m.path):
            files.setdefault(metadata.path, metadata.size_in_bytes)
    kept = [(path, size) for path, size in files.items() if size > 0]
    if not kept:
        raise BertTfError("Every --input_file is empty; there is no text to make instances from.")
    return kept


def _hidden_below(path: str, base: str) -> bool:
    """Whether a name in `path` below the folder `base` starts with a dot."""
    below = path[len(base):] if path.startswith(base) else os.path.basename(path)
    return any(part.startswith(".") for part in below.split("/"))


# === The pipeline ===
class BeamRecordWriter:
    """`RecordFileWriter`'s methods on the runner's file system (gs://, hdfs://...)."""

    def __init__(self, path: str, gzip: bool):
        self.path = path
        self.temp_path = incomplete_path(path)
        compression = CompressionTypes.GZIP if gzip else CompressionTypes.UNCOMPRESSED
        self._file = FileSystems.create(self.temp_path, compression_type=compression)

    def write(self, framed: bytes) -> None:
        self._file.write(framed)

    def commit(self, sync: bool = True) -> None:  # noqa: ARG002 (the file system decides)
        self._file.close()
        FileSystems.rename([self.temp_path], [self.path])

    def abort(self) -> None:
        self._file.close()
        FileSystems.delete([self.temp_path])


class WriteShard(beam.DoFn if beam else object):
    """A shard's planned chunks in: their records written to the shard's file."""

    def __init__(self, options: GenerationOptions, tokenizer: FullTokenizer, output_files: list[str], gzip: bool,
                 settings: dict):
        self.options = options
        self.tokenizer = tokenizer  # the vocabulary, shipped to the workers with the DoFn
        self.output_files = output_files
        self.gzip = gzip
        self.settings = settings  # written beside each shard, as the local command does
        self.processor: ChunkProcessor | None = None

    def setup(self) -> None:
        self.processor = ChunkProcessor(self.options, self.tokenizer)

    def process(self, shard_chunks: tuple[int, Iterable[PlannedChunk]]) -> Iterator[str]:
        shard, chunks = shard_chunks
        writer = BeamRecordWriter(self.output_files[shard], self.gzip)
        # A single local worker's order and shuffle: the same bytes as its shard.
        sink = ShardSink(writer, self.options.random_seed, shard, worker=0)
        try:
            for planned in sorted(chunks, key=lambda chunk: chunk.index):
                problems = InputProblems()
                task = read_chunk(planned, problems, lambda _: None, lambda path, _: FileSystems.open(path))
                result = self.processor.process(task)
                sink.add(result)
                # The counts of the stats file, summed over the workers by the runner.
                for name, value in [*result.counts.items(), *_problem_counts(problems).items()]:
                    Metrics.counter(METRICS, name).inc(value)
            sink.commit()
        except BaseException:
            sink.abort()
            raise
        write_remote(settings_path(writer.path), json_text(self.settings))
        yield writer.path


def write_remote(path: str, text: str) -> None:
    """Writes `text` to `path` on any file system the runner reaches: atomically when local,
    through Beam's `FileSystems` for gs://, hdfs://... (an object appears when closed)."""
    if "://" not in path:
        write_text(path, text)
        return
    handle = FileSystems.create(path)
    handle.write(text.encode("utf-8"))
    handle.close()


METRICS = "bert_tf"


def _problem_counts(problems: InputProblems) -> dict[str, int]:
    return {name: getattr(problems, name) for name in ("undecodable_lines", "long_lines", "split_documents")}


def build(pipeline, plan: ChunkPlan, write_shard: WriteShard) -> None:
    """Adds the steps to `pipeline`."""
    (
        pipeline
        | "Files" >> beam.Create(plan.files())
        | "Plan" >> beam.FlatMap(plan.file_chunks)
        | "ByShard" >> beam.Map(lambda chunk: (chunk.shard, chunk))
        | "Group" >> beam.GroupByKey()
        | "Write" >> beam.ParDo(write_shard)
    )


def _statistics(job: Job, plan: ChunkPlan, result, seconds: float) -> dict:
    """The local path's stats file, from the pipeline's counters."""
    counts: Counter = Counter()
    for counter in result.metrics().query(MetricsFilter().with_namespace(METRICS))["counters"]:
        # Some runners report only attempted (not committed) values.
        counts[counter.key.metric.name] += counter.committed if counter.committed is not None else counter.attempted
    problems = InputProblems(**{name: counts.pop(name, 0) for name in _problem_counts(InputProblems())})
    return statistics(job, counts, problems, plan.total_bytes, seconds, list(range(len(job.output_files))))


def main(argv: Sequence[str] | None = None) -> int:
    """The pipeline's command (`argv` without the program name): exit status 0, or 1 after
    one `error: ...` line on stderr."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(arg in HELP_ARGS for arg in argv):
        print(help_text(FLAGS, __doc__.split("\n\n")[0] + "\n\nAny other flag is Beam's pipeline option."))
        return 0
    return run_command(lambda: _run(FLAGS, parse(FLAGS, argv, known_only=True)))


def _run(values: FlagValues, beam_args: list[str]) -> None:
    require_beam()
    require(values, "input_file", "output_file", "vocab_file")
    options = generation_options(values)
    validate(options, 1)
    pipeline_opts = pipeline_options(values.runner, beam_args)
    output_files = output_paths(values.output_file, values.num_output_shards)
    for path in output_files:
        check_not_an_input(values.input_file, path)
    plan = ChunkPlan(match_inputs(values.input_file), len(output_files))
    tokenizer = FullTokenizer(values.vocab_file, do_lower_case=values.do_lower_case)
    job = Job([path for path, _ in plan.sizes], output_files, values.vocab_file, values.do_lower_case, options,
              values.gzip)
    # Every shard is made again: until it is, an old record beside it would vouch for old records.
    stale = [settings_path(path) for path in output_files if FileSystems.exists(settings_path(path))]
    if stale:
        FileSystems.delete(stale)
    start = time.monotonic()
    pipeline = beam.Pipeline(options=pipeline_opts)
    build(pipeline, plan, WriteShard(options, tokenizer, output_files, values.gzip, shard_settings(job, plan.sizes)))
    result = pipeline.run()
    result.wait_until_finish()
    if values.stats_file:  # on the runner's file system too (gs://...)
        write_remote(values.stats_file, json_text(_statistics(job, plan, result, time.monotonic() - start)))


if __name__ == "__main__":
    sys.exit(main())
