"""Read pre-training TFRecords back (with TensorFlow) and measure them.

Used by the tests and `bench/data_prep.py` to compare our output with Model Garden's
on the same corpus, and to check that every instance is well formed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from bert_tf.data.schema import model_name


def load_examples(paths: Sequence[str]) -> dict[str, np.ndarray]:
    """Every record of `paths` (any feature names, GZIP or not) as stacked arrays,
    under the model's names (`input_word_ids`, `input_type_ids`, ...)."""
    import tensorflow as tf  # noqa: PLC0415 (only the readers need TensorFlow)

    from bert_tf.data.reader import detect_format  # noqa: PLC0415

    columns: dict[str, list[np.ndarray]] = {}
    for path in paths:
        fmt = detect_format(path)
        records = tf.data.TFRecordDataset(path, compression_type=fmt.compression)
        first = tf.train.Example.FromString(next(iter(records)).numpy()).features.feature
        spec = {
            name: tf.io.FixedLenFeature(
                [len(feature.int64_list.value or feature.float_list.value)],
                tf.int64 if feature.HasField("int64_list") else tf.float32,
            )
            for name, feature in first.items()
        }
        for batch in records.batch(4096).map(lambda r, spec=spec: tf.io.parse_example(r, spec)).as_numpy_iterator():
            for name, values in batch.items():
                columns.setdefault(model_name(name), []).append(values)
    return {name: np.concatenate(parts) for name, parts in columns.items()}


def undo_masking(examples: dict[str, np.ndarray]) -> np.ndarray:
    """The unmasked `input_word_ids`: `masked_lm_ids` put back at their positions."""
    ids = examples["input_word_ids"].copy()
    real = examples["masked_lm_weights"] > 0
    rows = np.broadcast_to(np.arange(len(ids))[:, None], real.shape)
    ids[rows[real], examples["masked_lm_positions"][real]] = examples["masked_lm_ids"][real]
    return ids


def instance_statistics(examples: dict[str, np.ndarray], mask_id: int, max_seq_length: int) -> dict[str, float]:
    """The numbers the issue compares: counts, lengths, masking and NotNext rates."""
    lengths = examples["input_mask"].sum(axis=1)
    real = examples["masked_lm_weights"] > 0
    rows = np.broadcast_to(np.arange(len(lengths))[:, None], real.shape)
    shown = examples["input_word_ids"][rows[real], examples["masked_lm_positions"][real]]
    labels = examples["masked_lm_ids"][real]
    masked = int(real.sum())
    replaced = int((shown == mask_id).sum())
    kept = int(((shown == labels) & (shown != mask_id)).sum())
    return {
        "instances": len(lengths),
        "mean_tokens": float(lengths.mean()),
        "masked_fraction": masked / float(lengths.sum()),
        "mask_share": replaced / masked,
        "kept_share": kept / masked,
        "random_share": (masked - replaced - kept) / masked,
        "not_next_rate": float(examples["next_sentence_labels"].mean()),
        "short_share": float((lengths < max_seq_length / 2).mean()),
    }


def malformed_instances(examples: dict[str, np.ndarray], cls_id: int, sep_id: int) -> list[str]:
    """Descriptions of the instances that are not `[CLS] A [SEP] B [SEP]` with matching
    segment ids, mask and sorted, in-range, distinct masked positions (empty if none)."""
    problems = []
    ids = undo_masking(examples)
    for row in range(len(ids)):
        length = int(examples["input_mask"][row].sum())
        tokens = ids[row, :length]
        types = examples["input_type_ids"][row, :length]
        seps = np.flatnonzero(tokens == sep_id)
        weights = examples["masked_lm_weights"][row]
        positions = examples["masked_lm_positions"][row][weights > 0]
        if (
            tokens[0] != cls_id
            or len(seps) != 2
            or seps[1] != length - 1
            or seps[0] < 2
            or seps[0] > length - 3
            or (tokens == cls_id).sum() != 1
            or types[: seps[0] + 1].any()
            or not types[seps[0] + 1 :].all()
            or examples["input_mask"][row, length:].any()
            or ids[row, length:].any()
            or examples["input_type_ids"][row, length:].any()
        ):
            problems.append(f"instance {row}: not [CLS] A [SEP] B [SEP] with matching segments")
        elif (
            len(positions) == 0
            or np.any(np.diff(positions) <= 0)
            or positions.min() < 1
            or positions.max() >= length - 1
            or np.isin(positions, seps).any()
            or examples["masked_lm_positions"][row][weights == 0].any()
        ):
            problems.append(f"instance {row}: bad masked positions {positions.tolist()}")
    return problems


def source_stream(documents: Iterable[Iterable[list[int]]]) -> bytes:
    """Token ids of a corpus, its documents back to back and each followed by -1, as
    int32 bytes (for `not_from_source`)."""
    ids: list[int] = []
    for sentences in documents:
        for sentence in sentences:
            ids += sentence
        ids.append(-1)
    return np.asarray(ids, dtype="<i4").tobytes()


def _find(stream: bytes, span: np.ndarray, start: int = 0) -> int:
    """Token offset of the first occurrence of `span` in `stream` at or after `start`."""
    needle = span.astype("<i4").tobytes()
    position = stream.find(needle, start * 4)
    while position >= 0 and position % 4:
        position = stream.find(needle, position + 1)
    return position // 4 if position >= 0 else -1


def not_from_source(examples: dict[str, np.ndarray], stream: bytes, sep_id: int) -> list[str]:
    """Descriptions of the instances whose (unmasked) segments A and B are not token
    spans of the source `stream`, or whose IsNext B does not follow A in its document
    (after a truncation gap, if any). Empty if there are none."""
    tokens = np.frombuffer(stream, dtype="<i4")
    ids = undo_masking(examples)
    problems = []
    for row in range(len(ids)):
        length = int(examples["input_mask"][row].sum())
        first_sep = int(np.flatnonzero(ids[row] == sep_id)[0])
        a, b = ids[row, 1:first_sep], ids[row, first_sep + 1 : length - 1]
        a_at = _find(stream, a)
        if a_at < 0:
            problems.append(f"instance {row}: segment A is not a span of the source")
        elif examples["next_sentence_labels"][row, 0]:
            if _find(stream, b) < 0:
                problems.append(f"instance {row}: segment B is not a span of the source")
        else:
            # The first B after this A; if a document ends before it, try the next A.
            b_at = _find(stream, b, a_at + len(a))
            while b_at >= 0 and (tokens[a_at:b_at] == -1).any():
                a_at = _find(stream, a, a_at + 1)
                b_at = _find(stream, b, a_at + len(a)) if a_at >= 0 else -1
            if b_at < 0:
                problems.append(f"instance {row}: IsNext segment B does not follow A in its document")
    return problems
