"""The one flag layer of every command: absl flags, as the original's `tf.flags`.

So `--do_train`, `--do_train=true`, `--nodo_train`, `--flagfile=FILE` and `--helpfull`
work in every command. Each flag shared by two commands is declared once, in `SHARED`,
and so has the same type, default and help everywhere; `GROUPS` bundles them (model
source, optimisation, schedule, runtime and strategy, precision, output). A command
builds its own `FlagValues` with `flag_values(...)` (groups, single shared flags and
its own `Flag`s), so importing two commands never makes their flags clash, and runs
its body through `run_main`: a user mistake (an unknown flag, a bad value, a missing
file...) then ends as one line `error: ...` and exit status 1.

Aliases keep the spellings of this project's earlier versions (`--task` for the
original's `--task_name`, `--seed` for `--random_seed`).

Example:
>>> values = flag_values("optimisation", own={"steps": Flag(int, 3, "Steps.")})
>>> parse(values, ["--learning_rate=1e-4", "--noadam_bias_correction", "--steps", "5"])  # the rest: none
[]
>>> values.learning_rate, values.adam_bias_correction, values.steps, values.optimizer
(0.0001, False, 5, 'adamw')
>>> parse(values, ["--learning_rat=1e-4"])
Traceback (most recent call last):
...
bert_tf.errors.BertTfError: Unknown flag --learning_rat; did you mean --learning_rate? (--helpfull lists all flags.)
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from absl import flags

from bert_tf.config import ACTIVATIONS, PRESETS
from bert_tf.errors import BertTfError, run_command

HELP_ARGS = ("-h", "--help", "-help", "--helpshort", "--helpfull")

# The values of enum flags that bert_tf.optimization, bert_tf.training and fine_tune.trainer
# hold too: repeated here (and tested equal) so that a command's flags need neither Keras
# nor TensorFlow (the data tools run without them).
OPTIMIZERS = ("adamw", "lamb")
LR_DECAYS = ("original", "from_peak")
STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")
MIXED_PRECISION = ("none", "bf16", "fp16")
# What run_pretraining.py's --init_checkpoint carries into the run (bert_tf.training.options).
INIT_CHECKPOINT_STATES = ("weights", "all")


@dataclasses.dataclass(frozen=True)
class Flag:
    """One flag: its type (`str`, `int`, `float`, `bool`, `list` (of strings: the flag may be
    repeated), or a tuple of the enum's values), default, help (what the flag does, one or
    two sentences) and alias names."""

    kind: type | tuple[str, ...]
    default: Any
    help: str
    aliases: tuple[str, ...] = ()

    def define(self, name: str, values: flags.FlagValues) -> None:
        if isinstance(self.kind, tuple):
            flags.DEFINE_enum(name, self.default, list(self.kind), self.help, flag_values=values)
        else:
            define = {str: flags.DEFINE_string, int: flags.DEFINE_integer, float: flags.DEFINE_float,
                      bool: flags.DEFINE_bool, list: flags.DEFINE_multi_string}[self.kind]  # fmt: skip
            define(name, self.default, self.help, flag_values=values)
        for alias in self.aliases:
            flags.DEFINE_alias(alias, name, flag_values=values)


# === The shared flags ===
SHARED: dict[str, Flag] = {
    # Model source.
    "bert_config_file": Flag(str, None, "The bert_config.json of the BERT model (or give --preset); default: the one "
                             "beside --init_checkpoint."),
    "preset": Flag(PRESETS, None, "A BERT size by name instead of --bert_config_file."),
    "vocab_size": Flag(int, 30522, "The vocabulary size: tokens in vocab.txt, special and unused ones included "
                       "(with --preset: the model's)."),
    "init_checkpoint": Flag(str, None, "Initial weights: Google's TF1 checkpoint, a HuggingFace folder, a .keras file "
                            "or one of our checkpoints (folder or prefix)."),
    "vocab_file": Flag(str, None, "The vocab.txt of the BERT model; default: the one beside the checkpoint, where "
                       "the command reads one."),
    "do_lower_case": Flag(bool, True, "Lower-case the input and strip accents (uncased models) or not (cased "
                          "models)."),
    "hidden_act": Flag(ACTIVATIONS, None, "Override the config's activation: gelu is the tanh approximation of the "
                       "original, gelu_exact the erf form (HuggingFace's gelu)."),
    # Input.
    "input_file": Flag(str, None, "Input files: comma-separated glob patterns."),
    "max_seq_length": Flag(int, 128, "The maximum total input sequence length after WordPiece tokenization; longer "
                           "inputs are truncated (pre-training: as the data was written)."),
    "max_predictions_per_seq": Flag(int, 20, "Maximum number of masked LM predictions per sequence."),
    "dynamic_masking": Flag(bool, False, "Dynamic masking: the data holds each instance once, unmasked, and the input "
                            "pipeline masks it anew at every epoch (give it to both create_pretraining_data.py and "
                            "run_pretraining.py)."),
    "random_seed": Flag(int, 12345, "Random seed: of the data, the initial weights, dropout and the input order.",
                        aliases=("seed",)),
    # Phases and batches.
    "do_train": Flag(bool, False, "Whether to run training."),
    "do_eval": Flag(bool, False, "Whether to run eval on the dev set."),
    "train_batch_size": Flag(int, 32, "Total batch size for training: examples per optimiser step, over all "
                             "replicas and accumulation steps."),
    "eval_batch_size": Flag(int, 8, "Total batch size for eval."),
    # Optimisation.
    "learning_rate": Flag(float, 5e-5, "The peak learning rate."),
    "optimizer": Flag(OPTIMIZERS, "adamw", "adamw: the original AdamWeightDecay (no bias correction, epsilon 1e-6, "
                      "clipping 1.0); lamb: for large batches."),
    "adam_bias_correction": Flag(bool, False, "With --optimizer=adamw: Adam's bias correction of the moments, as "
                                 "torch's AdamW and Model Garden (the original has none)."),
    "lr_decay": Flag(LR_DECAYS, "original", "original: linear decay counted from step 0, as the original; from_peak: "
                     "from the peak at the end of warm-up to 0, as HF's get_linear_schedule_with_warmup."),
    # Schedule.
    "save_checkpoints_steps": Flag(int, 1000, "How often to save the model checkpoint."),
    "iterations_per_loop": Flag(int, 1000, "How many steps to make in each host call (one progress line, one "
                                "TensorBoard point)."),
    "keep_checkpoint_max": Flag(int, 5, "How many recent checkpoints to keep."),
    # Runtime and strategy.
    "distribution_strategy": Flag(STRATEGIES, None, "one_device (a GPU, else the CPU), mirrored (all local GPUs), "
                                  "multi_worker_mirrored (the workers of TF_CONFIG) or tpu; default: tpu with "
                                  "--use_tpu, else one_device."),
    "use_tpu": Flag(bool, False, "Whether to use TPU (the same as --distribution_strategy=tpu)."),
    "tpu_name": Flag(str, None, "The Cloud TPU to use: a name or a grpc://ip:port address."),
    "tpu_zone": Flag(str, None, "[Optional] GCE zone of the Cloud TPU; detected automatically if not given."),
    "gcp_project": Flag(str, None, "[Optional] Project of the Cloud TPU; detected automatically if not given."),
    "master": Flag(str, None, "[Optional] TensorFlow master URL: the TPU address when --tpu_name is not given."),
    # Precision.
    "mixed_precision": Flag(MIXED_PRECISION, "none", "bf16: the projections' matmuls in bfloat16, everything else "
                            "float32, as torch.autocast; fp16: the mixed_float16 policy with dynamic loss scaling."),
    "jit_compile": Flag(bool, False, "XLA-compile the train step."),
    # A finished fine-tuning run's task settings.
    "setting": Flag(list, [], "NAME=VALUE: a field of the run's task config to change, e.g. "
                    "null_score_diff_threshold=-1.5 for a SQuAD 2.0 run (repeatable)."),
    # Output.
    "output_dir": Flag(str, None, "Where checkpoints, TensorBoard logs, results and predictions are written."),
    "output_file": Flag(str, None, "The file(s) to write, comma-separated where a command writes several."),
    # Fine-tuning data files.
    "train_file": Flag(str, None, "The training file, relative to --data_dir if given; default: the task's own."),
    "dev_file": Flag(str, None, "The dev file, relative to --data_dir if given; default: the task's own."),
    "test_file": Flag(str, None, "The test file, relative to --data_dir if given; default: the task's own."),
}

GROUPS: dict[str, tuple[str, ...]] = {
    "model": ("bert_config_file", "preset", "init_checkpoint", "vocab_file"),
    "optimisation": ("learning_rate", "optimizer", "adam_bias_correction", "lr_decay"),
    "schedule": ("do_train", "do_eval", "train_batch_size", "eval_batch_size", "save_checkpoints_steps",
                 "iterations_per_loop", "keep_checkpoint_max"),
    "runtime": ("distribution_strategy", "use_tpu", "tpu_name", "tpu_zone", "gcp_project", "master", "random_seed"),
    "precision": ("mixed_precision", "jit_compile"),
}  # fmt: skip


def flag_values(*shared: str, own: Mapping[str, Flag] | None = None) -> flags.FlagValues:
    """A command's flags: `shared` names groups of `GROUPS` or single flags of `SHARED`;
    `own` holds the command's own flags (names no shared flag has)."""
    values = flags.FlagValues()
    for name in _expand(shared):
        SHARED[name].define(name, values)
    for name, flag in (own or {}).items():
        if name in SHARED:
            raise ValueError(f"--{name} is a shared flag: name it in `shared` instead")
        flag.define(name, values)
    return values


