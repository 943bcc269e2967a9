"""Pre-training TFRecords from an Apache Beam pipeline: DirectRunner here; Dataflow,
Flink or Spark on a cluster.

The flags are create_pretraining_data's, plus `--runner`; every other flag is Beam's
own pipeline option and goes to Beam untouched (`--project`, `--region`,
`--temp_location`, `--flink_master`, `--direct_num_workers`...). The pipeline is the
local path's, step by step:

    file sizes --> files --ChunkPlan.file_chunks--> chunks (byte spans) --Reshuffle-->
    on the workers: read_chunk, ChunkProcessor.process (tokenize, pack, mask,
    serialize) --> records --WriteToTFRecord--> PATH-00000-of-0000N ...

A chunk's records depend only on its text, the flags, the seed and its position, so
the records are the same multiset as `create_pretraining_data.py`'s with the same
flags (`--num_output_shards` included: shard boundaries cut the spans), whatever the
runner and its parallelism. Which shard a record lands in is the runner's choice.
The vocabulary travels inside the pickled tokenizer; each worker holds one chunk at a
time. Beam's file sink writes to a temporary folder and renames the shards into place
once all are written; every run writes every shard (`--overwrite` and `--num_workers`
are the local command's: here the runner decides). Only DirectRunner is tested here.

Example (in-process, 2 worker processes):
  python -m data_prep.beam_pipeline --input_file='corpus/*.txt' \\
    --output_file=out/train.tfrecord --num_output_shards=16 --vocab_file=vocab.txt \\
    --runner=DirectRunner --direct_running_mode=multi_processing --direct_num_workers=2
"""

from __future__ import annotations

import importlib
import sys
import time
from collections import Counter
from collections.abc import Iterator

from absl import flags

import data_prep  # noqa: F401  (before bert_tf: keeps bert_tf/__init__, hence Keras, out of this process)
from bert_tf.errors import BertTfError
from bert_tf.tokenization import FullTokenizer
from data_prep.chunks import ChunkProcessor, GenerationOptions
from data_prep.corpus import InputProblems
from data_prep.generate import ChunkPlan, Job, PlannedChunk, read_chunk, statistics, validate, write_json
from data_prep.tfrecord import unframe

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
FLAGS = flags.FLAGS

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


def local_command():
    """The local command's module, which declares the flags this pipeline shares with it
    (on absl's global FLAGS) when imported; `--runner` is declared with them.

    Not done when this module is imported: a process that imports it (pytest collecting
    doctests) can still load Model Garden's create_pretraining_data, whose flags have
    the same names. The module moves into data_prep (see COMMANDS.md); until then it
    is the root script.
    """
    try:
        module = importlib.import_module("data_prep.create_pretraining_data")
    except ModuleNotFoundError:
        module = importlib.import_module("create_pretraining_data")
    if "runner" not in FLAGS:
        flags.DEFINE_string("runner", "DirectRunner", f"The Beam runner: {', '.join(RUNNERS)}.")
    return module


def require_beam() -> None:
    """Raises `BertTfError`, saying how to install it, when Apache Beam is missing."""
    if beam is None:
        raise BertTfError("--runner needs Apache Beam, which is not installed: pip install .[beam]")


def _options() -> GenerationOptions:
    return GenerationOptions(
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        masked_lm_prob=FLAGS.masked_lm_prob,
        short_seq_prob=FLAGS.short_seq_prob,
        dupe_factor=FLAGS.dupe_factor,
        random_seed=FLAGS.random_seed,
        do_whole_word_mask=FLAGS.do_whole_word_mask,
        zh_whole_word_mask=FLAGS.zh_whole_word_mask,
        dynamic_masking=FLAGS.dynamic_masking,
        use_v2_feature_names=FLAGS.use_v2_feature_names,
        pool_documents=FLAGS.notnext_pool_documents,
    )


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
        try:
            matched = FileSystems.match([pattern])[0].metadata_list
        except Exception as error:  # Beam raises its own errors per file system
            raise BertTfError(f"--input_file pattern {pattern!r} cannot be listed: {error}") from None
        if not matched:
            raise BertTfError(f"--input_file pattern {pattern!r} matches no file.")
        for metadata in sorted(matched, key=lambda m: m.path):
            files.setdefault(metadata.path, metadata.size_in_bytes)
    kept = [(path, size) for path, size in files.items() if size > 0]
    if not kept:
        raise BertTfError("Every --input_file is empty; there is no text to make instances from.")
    return kept


