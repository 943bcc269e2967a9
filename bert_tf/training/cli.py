"""The command `run_pretraining.py` / `bert-pretrain`: pre-trains BERT (masked LM + next
sentence) on the TFRecords of create_pretraining_data.py.

The original's flags and defaults, plus strategies, optimisers, mixed precision, XLA,
gradient accumulation and dynamic masking. The same command runs on one CPU, on the
GPUs of a machine, on several machines (TF_CONFIG) or on a TPU; re-running it after any
interruption resumes from the last checkpoint in --output_dir. With --dynamic_masking,
--vocab_file gives the ids of [MASK], [CLS] and [SEP] (default: Google's 103, 101, 102).
See bert_tf.training.

Example:
  python run_pretraining.py --input_file='data/train.tfrecord*' --output_dir=out \\
    --preset=tiny --do_train --do_eval --train_batch_size=32 --num_train_steps=1000 \\
    --num_warmup_steps=100 --learning_rate=1e-4
  tensorboard --logdir out

Two-phase pre-training (90% of the steps at 128, 10% at 512): phase 2 in a new
--output_dir, from phase 1's; --init_checkpoint_state=all carries its step, Adam
moments and schedule (--num_train_steps: the total), weights (the original's
--init_checkpoint) only its weights; without --bert_config_file or --preset, a run reads
the bert_config.json of its --output_dir or of --init_checkpoint:
  python run_pretraining.py --input_file='data/seq128-*' --output_dir=phase1 \\
    --bert_config_file=bert_config.json --do_train --num_train_steps=900 --num_warmup_steps=10
  python run_pretraining.py --input_file='data/seq512-*' --output_dir=phase2 \\
    --do_train --num_train_steps=1000 --num_warmup_steps=10 \\
    --max_seq_length=512 --max_predictions_per_seq=80 --init_checkpoint=phase1 \\
    --init_checkpoint_state=all
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from absl.flags import FlagValues

from bert_tf.errors import BertTfError
from bert_tf.flags import INIT_CHECKPOINT_STATES, Flag, flag_values, require, run_main

FLAGS = flag_values(
    "model", "vocab_size", "input_file", "max_seq_length", "max_predictions_per_seq", "dynamic_masking", "schedule",
    "optimisation", "runtime", "precision", "output_dir",
    own={
        "num_train_steps": Flag(int, 100000, "Number of training steps."),
        "num_warmup_steps": Flag(int, 10000, "Number of warmup steps."),
        "max_eval_steps": Flag(int, 100, "Maximum number of eval steps."),
        "num_tpu_cores": Flag(int, 8, "Only used with --use_tpu: TF2 trains on every core of the TPU and warns if "
                              "this differs."),
        "gradient_accumulation_steps": Flag(int, 1, "Split each batch into this many micro-batches whose gradients "
                                            "are summed before one update (the same update as the whole batch)."),
        "eval_input_file": Flag(str, None, "[Optional] TFRecords to evaluate on (held-out data); by default "
                                "--input_file, as the original."),
        "init_checkpoint_state": Flag(INIT_CHECKPOINT_STATES, "weights", "What --init_checkpoint carries into a new "
                                      "--output_dir: weights (the original's: step 0, fresh optimiser and schedule) "
                                      "or all (a run_pretraining.py checkpoint's step, Adam moments and so its "
                                      "learning-rate schedule too; --num_train_steps is then the total of both "
                                      "phases). The input always starts afresh."),
    },
)  # fmt: skip


def bert_config(values: FlagValues):
    """The run's `BertConfig`: from --bert_config_file or --preset (not both); else the
    bert_config.json of --output_dir (a run to resume or evaluate) or of --init_checkpoint.

    With --preset, the vocabulary size is --vocab_size, else the number of tokens of
    --vocab_file (a vocabulary built for the corpus), else Google's 30522.
    """
    import tensorflow as tf

    from bert_tf import BertConfig
    from bert_tf.tokenization import load_vocab
    from bert_tf.training.pretraining import CONFIG_NAME

    if values.bert_config_file and values.preset:
        raise BertTfError("Pass either --bert_config_file or --preset, not both.")
    if values.bert_config_file:
        return BertConfig.from_json_file(values.bert_config_file)
    if values.preset:
        from_vocab = values.vocab_file and not values["vocab_size"].present
        vocab_size = max(load_vocab(values.vocab_file).values()) + 1 if from_vocab else values.vocab_size
        return BertConfig.from_preset(values.preset, vocab_size=vocab_size)
    init = values.init_checkpoint
    folders = [values.output_dir, init if not init or tf.io.gfile.isdir(init) else os.path.dirname(init)]
    for folder in filter(None, folders):
        if tf.io.gfile.exists(path := os.path.join(folder, CONFIG_NAME)):
            return BertConfig.from_json_file(path)
    raise BertTfError(f"Pass --bert_config_file or --preset to say which BERT to train (neither --output_dir nor "
                      f"--init_checkpoint holds a {CONFIG_NAME}).")


def options_from_flags(values: FlagValues):
    """The `PretrainingOptions` of parsed flags."""
    from bert_tf.training import PretrainingOptions

    require(values, "input_file", "output_dir")
    strategy = values.distribution_strategy or ("tpu" if values.use_tpu else "one_device")
    return PretrainingOptions(
        bert_config=bert_config(values),
        input_file=values.input_file,
        output_dir=values.output_dir,
        init_checkpoint=values.init_checkpoint,
        init_checkpoint_state=values.init_checkpoint_state,
        eval_input_file=values.eval_input_file,
        max_seq_length=values.max_seq_length,
        max_predictions_per_seq=values.max_predictions_per_seq,
        do_train=values.do_train,
        do_eval=values.do_eval,
        train_batch_size=values.train_batch_size,
        eval_batch_size=values.eval_batch_size,
        learning_rate=values.learning_rate,
        num_train_steps=values.num_train_steps,
        num_warmup_steps=values.num_warmup_steps,
        save_checkpoints_steps=values.save_checkpoints_steps,
        iterations_per_loop=values.iterations_per_loop,
        max_eval_steps=values.max_eval_steps,
        distribution_strategy=strategy,
        tpu_name=values.tpu_name or values.master,
        tpu_zone=values.tpu_zone,
        gcp_project=values.gcp_project,
        num_tpu_cores=values.num_tpu_cores if strategy == "tpu" else None,
        optimizer=values.optimizer,
        adam_bias_correction=values.adam_bias_correction,
        lr_decay=values.lr_decay,
        mixed_precision=values.mixed_precision,
        jit_compile=values.jit_compile,
        gradient_accumulation_steps=values.gradient_accumulation_steps,
        dynamic_masking=values.dynamic_masking,
        vocab_file=values.vocab_file,
        seed=values.random_seed,
        keep_checkpoint_max=values.keep_checkpoint_max,
    )


def _pretrain(values: FlagValues) -> Any:
    import tensorflow as tf

    from bert_tf.training import run

    tf.get_logger().setLevel("ERROR")  # our own lines say what happens; TF's Python warnings add noise
    return run(options_from_flags(values))


def main(argv: Sequence[str] | None = None) -> int:
    """run_pretraining.py / bert-pretrain (`argv` without the program name): exit status 0,
    or 1 after one `error: ...` line on stderr."""
    return run_main(FLAGS, argv, __doc__, _pretrain)


if __name__ == "__main__":
    sys.exit(main())