def set_help(values: flags.FlagValues, name: str, text: str) -> None:
    """Says what a shared flag means to this command (`--input_file`: one file, not patterns)."""
    values[name].help = text


def set_default(values: flags.FlagValues, name: str, default: Any) -> None:
    """Changes the default of `--name` and of its aliases (which absl resets separately)."""
    for alias in values:
        if alias == name or values[alias].help == f"Alias for --{name}.":
            values.set_default(alias, default)


def _expand(names: Sequence[str]) -> list[str]:
    expanded = [flag for name in names for flag in GROUPS.get(name, (name,))]
    return list(dict.fromkeys(expanded))  # in order, once


# === Parsing ===
def parse(values: flags.FlagValues, argv: Sequence[str], known_only: bool = False) -> list[str]:
    """Parses `argv` (without the program name) into `values`, from their defaults;
    raises a one-sentence `BertTfError` for an unknown flag, a bad value or an argument.

    With `known_only`, the arguments that are none of `values`' flags are returned
    instead (e.g. a Beam pipeline's own options)."""
    values.unparse_flags()  # back to the defaults: a command may run twice in a process
    try:
        rest = values(["prog", *argv], known_only=known_only)
    except flags.UnrecognizedFlagError as error:
        raise BertTfError(f"Unknown flag --{error.flagname}{_suggestion(values, error.flagname)} "
                          "(--helpfull lists all flags.)") from None
    except flags.Error as error:
        raise BertTfError(_sentence(str(error))) from None
    if rest[1:] and not known_only:
        raise BertTfError(f"Unexpected argument {rest[1]!r}: flags are written --name=value.")
    return rest[1:]


