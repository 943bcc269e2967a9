"""The encoder and its preprocessing as two SavedModels in TF Hub's layout for BERT.

This is the layout of Model Garden's `official/nlp/tools/export_tfhub.py` (TF Hub's
"Preprocessor API for Text embeddings with Transformer Encoders"), so code written for
TF Hub's BERT models loads ours unchanged:

    preprocess = hub.load(PREPROCESS_DIR)                   # import tensorflow_text first
    tokenize = hub.KerasLayer(preprocess.tokenize)          # strings -> [batch, (words), (pieces)]
    pack = hub.KerasLayer(preprocess.bert_pack_inputs, arguments=dict(seq_length=128))
    encoder = hub.KerasLayer(ENCODER_DIR)
    outputs = encoder(pack([tokenize(text_a), tokenize(text_b)]))
    outputs["pooled_output"], outputs["sequence_output"], outputs["encoder_outputs"]

The preprocessing SavedModel: called on strings `[batch]`, it returns the three int32
inputs `[batch, seq_length]` (also its `serving_default` signature); `tokenize` gives
int32 WordPiece ids per word (words are cut at whitespace; Model Garden also cuts at
punctuation, which changes no id), `tokenize.get_special_tokens_dict()` the special ids,
and `bert_pack_inputs(segments, seq_length=...)` packs one or two segments (ragged rank
1 or 2) with the original's truncation. The tokenizer is `FastBertTokenizer`: ids equal
the original's (Model Garden's `BertTokenizer` uses tf_text's `BertTokenizer`, which
differs on some texts).

The encoder SavedModel: called on the dict of int32 inputs, it returns
`sequence_output`, `pooled_output`, `encoder_outputs` (every block's output) and
`default` (= `pooled_output`); its variables are trainable through `hub.KerasLayer(...,
trainable=True)`. Both are written under a temporary name and renamed when complete.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import tensorflow as tf

from bert_tf.atomic import atomic_folder
from bert_tf.encoder import INPUT_NAMES, BertEncoder
from bert_tf.preprocessing import BertPreprocessor
from bert_tf import tokenization

SIGNATURE = "serving_default"


def save_atomically(root: tf.Module, export_dir: str, signatures: dict | None = None) -> None:
    """`tf.saved_model.save` into a temporary folder beside `export_dir`, renamed to it when complete."""
    with atomic_folder(export_dir) as temporary:
        tf.saved_model.save(root, temporary, signatures=signatures)


def serving_function(function: Callable, specs: list) -> Callable:
    """`function` as an export's `tf.function`, without autograph: the graphs are plain TF
    ops (no Python control flow on tensors), and converting every function they call was
    most of the SQuAD graph's first trace (9 of 13 s)."""
    return tf.function(function, input_signature=specs, autograph=False)


# === Preprocessing ===
def preprocessing_module(vocab_file: str, do_lower_case: bool, seq_length: int = 128) -> tf.Module:
    """The preprocessing SavedModel's root object (see the module docstring)."""
    layer = BertPreprocessor(vocab_file, do_lower_case, seq_length)
    vocab = tokenization.load_vocab(vocab_file)
    special = {
        "vocab_size": max(vocab.values()) + 1,
        "start_of_sequence_id": layer.cls_id,
        "end_of_segment_id": layer.sep_id,
        "padding_id": layer.pad_id,
        "mask_id": vocab["[MASK]"],
    }
    root = tf.Module(name="bert_preprocess")
    root.layer = layer
    root.vocab_file = tf.saved_model.Asset(vocab_file)
    strings = tf.TensorSpec([None], tf.string, name="sentences")
    root.__call__ = serving_function(lambda sentences: layer(sentences), [strings])

    root.tokenize = tf.Module(name="tokenize")
    root.tokenize.__call__ = serving_function(lambda sentences: layer.tokenize(sentences), [strings])
    root.tokenize.get_special_tokens_dict = tf.Module(name="get_special_tokens_dict")
    root.tokenize.get_special_tokens_dict.__call__ = tf.function(
        lambda: {name: tf.constant(value, tf.int32) for name, value in special.items()}, input_signature=[]
    )

    root.bert_pack_inputs = tf.Module(name="bert_pack_inputs")
    pack = tf.function(lambda inputs, seq_length=seq_length: layer.pack(list(inputs), seq_length=seq_length),
                       autograph=False)
    root.bert_pack_inputs.__call__ = pack
    # The traces a SavedModel keeps: one or two segments, of ragged rank 1 or 2.
    for ragged_rank in (1, 2):
        for segments in (1, 2):
            spec = tf.RaggedTensorSpec([None] * (ragged_rank + 1), tf.int32, ragged_rank=ragged_rank)
            pack.get_concrete_function([spec] * segments, seq_length=tf.TensorSpec([], tf.int32))
    return root


def export_preprocessing(export_dir: str, vocab_file: str, do_lower_case: bool, seq_length: int = 128) -> str:
    root = preprocessing_module(vocab_file, do_lower_case, seq_length)
    save_atomically(root, export_dir, {SIGNATURE: root.__call__})
    return export_dir


# === Encoder ===
def encoder_module(encoder: BertEncoder) -> tf.train.Checkpoint:
    """The encoder SavedModel's root object: int inputs dict -> TF Hub's BERT outputs."""
    # Not a tf.Module: TF Hub's trainable KerasLayer reads `trainable_variables` as a saved attribute.
    root = tf.train.Checkpoint()
    root.encoder = encoder
    root.variables = list(encoder.variables)
    root.trainable_variables = list(encoder.trainable_variables)
    root.regularization_losses = []
    specs = {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES}

    def call(inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor | list[tf.Tensor]]:
        outputs = encoder({name: inputs[name] for name in INPUT_NAMES}, training=False)
        return {**outputs, "default": outputs["pooled_output"]}

    root.__call__ = serving_function(call, [specs])
    return root


def export_encoder(export_dir: str, encoder: BertEncoder) -> str:
    root = encoder_module(encoder)
    # A signature's outputs are a flat dict: the blocks' outputs get one key each.
    specs = {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES}

    def serving(**inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        outputs = root.__call__(inputs)
        flat = {key: value for key, value in outputs.items() if key != "encoder_outputs"}
        flat.update({f"encoder_outputs_{i}": value for i, value in enumerate(outputs["encoder_outputs"])})
        return flat

    signature = tf.function(serving, input_signature=None).get_concrete_function(**specs)
    save_atomically(root, export_dir, {SIGNATURE: signature})
    return export_dir


def task_encoder(model: keras.Model) -> BertEncoder:
    """The `BertEncoder` inside a task model built by a `fine_tune` head."""
    return next(layer for layer in model.layers if isinstance(layer, BertEncoder))
