"""`PretrainingOptions`: the flags of `run_pretraining.py`, with the original's defaults.

Example:
>>> options = PretrainingOptions(bert_config=BertConfig.from_preset("tiny"), input_file="x",
...                              output_dir="out", do_train=True, train_batch_size=32,
...                              gradient_accumulation_steps=4)
>>> options.validate()
>>> PretrainingOptions(bert_config=BertConfig.from_preset("tiny"), input_file="x", output_dir="out",
...                    do_train=True, mixed_precision="fp8").validate()
Traceback (most recent call last):
...
bert_tf.errors.BertTfError: Unknown --mixed_precision 'fp8'; use one of none, bf16, fp16.
"""

from __future__ import annotations

import dataclasses

from bert_tf.config import BertConfig
from bert_tf.errors import BertTfError
from bert_tf.flags import INIT_CHECKPOINT_STATES
from bert_tf.optimization import OPTIMIZERS
from bert_tf.training.distribution import STRATEGIES
from bert_tf.training.runloop import PRECISIONS


@dataclasses.dataclass
class PretrainingOptions:
    """The flags of `run_pretraining.py`, with the original's defaults."""

    bert_config: BertConfig
    input_file: str
    output_dir: str
    init_checkpoint: str | None = None
    init_checkpoint_state: str = "weights"  # or "all": see bert_tf.training.pretraining
    eval_input_file: str | None = None
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    do_train: bool = False
    do_eval: bool = False
    train_batch_size: int = 32
    eval_batch_size: int = 8
    learning_rate: float = 5e-5
    num_train_steps: int = 100_000
    num_warmup_steps: int = 10_000
    save_checkpoints_steps: int = 1000
    iterations_per_loop: int = 1000
    max_eval_steps: int = 100
    distribution_strategy: str = "one_device"
    tpu_name: str | None = None
    tpu_zone: str | None = None
    gcp_project: str | None = None
    optimizer: str = "adamw"
    adam_bias_correction: bool = False
    lr_decay: str = "original"
    mixed_precision: str = "none"
    jit_compile: bool = False
    gradient_accumulation_steps: int = 1
    dynamic_masking: bool = False
    vocab_file: str | None = None
    num_tpu_cores: int | None = None
    seed: int = 12345
    keep_checkpoint_max: int = 5

    def validate(self) -> None:
        """Raises `BertTfError` naming the first flag that cannot work."""
        if not (self.do_train or self.do_eval):
            raise BertTfError("At least one of --do_train or --do_eval must be set.")
        for name in (
            "max_seq_length",
            "max_predictions_per_seq",
            "train_batch_size",
            "eval_batch_size",
            "num_train_steps",
            "save_checkpoints_steps",
            "iterations_per_loop",
            "max_eval_steps",
            "gradient_accumulation_steps",
            "keep_checkpoint_max",
        ):
            if getattr(self, name) < 1:
                raise BertTfError(f"--{name} must be at least 1, got {getattr(self, name)}.")
        if self.num_warmup_steps < 0:
            raise BertTfError(f"--num_warmup_steps must not be negative, got {self.num_warmup_steps}.")
        if not self.learning_rate > 0:
            raise BertTfError(f"--learning_rate must be positive, got {self.learning_rate}.")
        if self.max_predictions_per_seq > self.max_seq_length:
            raise BertTfError(
                f"--max_predictions_per_seq ({self.max_predictions_per_seq}) must not exceed "
                f"--max_seq_length ({self.max_seq_length})."
            )
        if self.max_seq_length > self.bert_config.max_position_embeddings:
            raise BertTfError(
                f"--max_seq_length ({self.max_seq_length}) exceeds the model's max_position_embeddings "
                f"({self.bert_config.max_position_embeddings})."
            )
        _check_choice("init_checkpoint_state", self.init_checkpoint_state, INIT_CHECKPOINT_STATES)
        if self.init_checkpoint_state == "all" and not self.init_checkpoint:
            raise BertTfError("--init_checkpoint_state=all carries the state of --init_checkpoint: pass that too.")
        _check_choice("distribution_strategy", self.distribution_strategy, STRATEGIES)
        _check_choice("optimizer", self.optimizer, OPTIMIZERS)
        _check_choice("mixed_precision", self.mixed_precision, tuple(PRECISIONS))


def _check_choice(flag: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise BertTfError(f"Unknown --{flag} {value!r}; use one of {', '.join(choices)}.")