def _sentence(message: str) -> str:
    """absl's message as one sentence; an enum's says which values are valid."""
    choice = re.fullmatch(r"flag --(\w+)=(.*): value should be one of <(.*)>", message.strip())
    if choice:
        name, value, values = choice.groups()
        return f"--{name}: invalid choice {value!r}; use one of {', '.join(values.split('|'))}."
    return f"{message.strip().rstrip('.')}."


def _suggestion(values: flags.FlagValues, name: str) -> str:
    names = list(values)
    names += [f"no{name}" for name in names if values[name].boolean]
    close = difflib.get_close_matches(name, names, n=1)
    return f"; did you mean --{close[0]}?" if close else "."


def require(values: flags.FlagValues, *names: str) -> None:
    """Raises a `BertTfError` for the first of the flags `names` that has no value."""
    for name in names:
        if values[name].value in (None, ""):
            raise BertTfError(f"--{name} is required.")


def setting_changes(saved: Mapping[str, Any], ours: Mapping[str, Any]) -> str:
    """The settings of `ours` that `saved` holds with another value, in words ("" if none),
    for a run that must go on with the settings it was started with. A setting `saved`
    lacks (recorded before it was kept) is not compared; a dict (a model config) is told
    by its keys that differ, a list (files with their sizes) only as differing.

    >>> setting_changes({"seed": 1, "config": {"act": "gelu"}, "files": [["a", 1]]},
    ...                 {"seed": 2, "config": {"act": "relu"}, "files": [["a", 2]], "new": 0})
    'seed was 1, now 2, config.act was gelu, now relu, files differ in names or sizes'
    """
    return ", ".join(_change(name, saved[name], value) for name, value in ours.items()
                     if name in saved and saved[name] != value)  # fmt: skip


