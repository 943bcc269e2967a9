"""`BertConfig`: the hyper-parameters of a BERT model, as Google's `bert_config.json`.

Google's file has exactly eleven keys (see `GOOGLE_KEYS`). We read and write that
file byte-compatibly, accept HuggingFace's `config.json` too (it is a superset of
the same keys), and add named presets for the sizes of the BERT paper and the
"Well-Read Students" miniatures.

Example:
>>> from bert_tf import BertConfig
>>> config = BertConfig.from_preset("tiny")
>>> config.num_hidden_layers, config.hidden_size, config.num_attention_heads
(2, 128, 2)
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from bert_tf.atomic import write_text
from bert_tf.errors import BertTfError

# `gelu` is the tanh approximation used by the original TF code; `gelu_exact` is the
# erf form that HuggingFace calls "gelu". Both read the same word "gelu" from Google's
# json: that file means the tanh form, since it was written for the original code.
ACTIVATIONS = ("gelu", "gelu_exact", "relu", "tanh", "silu")

# The keys of Google's bert_config.json, in the order the original code writes them
# (`json.dumps(..., sort_keys=True)`).
GOOGLE_KEYS = (
    "attention_probs_dropout_prob",
    "hidden_act",
    "hidden_dropout_prob",
    "hidden_size",
    "initializer_range",
    "intermediate_size",
    "max_position_embeddings",
    "num_attention_heads",
    "num_hidden_layers",
    "type_vocab_size",
    "vocab_size",
)

# (layers, hidden, heads) of the named sizes; the FFN is always 4H.
_PRESET_SHAPES = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}
PRESETS = tuple(_PRESET_SHAPES)


class BertConfigError(BertTfError):
    """A config value that cannot describe a BERT model."""


@dataclasses.dataclass
class BertConfig:
    """Hyper-parameters of a BERT encoder (Google's `bert_config.json`).

    Args:
        vocab_size: number of WordPiece ids.
        hidden_size: width H of every layer.
        num_hidden_layers: number L of transformer blocks.
        num_attention_heads: number A of heads; must divide `hidden_size`.
        intermediate_size: width of the feed-forward layer (4H in BERT).
        hidden_act: one of `ACTIVATIONS`; "gelu" is the original tanh form.
        hidden_dropout_prob: dropout on embeddings and block outputs.
        attention_probs_dropout_prob: dropout on attention probabilities.
        max_position_embeddings: longest input the model accepts.
        type_vocab_size: number of segment ids.
        initializer_range: stddev of the truncated-normal initialiser.
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02

    def __post_init__(self) -> None:
        self.validate()

    # === Validation ===
    def validate(self) -> None:
        """Raises `BertConfigError` with one sentence naming the bad value."""
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BertConfigError(f"BertConfig.{name} must be a positive integer, got {value!r}.")
        if self.hidden_size % self.num_attention_heads:
            raise BertConfigError(
                f"BertConfig.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_attention_heads ({self.num_attention_heads})."
            )
        if self.hidden_act not in ACTIVATIONS:
            raise BertConfigError(
                f"BertConfig.hidden_act {self.hidden_act!r} is unknown; use one of {', '.join(ACTIVATIONS)}."
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise BertConfigError(f"BertConfig.{name} must be in [0, 1), got {value!r}.")
        if not isinstance(self.initializer_range, (int, float)) or self.initializer_range <= 0:
            raise BertConfigError(
                f"BertConfig.initializer_range must be positive, got {self.initializer_range!r}."
            )

    def check_vocabulary(self, tokens: int, vocab_file: str) -> None:
        """Raises a `BertTfError` when a vocabulary of `tokens` entries has ids this model has
        no embedding for (fewer tokens are fine: the original pads vocab_size up).

        >>> BertConfig.from_preset("tiny", vocab_size=100).check_vocabulary(101, "vocab.txt")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        bert_tf.errors.BertTfError: The vocabulary vocab.txt has 101 tokens but the model only 100; use ...
        """
        if tokens > self.vocab_size:
            raise BertTfError(f"The vocabulary {vocab_file} has {tokens} tokens but the model only {self.vocab_size}; "
                              "use the vocab.txt that came with the checkpoint.")

    # === Construction ===
    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> "BertConfig":
        """A config of a named size: one of `PRESETS`, with optional overrides."""
        if name not in _PRESET_SHAPES:
            raise BertConfigError(f"Unknown BERT preset {name!r}; use one of {', '.join(PRESETS)}.")
        layers, hidden, heads = _PRESET_SHAPES[name]
        values = dict(
            num_hidden_layers=layers,
            hidden_size=hidden,
            num_attention_heads=heads,
            intermediate_size=4 * hidden,
        )
        values.update(overrides)
        return cls(**values)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> "BertConfig":
        """Reads Google's keys; HF's `config.json` keys beyond them are ignored.

        HF writes "gelu" for the exact erf GELU and "gelu_new" / "gelu_pytorch_tanh"
        for the tanh form, so a dict with `model_type` (HF's marker) is mapped accordingly.
        """
        missing = [key for key in GOOGLE_KEYS if key not in values and key != "type_vocab_size"]
        if missing:
            raise BertConfigError(f"{source} lacks the BERT config keys: {', '.join(missing)}.")
        kwargs = {key: values[key] for key in GOOGLE_KEYS if key in values}
        if "model_type" in values:
            kwargs["hidden_act"] = _HF_TO_OURS_ACT.get(kwargs["hidden_act"], kwargs["hidden_act"])
        try:
            return cls(**kwargs)
        except BertConfigError as error:
            raise BertConfigError(f"{source}: {error}") from None

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> "BertConfig":
        """Reads Google's `bert_config.json` (or HF's `config.json`)."""
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise BertConfigError(f"BERT config file {path} does not exist.")
        try:
            with open(path, encoding="utf-8") as handle:
                values = json.load(handle)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise BertConfigError(f"BERT config file {path} is not valid JSON ({error}).") from None
        if not isinstance(values, dict):
            raise BertConfigError(f"BERT config file {path} must hold a JSON object.")
        return cls.from_dict(values, source=f"BERT config file {path}")

    # === Export ===
    def to_dict(self) -> dict[str, Any]:
        """Google's eleven keys, sorted as the original writes them."""
        values = dataclasses.asdict(self)
        return {key: values[key] for key in GOOGLE_KEYS}

    def to_json_string(self) -> str:
        # The original: json.dumps(to_dict(), indent=2, sort_keys=True) + "\n".
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, path: str | os.PathLike) -> None:
        """Writes Google's `bert_config.json`, atomically."""
        write_text(os.fspath(path), self.to_json_string())

    def to_hf_dict(self) -> dict[str, Any]:
        """HuggingFace's `config.json` for `transformers.BertModel`."""
        values = self.to_dict()
        values["hidden_act"] = _OURS_TO_HF_ACT.get(self.hidden_act, self.hidden_act)
        values.update(
            architectures=["BertForPreTraining"],
            model_type="bert",
            layer_norm_eps=1e-12,
            pad_token_id=0,
            position_embedding_type="absolute",
        )
        return values

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads


_HF_TO_OURS_ACT = {"gelu": "gelu_exact", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu"}
_OURS_TO_HF_ACT = {"gelu_exact": "gelu", "gelu": "gelu_pytorch_tanh"}
