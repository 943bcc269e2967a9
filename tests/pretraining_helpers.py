"""Helpers of the pre-training tests: tiny TFRecords in the original layout, a tiny config."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import numpy as np

from tests.conftest import PROJECT

VOCAB = 60
SEQ = 16
PREDICTIONS = 4
CLS, SEP, MASK = 2, 3, 4


def write_records(path: str | os.PathLike, count: int, seq: int = SEQ, predictions: int = PREDICTIONS,
                  seed: int = 0) -> str:  # fmt: skip
    """`count` masked instances with the original feature names (`input_ids`, ...).

    The masked tokens follow a learnable rule (the id of position p is a function of its
    neighbours) and NotNext pairs have segment B shifted, so a model can learn a little.
    """
    import tensorflow as tf

    rng = np.random.default_rng(seed)

    def int_feature(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))

    with tf.io.TFRecordWriter(os.fspath(path)) as writer:
        for _ in range(count):
            length = int(rng.integers(seq // 2, seq + 1))
            ids = np.zeros(seq, np.int64)
            ids[:length] = 5 + (np.arange(length) * int(rng.integers(1, 4)) + int(rng.integers(0, 50))) % (VOCAB - 5)
            ids[0], ids[length - 1] = CLS, SEP
            half = length // 2
            ids[half] = SEP
            segments = np.zeros(seq, np.int64)
            segments[half + 1 : length] = 1
            label = int(rng.integers(0, 2))
            positions = np.sort(rng.choice(np.arange(1, half), size=min(predictions, half - 1), replace=False))
            masked_ids = ids[positions].copy()
            ids[positions] = MASK
            pad = predictions - len(positions)
            example = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "input_ids": int_feature(ids),
                        "input_mask": int_feature((np.arange(seq) < length).astype(int)),
                        "segment_ids": int_feature(segments),
                        "masked_lm_positions": int_feature(list(positions) + [0] * pad),
                        "masked_lm_ids": int_feature(list(masked_ids) + [0] * pad),
                        "masked_lm_weights": tf.train.Feature(
                            float_list=tf.train.FloatList(value=[1.0] * len(positions) + [0.0] * pad)
                        ),
                        "next_sentence_labels": int_feature([label]),
                    }
                )
            )
            writer.write(example.SerializeToString())
    return os.fspath(path)


def write_vocab(path: str | os.PathLike) -> str:
    """A vocabulary of `VOCAB` tokens with [CLS], [SEP] and [MASK] at `CLS`, `SEP`, `MASK`."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(5, VOCAB)]
    pathlib.Path(path).write_text("\n".join(tokens) + "\n")
    return os.fspath(path)


def write_config(path: str | os.PathLike, dropout: float = 0.1, hidden: int = 32, layers: int = 2) -> str:
    """A tiny Google-style `bert_config.json`."""
    config = {
        "attention_probs_dropout_prob": dropout,
        "hidden_act": "gelu",
        "hidden_dropout_prob": dropout,
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": 4 * hidden,
        "max_position_embeddings": 64,
        "num_attention_heads": 2,
        "num_hidden_layers": layers,
        "type_vocab_size": 2,
        "vocab_size": VOCAB,
    }
    pathlib.Path(path).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return os.fspath(path)


def run_flags(input_file: str, output_dir: str, config_file: str, **overrides) -> list[str]:
    """`run_pretraining.py` flags of a tiny, fast run (overrides as `name=value`)."""
    values = {
        "input_file": input_file,
        "output_dir": output_dir,
        "bert_config_file": config_file,
        "max_seq_length": SEQ,
        "max_predictions_per_seq": PREDICTIONS,
        "do_train": True,
        "train_batch_size": 8,
        "eval_batch_size": 8,
        "learning_rate": 1e-3,
        "num_train_steps": 6,
        "num_warmup_steps": 2,
        "save_checkpoints_steps": 3,
        "iterations_per_loop": 3,
        "max_eval_steps": 2,
    }
    values.update(overrides)
    flags = []
    for name, value in values.items():
        if isinstance(value, bool):
            flags.append(f"--{name}" if value else f"--no{name}")
        elif value is not None:
            flags.append(f"--{name}={value}")
    return flags


def run_entry_point(flags: list[str], timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    """Runs `python run_pretraining.py FLAGS` in a fresh process."""
    return PROJECT.run("run_pretraining.py", *flags, timeout=timeout, env=env)


def fails_with(capsys, flags: list[str], *fragments: str) -> str:
    """Runs run_pretraining.py in-process with `flags`: it must exit 1 after one `error:` line
    holding every fragment, and no traceback. Returns that line."""
    from bert_tf.training import cli as run_pretraining

    assert run_pretraining.main([*flags]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "Traceback" not in error, error
    for fragment in fragments:
        assert fragment in error, error
    return error
