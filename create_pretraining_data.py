"""Creates masked-LM / next-sentence TFRecords for BERT pre-training.

The flags and the algorithm are those of google-research/bert's
`create_pretraining_data.py`; the implementation streams the corpus (bounded memory),
runs on `--num_workers` processes and writes each shard atomically. See
`data_prep.generate` for the design.

Example:
  python create_pretraining_data.py --input_file='corpus/*.txt' \\
    --output_file=out/train.tfrecord --num_output_shards=64 \\
    --vocab_file=vocab.txt --num_workers=8 --stats_file=out/stats.json
"""

from __future__ import annotations

import sys

from absl import app, flags

import data_prep  # noqa: F401  (before bert_tf: keeps bert_tf/__init__, hence Keras, out of this process)
from bert_tf.errors import BertTfError
from data_prep.chunks import GenerationOptions
from data_prep.corpus import expand_input_patterns
from data_prep.generate import Job, run

FLAGS = flags.FLAGS

# The original's flags, with its defaults.
flags.DEFINE_string(
    "input_file",
    None,
    "Input text files: comma-separated glob patterns. One sentence a line, a blank line between documents.",
)
flags.DEFINE_string(
    "output_file",
    None,
    "Output TFRecord file(s), comma-separated. With --num_output_shards=N, the single path is a "
    "prefix: PATH-00000-of-0000N ...",
)
flags.DEFINE_string("vocab_file", None, "The vocabulary file of the BERT model.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the input (uncased models) or not (cased models).")
flags.DEFINE_bool("do_whole_word_mask", False, "Mask whole words (all their WordPieces) rather than single WordPieces.")
flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum number of masked LM predictions per sequence.")
flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
flags.DEFINE_integer(
    "dupe_factor",
    10,
    "Number of times to duplicate the input data (with different masks). Ignored with --dynamic_masking.",
)
flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
flags.DEFINE_float(
    "short_seq_prob", 0.1, "Probability of creating sequences which are shorter than the maximum length."
)

# Ours.
flags.DEFINE_bool(
    "use_v2_feature_names",
    False,
    "Name the features input_word_ids / input_type_ids (Model Garden) instead of input_ids / segment_ids.",
)
flags.DEFINE_bool("gzip", False, "GZIP-compress the TFRecord files.")
flags.DEFINE_integer(
    "num_workers",
    1,
    "Worker processes (about 100 MB of memory each). Any number writes the same records (a "
    "function of the inputs, the flags and the seed); only their order within a shard differs.",
)
flags.DEFINE_integer(
    "num_output_shards",
    0,
    "Split the output into this many files named after the single --output_file; shard i holds "
    "the documents that start in the i-th 1/N of the input bytes. 0: one shard per --output_file.",
)
flags.DEFINE_integer(
    "notnext_pool_documents",
    GenerationOptions.pool_documents,
    "The NotNext pool: a NotNext segment B is taken from a random document of this pool, the "
    "most recent documents that the same worker has tokenized in the current output shard "
    "(the current chunk's included), at most this many documents and at most "
    f"{GenerationOptions.pool_tokens:,} tokens (4 bytes each). The original draws from the "
    "whole corpus, which it holds in memory.",
)
flags.DEFINE_bool(
    "dynamic_masking",
    False,
    "Write each instance once, unmasked (no masked_lm_* features, about 10x less disk); "
    "data_prep.pretraining_dataset masks it anew at training time.",
)
flags.DEFINE_bool(
    "zh_whole_word_mask",
    False,
    "Mask all characters of a Chinese word together (Chinese-BERT-wwm), with word boundaries "
    "from jieba (pip install jieba); ## pieces too.",
)
flags.DEFINE_string(
    "stats_file",
    None,
    "Write a JSON summary here: documents, instances, tokens, masked fraction, NotNext rate, "
    "[MASK]/kept/random counts, undecodable lines...",
)
flags.DEFINE_bool(
    "overwrite",
    False,
    "Redo output files that already exist. Without it, a re-run skips them (each is renamed into "
    "place only when complete) and redoes the rest.",
)
flags.DEFINE_bool("progress", True, "Print a progress line on stderr.")


def output_paths(output_file: str, num_output_shards: int) -> list[str]:
    """The shard paths of --output_file and --num_output_shards."""
    paths = [path.strip() for path in output_file.split(",") if path.strip()]
    if not paths:
        raise BertTfError("--output_file is empty; give one or more comma-separated paths.")
    if num_output_shards < 0:
        raise BertTfError(f"--num_output_shards is {num_output_shards}; it must be 0 or more.")
    if num_output_shards:
        if len(paths) > 1:
            raise BertTfError("--num_output_shards needs a single --output_file (the prefix of the shard names).")
        return [f"{paths[0]}-{k:05d}-of-{num_output_shards:05d}" for k in range(num_output_shards)]
    if len(set(paths)) < len(paths):
        raise BertTfError("--output_file lists the same path twice.")
    return paths


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        options = GenerationOptions(
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
        job = Job(
            input_files=expand_input_patterns(FLAGS.input_file),
            output_files=output_paths(FLAGS.output_file, FLAGS.num_output_shards),
            vocab_file=FLAGS.vocab_file,
            do_lower_case=FLAGS.do_lower_case,
            options=options,
            gzip=FLAGS.gzip,
            num_workers=FLAGS.num_workers,
            overwrite=FLAGS.overwrite,
            stats_file=FLAGS.stats_file,
        )
        run(job, progress=FLAGS.progress)
    except BertTfError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("\ninterrupted: complete output files are kept; run again to make the rest.", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    flags.mark_flags_as_required(["input_file", "output_file", "vocab_file"])
    app.run(main)
