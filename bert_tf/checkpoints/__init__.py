"""Loads and saves BERT weights: Google's TF1 checkpoints, HuggingFace directories, `.keras`.

Every loader reads the config from beside the checkpoint (`bert_config.json` for
TF1, `config.json` for HF, the file itself for `.keras`), applies keyword overrides
(e.g. `hidden_act="gelu_exact"` to run a Google checkpoint with the erf GELU), builds
our model and copies the weights in. A checkpoint that does not fit (another size,
missing layers, ...) raises one `BertTfError` listing the missing, unexpected and
wrongly shaped variables in the checkpoint's own names.

`load_into(model, path)` fills a model that exists already (pre-training's
`--init_checkpoint`) instead of building one, after checking that the checkpoint
describes a BERT of the model's size.

Pre-training heads: `load_encoder` ignores them. `load_pretrainer` on a checkpoint
without any head variable (e.g. HF's `BertModel`) warns and leaves the heads freshly
initialised, as one does to start pre-training from an encoder. A checkpoint without
any next-sentence head or pooler variable (HF's `BertForMaskedLM`) loads the same way,
that part fresh, with a warning; a checkpoint with only some variables of a part is
broken and raises. Variables outside the encoder and the heads (a fine-tuned
classifier, say) are ignored with a warning.

Example:
>>> import os, tempfile
>>> from bert_tf import BertConfig, BertEncoder
>>> from bert_tf import checkpoints
>>> encoder = BertEncoder(BertConfig.from_preset("tiny", vocab_size=100))
>>> path = checkpoints.save(encoder, os.path.join(tempfile.mkdtemp(), "tiny"), "hf")
>>> checkpoints.detect_format(path)
'hf'
>>> checkpoints.load_encoder(path, hidden_act="gelu").bert_config.hidden_act
'gelu'
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import warnings
from typing import Any

from bert_tf.atomic import atomic_folder
from bert_tf.checkpoints import hf, keras_format, names, tf1, training_format
from bert_tf.checkpoints.base import VOCAB_NAME, Checkpoint
from bert_tf.config import BertConfig
from bert_tf.encoder import BertEncoder
from bert_tf.errors import BertTfError
from bert_tf.pretrainer import BertPretrainer, encoder_of

FORMATS = ("tf1", "hf", "keras")  # what `save` writes
_READERS = {"tf1": tf1.read, "hf": hf.read, "keras": keras_format.read, "training": training_format.read}
_WITH_CONFIG_FILE = ("tf1", "training")  # the formats whose config is a separate bert_config.json

__all__ = [
    "FORMATS",
    "Checkpoint",
    "build_model",
    "describe",
    "detect_format",
    "load",
    "load_encoder",
    "load_into",
    "load_pretrainer",
    "read_checkpoint",
    "same_size",
    "save",
]


# === Reading ===
def detect_format(path: str | os.PathLike, named: str | None = None) -> str:
    """"tf1", "hf", "keras" or "training" (a run_pretraining.py checkpoint): the format at `path`
    (`named`: how messages name it, e.g. "--init_checkpoint PATH")."""
    path = hf.directory_of(os.fspath(path))
    named = named or f"Checkpoint {path}"
    run = _fine_tuning_run(path)
    if run is not None:  # its checkpoints/ hold a task model, which would read as a damaged TF1 one
        raise BertTfError(
            f"{named} belongs to a fine-tuning run ({run}), not a pre-trained checkpoint; load its fine-tuned "
            f"model with bert_tf.load_task_model({run!r}), or write it as a checkpoint (HF's task model, which is "
            f"also an --init_checkpoint) with bert-export --model_dir {run} --export_dir DIR --format hf."
        )
    if keras_format.model_file(path):
        return "keras"
    if os.path.isdir(path) and hf.weights_file(path):
        return "hf"
    if training_format.find_training_prefix(path):
        return "training"
    if tf1.find_prefix(path):
        return "tf1"
    if not os.path.exists(path):
        raise BertTfError(f"{named} does not exist.")
    raise BertTfError(
        f"{named} is not a checkpoint bert_tf can read: expected a TF1 checkpoint with {tf1.CONFIG_NAME}, "
        f"a HuggingFace directory with {hf.CONFIG_NAME} and {hf.SAFETENSORS_NAME} or {hf.TORCH_NAME}, "
        "a .keras file, or a run_pretraining.py output directory."
    )


# What a fine-tuning run dir holds (`fine_tune.registry.RUN_FILE`; bert_tf does not import fine_tune).
_FINE_TUNING_RECORD = "fine_tune.json"


def _fine_tuning_run(path: str) -> str | None:
    """The fine-tuning run dir that `path` is, or holds it (its `checkpoints/`, or a
    `checkpoints/ckpt-N` prefix), if any."""
    candidates = [path, os.path.dirname(os.path.normpath(path))]
    candidates.append(os.path.dirname(candidates[1]))
    return next((c for c in candidates if c and os.path.isfile(os.path.join(c, _FINE_TUNING_RECORD))), None)


def _override(config: BertConfig, overrides: dict[str, Any]) -> BertConfig:
    fields = {field.name for field in dataclasses.fields(BertConfig)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise BertTfError(
            f"Unknown config override {unknown[0]!r}; use BertConfig fields: {', '.join(sorted(fields))}."
        )
    return dataclasses.replace(config, **overrides)


def read_checkpoint(path: str | os.PathLike, config_file: str | None = None, **config_overrides: Any) -> Checkpoint:
    """Reads any supported checkpoint (weights under its own names) and its config:
    `config_file` (a bert_config.json: the original's --bert_config_file) if given, else
    the checkpoint's own.

    Example:
    >>> import os, tempfile
    >>> from bert_tf import BertConfig, BertEncoder
    >>> path = save(BertEncoder(BertConfig.from_preset("tiny", vocab_size=100)),
    ...             os.path.join(tempfile.mkdtemp(), "tiny"), "tf1")
    >>> checkpoint = read_checkpoint(path, hidden_dropout_prob=0.0)
    >>> checkpoint.format, checkpoint.has_heads, checkpoint.config.hidden_dropout_prob
    ('tf1', False, 0.0)
    """
    path = hf.directory_of(os.fspath(path))
    fmt = detect_format(path)
    checkpoint = _READERS[fmt](path, config_file) if fmt in _WITH_CONFIG_FILE else _READERS[fmt](path)
    if config_file is not None:
        checkpoint.config, checkpoint.config_source = BertConfig.from_json_file(config_file), config_file
    if config_overrides:
        checkpoint.config = _override(checkpoint.config, config_overrides)
        settings = ", ".join(f"{key}={value!r}" for key, value in config_overrides.items())
        checkpoint.config_source = f"{checkpoint.config_source} with {settings}"
    return checkpoint


# Every field that fixes a variable's shape or the attention's arithmetic.
_SIZE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "max_position_embeddings", "type_vocab_size")  # fmt: skip


def describe(config: BertConfig) -> str:
    """The size of a BERT in words, for messages.

    >>> describe(BertConfig.from_preset("tiny", vocab_size=100))
    '2 layers, hidden size 128, 2 heads, intermediate size 512, vocab 100, 512 positions, 2 segment types'
    """
    return (
        f"{config.num_hidden_layers} layers, hidden size {config.hidden_size}, {config.num_attention_heads} heads, "
        f"intermediate size {config.intermediate_size}, vocab {config.vocab_size}, "
        f"{config.max_position_embeddings} positions, {config.type_vocab_size} segment types"
    )


def same_size(a: BertConfig, b: BertConfig) -> bool:
    """Whether two configs describe BERTs of the same size (weights of one fit the other)."""
    return all(getattr(a, name) == getattr(b, name) for name in _SIZE_FIELDS)


def _fill(model: BertEncoder | BertPretrainer, checkpoint: Checkpoint) -> None:
    """Copies the checkpoint's weights into `model`, or raises listing every mismatch."""
    slots = names.model_slots(model)
    scopes: tuple[str, ...] = (names.ENCODER,)
    if isinstance(model, BertPretrainer):
        if checkpoint.has_heads:
            scopes = (names.ENCODER, names.HEADS)
        else:
            warnings.warn(
                f"{checkpoint.path} has no pre-training heads, so the masked-LM and next-sentence heads "
                "start from a fresh initialisation.",
                stacklevel=4,
            )
            slots = names.encoder_slots(model.encoder)
    slots = _without_absent_parts(slots, checkpoint)
    assignments, mismatch = names.plan(slots, checkpoint.weights, checkpoint.naming, scopes)
    if mismatch:
        raise BertTfError(
            f"The weights in {checkpoint.path} do not fit the BERT described by {checkpoint.config_source} "
            f"({describe(checkpoint.config)}): {mismatch.describe()}."
        )
    ignored = [name for name in checkpoint.weights if checkpoint.naming.scope(name) is None]
    if ignored:
        warnings.warn(
            f"Ignoring {len(ignored)} variables of {checkpoint.path} that belong neither to the BERT encoder "
            f"nor to its pre-training heads, e.g. {', '.join(ignored[:3])}.",
            stacklevel=4,
        )
    names.assign(assignments)


def _without_absent_parts(slots: dict[str, names.Slot], checkpoint: Checkpoint) -> dict[str, names.Slot]:
    """`slots` less the optional parts (`names.OPTIONAL_PARTS`) of which the checkpoint has
    no variable at all, with a warning for each: they keep their fresh initialisation."""
    for prefix, part in names.OPTIONAL_PARTS.items():
        own = [name for name in slots if name.startswith(prefix)]
        if own and not any(checkpoint.naming.native(name)[0] in checkpoint.weights for name in own):
            warnings.warn(f"{checkpoint.path} has no {part} weights (as HF's BertForMaskedLM), so the {part} "
                          "starts from a fresh initialisation.", stacklevel=5)
            slots = {name: slot for name, slot in slots.items() if not name.startswith(prefix)}
    return slots


def build_model(
    checkpoint: Checkpoint, heads: bool | None = None, dtype: Any = None
) -> BertEncoder | BertPretrainer:
    """Our model with the weights of a `Checkpoint` from `read_checkpoint`.

    Args:
        checkpoint: what `read_checkpoint` returned.
        heads: True for a `BertPretrainer`, False for a `BertEncoder`, None for
            whichever the checkpoint holds.
        dtype: a Keras dtype policy for the model, e.g. "mixed_bfloat16".
    """
    encoder = BertEncoder(checkpoint.config, dtype=dtype)
    with_heads = checkpoint.has_heads if heads is None else heads
    model = BertPretrainer(encoder) if with_heads else encoder
    _fill(model, checkpoint)
    return model


def load_encoder(path: str | os.PathLike, *, dtype: Any = None, **config_overrides: Any) -> BertEncoder:
    """A `BertEncoder` with the weights of the checkpoint at `path` (any format).

    Args:
        path: a TF1 checkpoint prefix or its directory, an HF directory, a `.keras`
            file, a directory written by `save`, or a `run_pretraining.py` checkpoint
            (its prefix or output directory).
        dtype: a Keras dtype policy for the model, e.g. "mixed_bfloat16".
        **config_overrides: `BertConfig` fields to change, e.g. `hidden_act="gelu_exact"`.
    """
    return build_model(read_checkpoint(path, **config_overrides), False, dtype)


def load_pretrainer(path: str | os.PathLike, *, dtype: Any = None, **config_overrides: Any) -> BertPretrainer:
    """A `BertPretrainer` (encoder + masked-LM and next-sentence heads) from `path`.

    Heads absent from the checkpoint start fresh, with a warning (see the module doc).
    """
    return build_model(read_checkpoint(path, **config_overrides), True, dtype)


def load(path: str | os.PathLike, *, dtype: Any = None, **config_overrides: Any) -> BertEncoder | BertPretrainer:
    """The model the checkpoint holds: a `BertPretrainer` if it has pre-training heads, else a `BertEncoder`."""
    return build_model(read_checkpoint(path, **config_overrides), None, dtype)


def load_into(model: BertEncoder | BertPretrainer, path: str | os.PathLike, *, flag: str | None = None) -> str:
    """Fills an existing `model` with the weights of the checkpoint at `path` (any format).

    No second model is built: TF1, HF and `.keras` weights are assigned from the file,
    a `run_pretraining.py` checkpoint is restored straight into the model. The
    checkpoint must describe a BERT of the model's size (else one `BertTfError` naming
    both sizes); into a `BertPretrainer`, heads missing from it keep their
    initialisation, with a warning (see the module doc). The model may live under a
    `tf.distribute` strategy: call this in its scope.

    Args:
        model: a built `BertEncoder` or `BertPretrainer`.
        path: any path `load_encoder` accepts.
        flag: the flag that named `path`, for messages (e.g. "--init_checkpoint").

    Returns:
        What was loaded, for a log line, e.g. "hf checkpoint /models/bert".

    Example:
    >>> import os, tempfile
    >>> from bert_tf import BertConfig, BertEncoder
    >>> encoder = BertEncoder(BertConfig.from_preset("tiny", vocab_size=100))
    >>> path = save(encoder, os.path.join(tempfile.mkdtemp(), "tiny"), "hf")
    >>> load_into(BertEncoder(BertConfig.from_preset("tiny", vocab_size=100)), path).split()[:2]
    ['hf', 'checkpoint']
    >>> try:
    ...     load_into(BertEncoder(BertConfig.from_preset("tiny", vocab_size=99)), path)
    ... except BertTfError as error:
    ...     print(str(error).split(" holds ")[1])  # doctest: +ELLIPSIS
    a BERT of ..., vocab 100, ..., but the model to load it into has ..., vocab 99, ...; use the config ...
    """
    path = hf.directory_of(os.fspath(path))
    named = f"{flag} {path}" if flag else f"The checkpoint {path}"
    ours = encoder_of(model).bert_config
    if detect_format(path, named) == "training":
        prefix, config, config_file = training_format.read_config(path)
        _check_size(named, config, config_file, ours)
        training_format.restore_into(model, prefix, config_file)
        return f"training checkpoint {prefix}"
    checkpoint = read_checkpoint(path)
    _check_size(named, checkpoint.config, checkpoint.config_source, ours)
    _fill(model, checkpoint)
    return f"{checkpoint.format} checkpoint {checkpoint.path}"


def _check_size(named: str, theirs: BertConfig, config_source: str, ours: BertConfig) -> None:
    if not same_size(theirs, ours):
        raise BertTfError(
            f"{named} holds a BERT of {describe(theirs)}, but the model to load it into has {describe(ours)}; "
            f"use the config that came with the checkpoint ({config_source})."
        )


# === Writing ===
def _write(model: BertEncoder | BertPretrainer, directory: str, format: str) -> None:
    encoder = encoder_of(model)
    if format == "keras":
        keras_format.write(directory, model)
        return
    weights = names.collect(names.model_slots(model))
    writer = tf1.write if format == "tf1" else hf.write
    writer(directory, weights, encoder.bert_config)


def save(
    model: BertEncoder | BertPretrainer,
    path: str | os.PathLike,
    format: str,
    *,
    vocab_file: str | os.PathLike | None = None,
) -> str:
    """Writes `model` as a new directory `path` in `format` ("tf1", "hf" or "keras").

    The directory holds the weights, the config (`bert_config.json` or HF's
    `config.json`) and a copy of `vocab_file` as `vocab.txt`. It is written under a
    temporary name and renamed when complete, so `path` never holds half a checkpoint.
    Returns `path`, which every loader here accepts.
    """
    path = os.path.normpath(os.fspath(path))  # "out/" names the folder "out", not a name inside it
    if format not in FORMATS:
        raise BertTfError(f"Unknown checkpoint format {format!r}; use one of {', '.join(FORMATS)}.")
    if os.path.exists(path):
        raise BertTfError(f"Output {path} already exists; remove it or choose another path.")
    if vocab_file is not None:
        if not os.path.isfile(vocab_file):
            raise BertTfError(f"Vocabulary file {os.fspath(vocab_file)} does not exist.")
    with atomic_folder(path) as temporary:
        _write(model, temporary, format)
        if vocab_file is not None:
            shutil.copyfile(vocab_file, os.path.join(temporary, VOCAB_NAME))
    if format == "tf1":
        tf1.warn_unless_original_activation(encoder_of(model).bert_config, path)
    return path
