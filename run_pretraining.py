"""Pre-trains BERT (masked LM + next sentence) on the TFRecords of create_pretraining_data.py.

The original's flags and defaults, plus strategies, optimisers, mixed precision, XLA,
gradient accumulation and dynamic masking. The same command runs on one CPU, on the
GPUs of a machine, on several machines (TF_CONFIG) or on a TPU; re-running it after any
interruption resumes from the last checkpoint in --output_dir. See bert_tf.training.

Example:
  python run_pretraining.py --input_file='data/train.tfrecord*' --output_dir=out \\
    --preset=tiny --do_train --do_eval --train_batch_size=32 --num_train_steps=1000 \\
    --num_warmup_steps=100 --learning_rate=1e-4
  tensorboard --logdir out
"""

from __future__ import annotations

import os
import sys

# TensorFlow's C++ start-up chatter (CUDA probes on CPU hosts, oneDNN notes) would bury
# our one-line messages; TF_CPP_MIN_LOG_LEVEL=0 brings it back for debugging.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import flags  # noqa: E402 (after the log level, which TensorFlow reads on import)

# Our own registry, not absl's global one: the flags then never clash with another
# module's of the same name (Model Garden's scripts define --input_file too) when
# run_pretraining is imported as a library, e.g. by the tests.
FLAGS = flags.FlagValues()

# The original's flags, with its defaults.
flags.DEFINE_string("bert_config_file", None, "The config json file of the pre-trained BERT model (or use --preset).", flag_values=FLAGS)
flags.DEFINE_string("input_file", None, "Input TFRecord files: comma-separated glob patterns.", flag_values=FLAGS)
flags.DEFINE_string("output_dir", None, "Where checkpoints, TensorBoard logs and eval_results.txt are written.", flag_values=FLAGS)
flags.DEFINE_string("init_checkpoint", None, "Initial weights: Google's TF1 checkpoint, a HuggingFace directory, a .keras file, or one of our training checkpoints (directory or prefix). Ignored when --output_dir already holds a checkpoint (the run resumes).", flag_values=FLAGS)
flags.DEFINE_integer("max_seq_length", 128, "The maximum total input sequence length after WordPiece tokenization; must match the data.", flag_values=FLAGS)
flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum number of masked LM predictions per sequence; must match the data.", flag_values=FLAGS)
flags.DEFINE_bool("do_train", False, "Whether to run training.", flag_values=FLAGS)
flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.", flag_values=FLAGS)
flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training: examples per optimiser step, over all replicas and accumulation steps.", flag_values=FLAGS)
flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.", flag_values=FLAGS)
flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.", flag_values=FLAGS)
flags.DEFINE_integer("num_train_steps", 100000, "Number of training steps.", flag_values=FLAGS)
flags.DEFINE_integer("num_warmup_steps", 10000, "Number of warmup steps.", flag_values=FLAGS)
flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save the model checkpoint.", flag_values=FLAGS)
flags.DEFINE_integer("iterations_per_loop", 1000, "How many steps to make in each host call (one progress line, one TensorBoard point).", flag_values=FLAGS)
flags.DEFINE_integer("max_eval_steps", 100, "Maximum number of eval steps.", flag_values=FLAGS)
flags.DEFINE_bool("use_tpu", False, "Whether to use TPU (the same as --distribution_strategy=tpu).", flag_values=FLAGS)
flags.DEFINE_string("tpu_name", None, "The Cloud TPU to use for training: a name or a grpc://ip:port address.", flag_values=FLAGS)
flags.DEFINE_string("tpu_zone", None, "[Optional] GCE zone of the Cloud TPU; detected automatically if not given.", flag_values=FLAGS)
flags.DEFINE_string("gcp_project", None, "[Optional] Project of the Cloud TPU; detected automatically if not given.", flag_values=FLAGS)
flags.DEFINE_string("master", None, "[Optional] TensorFlow master URL: the TPU address when --tpu_name is not given.", flag_values=FLAGS)
flags.DEFINE_integer("num_tpu_cores", 8, "Only used if --use_tpu: TF2 trains on every core of the TPU and warns if this differs.", flag_values=FLAGS)