def _change(name: str, old: Any, new: Any) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        return "; ".join(_change(f"{name}.{key}", old.get(key), value) for key, value in new.items()
                         if old.get(key) != value)  # fmt: skip
    if isinstance(old, list):
        return f"{name} differ in names or sizes"
    return f"{name} was {old}, now {new}"


def path_within(path: str, folder: str) -> bool:
    """Whether the path `path` is `folder` or lies inside it (links resolved): an output
    flag that would replace an input (or a folder holding it) is refused with this."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([path, folder]) == folder


def check_output_file(path: str, flag: str) -> None:
    """Raises `BertTfError` unless the file `path` can be written (its missing folders are
    made when it is): not a folder, no file among its parents, the nearest folder writable.

    >>> check_output_file("/etc/passwd/out.txt", "--output_file")
    Traceback (most recent call last):
    ...
    bert_tf.errors.BertTfError: --output_file /etc/passwd/out.txt cannot be made: /etc/passwd is a file, not a folder.
    """
    if os.path.isdir(path):
        raise BertTfError(f"{flag} {path} is a folder; give a file name.")
    folder = _nearest_existing_parent(path)
    if not os.path.isdir(folder):
        raise BertTfError(f"{flag} {path} cannot be made: {folder} is a file, not a folder.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise BertTfError(f"Cannot write {flag} {path}: the folder {folder} is not writable.")


def file_in_the_way(path: str) -> str | None:
    """The file (not folder) among the parents of `path` that would stop it being created, if any."""
    parent = _nearest_existing_parent(path)
    return None if os.path.isdir(parent) else parent


def _nearest_existing_parent(path: str) -> str:
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    return parent


def help_text(values: flags.FlagValues, description: str) -> str:
    """`description`, then every flag (in the order declared) with its aliases, type, default and help."""
    lines = [description.strip(), "", "flags:"]
    for name in values:
        flag = values[name]
        if flag.help.startswith("Alias for --"):  # listed with its flag
            continue
        aliases = [alias for alias in values if values[alias].help == f"Alias for --{name}."]
        spelled = ", ".join(f"--{n}" for n in (name, *aliases))
        default = flag.default_as_str.strip("'") if flag.default_as_str else "none"
        lines.append(f"  {spelled} ({flag.flag_type()}; default: {default})")
        lines.append(f"      {flag.help}")
    lines.append("  --flagfile (string)")
    lines.append("      Read flags from this file, one --name=value a line.")
    return "\n".join(lines)


def run_main(values: flags.FlagValues, argv: Sequence[str] | None, description: str,
             body: Callable[[flags.FlagValues], Any], interrupted: str = "interrupted.") -> int:  # fmt: skip
    """The entry point of a command: `--help` prints `help_text`; otherwise parses `argv`
    (default: `sys.argv[1:]`) and runs `body(values)` through `run_command` (`interrupted`:
    what to say after Ctrl-C)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(arg in HELP_ARGS for arg in argv):
        print(help_text(values, description))
        return 0
    return run_command(lambda: (parse(values, argv), body(values)), interrupted)
