"""A fine-tuned run as a checkpoint that other code loads: transformers' task models, or
the original's TF1 names.

    bert-export --model_dir out/mrpc --export_dir hf/mrpc --format hf
    bert-export --model_dir out/squad --export_dir tf1/squad --format tf1

Why: the weights of a fine-tuned run are a Keras `model.weights.h5` that only this
repository reads. A user who serves with `transformers` (its `pipeline`), hands the model
to a colleague on the original TensorFlow 1 code, or fine-tunes the run further (the
paper starts RTE, MRPC and STS-B from an MNLI model) wants the encoder and the task's
head in their layout:

| run | `--format hf` (`config.json` architecture) | `--format tf1` (the original's variable names) |
|---|---|---|
| run_classifier.py | `BertForSequenceClassification`: `classifier.*`, `id2label`, STS-B `problem_type: regression` | `output_weights` [labels, hidden], `output_bias` (run_classifier.py's) |
| run_ner.py | `BertForTokenClassification`: `classifier.*`, `id2label` the tags | the same names, one dense layer on every position |
| run_squad.py | `BertForQuestionAnswering`: `qa_outputs.*` | `cls/squad/output_weights` [2, hidden], `cls/squad/output_bias` (run_squad.py's) |

The encoder is under `bert.` (HF) or `bert/` (TF1); HF's token-level models have no
pooler, as theirs. With it go `vocab.txt`, HF's `tokenizer_config.json` (the run's
casing and `max_seq_length`, so that `AutoTokenizer` tokenizes as the run did) or, for
TF1, `bert_config.json` and `labels.txt` (label names in id order). Any of these
directories is also an `--init_checkpoint` (its encoder is read, the head ignored).
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np

from bert_tf.atomic import atomic_folder, write_text
from bert_tf.checkpoints import hf, names, tf1
from bert_tf.checkpoints.base import VOCAB_NAME
from bert_tf.hub_export import task_encoder
from fine_tune.run_dir import LoadedRun

FORMATS = ("hf", "tf1")
LABELS_FILE = "labels.txt"
TOKENIZER_CONFIG = "tokenizer_config.json"

# family -> (HF architecture, HF head scope, TF1 head names)
_HEADS = {
    "classifier": ("BertForSequenceClassification", "classifier", ("output_weights", "output_bias")),
    "ner": ("BertForTokenClassification", "classifier", ("output_weights", "output_bias")),
    "squad": ("BertForQuestionAnswering", "qa_outputs", ("cls/squad/output_weights", "cls/squad/output_bias")),
}


def head_weights(run: LoadedRun) -> tuple[np.ndarray, np.ndarray]:
    """The task head's weight [outputs, hidden] (torch's and the original's layout) and bias."""
    layer = run.model.get_layer("span_logits" if run.family == "squad" else "logits")
    kernel, bias = (np.asarray(value) for value in layer.get_weights())
    return kernel.T, bias


def encoder_weights(run: LoadedRun, format: str) -> dict[str, np.ndarray]:
    """The encoder's weights under TF1 names; for HF without the pooler under a token-level
    head (its token classification and question answering models have none; the
    original's BertModel always builds one)."""
    weights = names.collect(names.encoder_slots(task_encoder(run.model)))
    if format == "tf1" or run.family == "classifier":
        return weights
    return {name: value for name, value in weights.items() if not name.startswith("bert/pooler/")}


def hf_task_config(run: LoadedRun) -> dict:
    """`config.json` entries of the run's HF task model."""
    entries: dict = {"architectures": [_HEADS[run.family][0]]}
    if run.family == "squad":
        return entries
    labels = run.labels or ("LABEL_0",)  # regression: one output
    entries["id2label"] = {str(index): label for index, label in enumerate(labels)}
    entries["label2id"] = {label: index for index, label in enumerate(labels)}
    if run.family == "classifier":
        entries["problem_type"] = "regression" if run.is_regression else "single_label_classification"
    return entries


def export_checkpoint(run: LoadedRun, export_dir: str, format: str) -> str:
    """Writes `run` to the new folder `export_dir` in `format` ("hf" or "tf1"), atomically."""
    _, scope, tf1_names = _HEADS[run.family]
    weight, bias = head_weights(run)
    with atomic_folder(export_dir) as staging:
        if format == "hf":
            hf.write(staging, encoder_weights(run, format), run.config, {f"{scope}.weight": weight, f"{scope}.bias": bias},
                     hf_task_config(run))  # fmt: skip
            tokenizer = {"tokenizer_class": "BertTokenizer", "do_lower_case": run.do_lower_case,
                         "model_max_length": run.max_seq_length}  # fmt: skip
            write_text(os.path.join(staging, TOKENIZER_CONFIG), json.dumps(tokenizer, indent=2) + "\n")
        else:
            tf1.write(staging, {**encoder_weights(run, format), **dict(zip(tf1_names, (weight, bias)))}, run.config)
            if run.labels:
                write_text(os.path.join(staging, LABELS_FILE), "".join(f"{label}\n" for label in run.labels))
        shutil.copyfile(run.vocab_file, os.path.join(staging, VOCAB_NAME))
    if format == "tf1":
        tf1.warn_unless_original_activation(run.config, export_dir)
    return export_dir