# Ours.
flags.DEFINE_enum("distribution_strategy", None, ["one_device", "mirrored", "multi_worker_mirrored", "tpu"], "one_device (a GPU, else the CPU), mirrored (all local GPUs), multi_worker_mirrored (the workers of TF_CONFIG) or tpu. Default: tpu with --use_tpu, else one_device.", flag_values=FLAGS)
flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "adamw: the original AdamWeightDecay (no bias correction, epsilon 1e-6, decay 0.01 except LayerNorm and bias, clipping 1.0); lamb: for large batches.", flag_values=FLAGS)
flags.DEFINE_enum("lr_decay", "original", ["original", "from_peak"], "original: linear decay counted from step 0, as the original (the rate falls to 1 - num_warmup_steps/num_train_steps of the peak when warm-up ends); from_peak: from the peak at the end of warm-up to 0, as HF's get_linear_schedule_with_warmup.", flag_values=FLAGS)
flags.DEFINE_bool("adam_bias_correction", False, "With --optimizer=adamw: Adam's bias correction of the moments (as torch's AdamW and Model Garden; the original has none, which makes the first ~1000 updates up to ~3x larger and can collapse a small model at a high learning rate).", flag_values=FLAGS)
flags.DEFINE_enum("mixed_precision", "none", ["none", "bf16", "fp16"], "Compute in bfloat16 or float16 (with dynamic loss scaling); variables, LayerNorm, softmax and losses stay float32.", flag_values=FLAGS)
flags.DEFINE_bool("jit_compile", False, "XLA-compile the train step (only its forward/backward under multi-replica strategies). On a CPU the step is 6-8% slower with it than without (bench/pretrain.py; why: bench/xla_matmuls.py).", flag_values=FLAGS)
flags.DEFINE_integer("gradient_accumulation_steps", 1, "Split each batch into this many micro-batches whose gradients are summed before one update (the same update as the whole batch at once).", flag_values=FLAGS)
flags.DEFINE_bool("dynamic_masking", False, "Mask the tokens anew in the input pipeline at every epoch (needed for data written with create_pretraining_data.py --dynamic_masking; whole words if the data holds word boundaries).", flag_values=FLAGS)
flags.DEFINE_string("vocab_file", None, "[Optional] With --dynamic_masking: the vocabulary of the data, for the ids of [MASK], [CLS] and [SEP] (default: Google's 103, 101, 102).", flag_values=FLAGS)
flags.DEFINE_string("eval_input_file", None, "[Optional] TFRecords to evaluate on (held-out data); by default --input_file, as the original.", flag_values=FLAGS)
flags.DEFINE_enum("preset", None, ["tiny", "mini", "small", "medium", "base", "large"], "A BERT size by name instead of --bert_config_file.", flag_values=FLAGS)
flags.DEFINE_integer("vocab_size", 30522, "With --preset: the vocabulary size.", flag_values=FLAGS)
flags.DEFINE_integer("random_seed", 12345, "Seed of the initial weights, dropout and the input order (the same on every worker).", flag_values=FLAGS)
flags.DEFINE_integer("keep_checkpoint_max", 5, "How many recent checkpoints to keep.", flag_values=FLAGS)


def bert_config(values):
    """The run's `BertConfig`: from --bert_config_file or --preset (exactly one)."""
    from bert_tf import BertConfig, BertTfError

    if values.bert_config_file and values.preset:
        raise BertTfError("Pass either --bert_config_file or --preset, not both.")
    if values.bert_config_file:
        return BertConfig.from_json_file(values.bert_config_file)
    if values.preset:
        return BertConfig.from_preset(values.preset, vocab_size=values.vocab_size)
    raise BertTfError("Pass --bert_config_file or --preset to say which BERT to train.")


def options_from_flags(values):
    from bert_tf import BertTfError
    from bert_tf.training import PretrainingOptions

    for name in ("input_file", "output_dir"):
        if not getattr(values, name):
            raise BertTfError(f"--{name} is required.")
    strategy = values.distribution_strategy or ("tpu" if values.use_tpu else "one_device")
    return PretrainingOptions(
        bert_config=bert_config(values),
        input_file=values.input_file,
        output_dir=values.output_dir,
        init_checkpoint=values.init_checkpoint,
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


def main(argv: list[str] | None = None) -> int:
    """Runs the job; a user mistake prints one sentence on stderr and returns 1."""
    argv = list(sys.argv if argv is None else argv)
    if any(arg in ("-h", "--help", "--helpshort", "--helpfull") for arg in argv[1:]):
        print(__doc__ + "\n" + FLAGS.module_help(sys.modules[__name__]))
        return 0
    FLAGS.unparse_flags()  # back to the defaults: main() may run more than once in a process
    try:
        FLAGS(argv)
    except flags.Error as error:
        print(f"{error}.".replace("..", "."), file=sys.stderr)
        return 1
    import tensorflow as tf

    from bert_tf import BertTfError
    from bert_tf.training import run

    tf.get_logger().setLevel("ERROR")  # our own lines say what happens; TF's Python warnings add noise
    try:
        run(options_from_flags(FLAGS))
    except BertTfError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
