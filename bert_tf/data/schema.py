"""The pre-training record schema: what a TFRecord of `create_pretraining_data.py` holds.

The one statement of the format, shared by the writer (`data_prep`) and the reader
(`bert_tf.data.reader`), so that what one writes is what the other looks for:

- Feature names. Two of them depend on the format version: the original's (v1)
  `input_ids`/`segment_ids`, or Model Garden's v2 `input_word_ids`/`input_type_ids`
  (`--use_v2_feature_names`), which are also the model's input names. Statically masked
  files hold `masked_lm_*`; files written with `--dynamic_masking` do not, and those of
  `--dynamic_masking` with whole-word masking hold `word_continuation`.
- Special tokens and the masking rates of the original (80% [MASK], 10% kept, 10%
  random id).
- Files: plain or GZIP TFRecords, told apart by their first bytes, and a `FileFormat`
  read off the features of the first record.

Pure Python (no TensorFlow, no numpy): the data generator's worker processes import it
for free.

Example:
>>> feature_names(v2=True).input_ids, model_name("segment_ids")
('input_word_ids', 'input_type_ids')
>>> fmt = file_format("a.tfrecord", {"input_ids", "input_mask", "segment_ids", "next_sentence_labels"}, GZIP)
>>> fmt.names == V1_NAMES, fmt.masked, fmt.compression
(True, False, 'GZIP')
>>> file_format("b.tfrecord", {"text"}, "")
Traceback (most recent call last):
...
bert_tf.errors.BertTfError: b.tfrecord is not BERT pre-training data (its features are ['text']).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TypeVar

import google_crc32c

from bert_tf.errors import BertTfError


# === Feature names ===
@dataclass(frozen=True)
class FeatureNames:
    """The names of the two features that each format version names its own way."""

    input_ids: str
    segment_ids: str


V1_NAMES = FeatureNames("input_ids", "segment_ids")  # the original's
V2_NAMES = FeatureNames("input_word_ids", "input_type_ids")  # Model Garden's v2 = the model's inputs
INPUT_MASK = "input_mask"
NEXT_SENTENCE_LABELS = "next_sentence_labels"  # [1] per instance; 1 = NotNext
MASKED_LM_POSITIONS = "masked_lm_positions"
MASKED_LM_IDS = "masked_lm_ids"
MASKED_LM_WEIGHTS = "masked_lm_weights"
WORD_CONTINUATION = "word_continuation"  # 1 = continues the word of the token before


def feature_names(v2: bool) -> FeatureNames:
    """The version's names of the token ids and segment ids."""
    return V2_NAMES if v2 else V1_NAMES


def model_name(name: str) -> str:
    """A feature's name in a file -> its name as the model's input (v2 names stay)."""
    if name == V1_NAMES.input_ids:
        return V2_NAMES.input_ids
    return V2_NAMES.segment_ids if name == V1_NAMES.segment_ids else name


# === Special tokens and masking ===
# Keyed by the reader's argument names, in the order `DataSpec` records them.
SPECIAL_TOKENS = {"mask_id": "[MASK]", "cls_id": "[CLS]", "sep_id": "[SEP]"}
# Their ids in Google's vocabularies (uncased, cased, Chinese, multilingual): the
# reader's defaults.
GOOGLE_CLS_ID, GOOGLE_SEP_ID, GOOGLE_MASK_ID = 101, 102, 103
GOOGLE_SPECIAL_IDS = {"mask_id": GOOGLE_MASK_ID, "cls_id": GOOGLE_CLS_ID, "sep_id": GOOGLE_SEP_ID}

MASKED_LM_PROB = 0.15  # the original's default share of an instance's tokens to predict
MASK_PROB = 0.8  # of the chosen tokens, replaced by [MASK]
KEEP_PROB = 0.1  # kept as they are; the rest (0.1) become a random vocabulary id


def special_ids(vocab: Mapping[str, int]) -> dict[str, int]:
    """The ids of `SPECIAL_TOKENS` in `vocab`, under the same keys (KeyError if absent).

    >>> special_ids({"[CLS]": 2, "[SEP]": 3, "[MASK]": 4})
    {'mask_id': 4, 'cls_id': 2, 'sep_id': 3}
    """
    return {name: vocab[token] for name, token in SPECIAL_TOKENS.items()}


# === Files ===
GZIP = "GZIP"  # `tf.data.TFRecordDataset`'s compression_type; "" is none
_GZIP_MAGIC = b"\x1f\x8b"
_CRC_MASK_DELTA = 0xA282EAD8
Crc = TypeVar("Crc")  # an int or a numpy array


def mask_crc(crc: Crc) -> Crc:
    """TensorFlow's masking of the CRC-32Cs that frame a record: rotate right by 15
    bits, add a constant. For an `int`, or a numpy `uint64` array of them (the writer's)."""
    return (((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The masked CRC-32C of `data`, as a TFRecord frame holds it."""
    return mask_crc(google_crc32c.value(data))


def compression_of(head: bytes) -> str:
    """The compression of a TFRecord file that starts with `head` (its first 12 bytes).

    A plain TFRecord file starts with a length and its masked CRC; the gzip magic
    (1f 8b) is trusted only when that CRC does not check out.

    >>> compression_of(b"\\x1f\\x8b\\x08\\x00" + bytes(8))
    'GZIP'
    >>> length = (0x8B1F).to_bytes(8, "little")  # a first record of 35615 bytes: 1f 8b too
    >>> compression_of(length + masked_crc32c(length).to_bytes(4, "little"))
    ''
    """
    if head[:2] != _GZIP_MAGIC:
        return ""
    plain = len(head) >= 12 and masked_crc32c(head[:8]) == int.from_bytes(head[8:12], "little")
    return "" if plain else GZIP


@dataclass(frozen=True)
class FileFormat:
    """What the first record of a file set says about the set."""

    compression: str  # "" or GZIP
    names: FeatureNames  # V1_NAMES or V2_NAMES
    masked: bool  # has the masked_lm_* features (static masking)
    word_continuation: bool  # has the word_continuation feature (whole-word, dynamic)


def file_format(path: str, keys: Collection[str], compression: str) -> FileFormat:
    """The format of the file `path` whose first record has the features `keys`.

    Raises `BertTfError` if they are not BERT pre-training features of either version.
    """
    names = next((v for v in (V2_NAMES, V1_NAMES) if {v.input_ids, v.segment_ids} <= set(keys)), None)
    if names is None:
        raise BertTfError(f"{path} is not BERT pre-training data (its features are {sorted(keys)}).")
    return FileFormat(
        compression=compression,
        names=names,
        masked=MASKED_LM_POSITIONS in keys,
        word_continuation=WORD_CONTINUATION in keys,
    )
