"""The command `create_pretraining_data.py` / `bert-create-pretraining-data`: creates
masked-LM / next-sentence TFRecords for BERT pre-training.

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
from collections.abc import Sequence

from absl.flags import FlagValues

import data_prep  # noqa: F401  (before bert_tf: keeps bert_tf/__init__, hence Keras, out of this process)
from bert_tf.errors import BertTfError
from bert_tf.flags import Flag, flag_values, require, run_main
from data_prep.chunks import GenerationOptions
from data_prep.corpus import check_not_an_input, expand_input_patterns
from data_prep.generate import Job, run

# The original's flags, with its defaults, then ours (data_prep.beam_pipeline takes them too).
SHARED_FLAGS = ("input_file", "output_file", "vocab_file", "do_lower_case", "max_seq_length",
                "max_predictions_per_seq", "random_seed", "dynamic_masking")  # fmt: skip
OWN_FLAGS = {
    "do_whole_word_mask": Flag(bool, False, "Mask whole words (all their WordPieces) rather than single "
                               "WordPieces."),
    "dupe_factor": Flag(int, 10, "Number of times to duplicate the input data (with different masks). Ignored "
                        "with --dynamic_masking."),
    "masked_lm_prob": Flag(float, 0.15, "Masked LM probability."),
    "short_seq_prob": Flag(float, 0.1, "Probability of creating sequences which are shorter than the maximum "
                           "length."),
    "use_v2_feature_names": Flag(bool, False, "Name the features input_word_ids / input_type_ids (Model "
                                 "Garden) instead of input_ids / segment_ids."),
    "gzip": Flag(bool, False, "GZIP-compress the TFRecord files."),
    "num_workers": Flag(int, 1, "Worker processes. Any number writes the same records (a function of the "
                        "inputs, the flags and the seed); only their order within a shard differs."),
    "num_output_shards": Flag(int, 0, "Split the output into this many files named after the single "
                              "--output_file (PATH-00000-of-0000N ...); shard i holds the documents that start "
                              "in the i-th 1/N of the input bytes. 0: one shard per --output_file."),
    "notnext_pool_documents": Flag(int, GenerationOptions.pool_documents, "The NotNext pool: a NotNext segment B "
                                   "is taken from a random other document of the same chunk (the documents that "
                                   "start in one 64 KB span of the input), at most this many documents and at most "
                                   f"{GenerationOptions.pool_tokens:,} tokens. The original draws from the whole "
                                   "corpus, which it holds in memory."),
    "zh_whole_word_mask": Flag(bool, False, "Mask all characters of a Chinese word together "
                               "(Chinese-BERT-wwm), with word boundaries from rjieba (jieba-rs: jieba's dictionary "
                               "and algorithm); ## pieces too."),
    "stats_file": Flag(str, None, "Write a JSON summary here: documents, instances, tokens, masked fraction, "
                       "NotNext rate, [MASK]/kept/random counts, undecodable lines..."),
    "overwrite": Flag(bool, False, "Redo output files that already exist. Without it, a re-run skips them (each "
                      "is renamed into place only when complete) and redoes the rest."),
    "progress": Flag(bool, True, "Print a progress line on stderr."),
}  # fmt: skip
FLAGS = flag_values(*SHARED_FLAGS, own=OWN_FLAGS)


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


def generation_options(values: FlagValues) -> GenerationOptions:
    """The generation algorithm's settings from the parsed flags."""
    return GenerationOptions(
        max_seq_length=values.max_seq_length,
        max_predictions_per_seq=values.max_predictions_per_seq,
        masked_lm_prob=values.masked_lm_prob,
        short_seq_prob=values.short_seq_prob,
        dupe_factor=values.dupe_factor,
        random_seed=values.random_seed,
        do_whole_word_mask=values.do_whole_word_mask,
        zh_whole_word_mask=values.zh_whole_word_mask,
        dynamic_masking=values.dynamic_masking,
        use_v2_feature_names=values.use_v2_feature_names,
        pool_documents=values.notnext_pool_documents,
    )


def _generate(values: FlagValues) -> None:
    require(values, "input_file", "output_file", "vocab_file")
    options = generation_options(values)
    outputs = output_paths(values.output_file, values.num_output_shards)
    for path in [*outputs, *filter(None, [values.stats_file])]:
        check_not_an_input(values.input_file, path, "--stats_file" if path == values.stats_file else "--output_file")
    job = Job(
        input_files=expand_input_patterns(values.input_file),
        output_files=outputs,
        vocab_file=values.vocab_file,
        do_lower_case=values.do_lower_case,
        options=options,
        gzip=values.gzip,
        num_workers=values.num_workers,
        overwrite=values.overwrite,
        stats_file=values.stats_file,
    )
    run(job, progress=values.progress)


def main(argv: Sequence[str] | None = None) -> int:
    """create_pretraining_data.py / bert-create-pretraining-data (`argv` without the program
    name): exit status 0, 1 after one `error: ...` line on stderr, 130 when interrupted."""
    interrupted = "interrupted: complete output files are kept; run again to make the rest."
    return run_main(FLAGS, argv, __doc__, _generate, interrupted)


if __name__ == "__main__":
    sys.exit(main())