def output_prefix(output_file: str, num_output_shards: int) -> tuple[str, int]:
    """The file prefix and shard count for WriteToTFRecord (0 shards: one file, no suffix)."""
    paths = local_command().output_paths(output_file, num_output_shards)
    if len(paths) > 1 and not num_output_shards:
        raise BertTfError("The Beam pipeline writes shards of one prefix: give a single --output_file and --num_output_shards.")
    return output_file.strip(), num_output_shards


# === The pipeline ===
class ChunkRecords(beam.DoFn if beam else object):
    """A planned chunk in, its serialized tf.train.Examples out (the local path's steps)."""

    def __init__(self, options: GenerationOptions, tokenizer: FullTokenizer):
        self.options = options
        self.tokenizer = tokenizer  # the vocabulary, shipped to the workers with the DoFn
        self.processor: ChunkProcessor | None = None

    def setup(self) -> None:
        self.processor = ChunkProcessor(self.options, self.tokenizer)

    def process(self, planned: PlannedChunk) -> Iterator[bytes]:
        problems = InputProblems()
        task = read_chunk(planned, problems, lambda _: None, lambda path, _: FileSystems.open(path))
        result = self.processor.process(task)
        # The counts of the stats file, summed over the workers by the runner.
        for name, value in [*result.counts.items(), *_problem_counts(problems).items()]:
            Metrics.counter(METRICS, name).inc(value)
        yield from unframe(result.records)


METRICS = "bert_tf"


def _problem_counts(problems: InputProblems) -> dict[str, int]:
    return {name: getattr(problems, name) for name in ("undecodable_lines", "long_lines", "split_documents")}


def build(pipeline, plan: ChunkPlan, records: ChunkRecords, prefix: str, shards: int, gzip: bool) -> None:
    """Adds the steps to `pipeline`."""
    (
        pipeline
        | "Files" >> beam.Create(plan.files())
        | "Plan" >> beam.FlatMap(plan.file_chunks)
        | "Spread" >> beam.Reshuffle()
        | "Records" >> beam.ParDo(records)
        | "Write"
        >> beam.io.WriteToTFRecord(
            prefix,
            num_shards=max(shards, 1),
            shard_name_template="-SSSSS-of-NNNNN" if shards else "",
            compression_type=CompressionTypes.GZIP if gzip else CompressionTypes.UNCOMPRESSED,
        )
    )


def _statistics(job: Job, plan: ChunkPlan, result, seconds: float) -> dict:
    """The local path's stats file, from the pipeline's counters."""
    counts: Counter = Counter()
    for counter in result.metrics().query(MetricsFilter().with_namespace(METRICS))["counters"]:
        # Some runners report only attempted (not committed) values.
        counts[counter.key.metric.name] += counter.committed if counter.committed is not None else counter.attempted
    problems = InputProblems(**{name: counts.pop(name, 0) for name in _problem_counts(InputProblems())})
    return statistics(job, counts, problems, plan.total_bytes, seconds, list(range(len(job.output_files))))


def main(argv: list[str] | None = None) -> int:
    """Runs the pipeline; returns the exit status (1, with one sentence, for bad input)."""
    argv = list(sys.argv if argv is None else argv)
    local_command()
    if {"-h", "--help", "--helpfull"} & set(argv[1:]):
        print(__doc__.split("\n\n")[0], "\n\nFlags (any other flag is Beam's pipeline option):\n", FLAGS.get_help())
        return 0
    try:
        beam_args = FLAGS(argv, known_only=True)[1:]
    except flags.Error as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    try:
        require_beam()
        for name in ("input_file", "output_file", "vocab_file"):
            if not getattr(FLAGS, name):
                raise BertTfError(f"--{name} is required.")
        options = _options()
        validate(options, 1)
        pipeline_opts = pipeline_options(FLAGS.runner, beam_args)
        prefix, shards = output_prefix(FLAGS.output_file, FLAGS.num_output_shards)
        plan = ChunkPlan(match_inputs(FLAGS.input_file), max(shards, 1))
        records = ChunkRecords(options, FullTokenizer(FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case))
        start = time.monotonic()
        pipeline = beam.Pipeline(options=pipeline_opts)
        build(pipeline, plan, records, prefix, shards, FLAGS.gzip)
        result = pipeline.run()
        result.wait_until_finish()
        if FLAGS.stats_file:
            job = Job([path for path, _ in plan.sizes], local_command().output_paths(prefix, shards), FLAGS.vocab_file, options=options)
            write_json(FLAGS.stats_file, _statistics(job, plan, result, time.monotonic() - start))
    except BertTfError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
