"""TFRecord files of `tf.train.Example`s, written without TensorFlow.

Why not `tf.io.TFRecordWriter`: `import tensorflow` alone costs seconds and hundreds of
MB per process, and a per-example `tf.train.Example(...).SerializeToString()` costs
tens of microseconds. Both formats are small and stable, so we write them by hand, a
whole batch of examples at a time with numpy:

- A TFRecord is `uint64 length | uint32 masked_crc32c(length) | data | uint32
  masked_crc32c(data)`, little-endian (TensorFlow's `record_writer.cc`).
- `tf.train.Example` is `Features features = 1`; `Features` is `map<string, Feature>`,
  i.e. repeated `{string key = 1; Feature value = 2}` entries; a `Feature` holds an
  `Int64List` (field 3) or a `FloatList` (field 2), each a packed `repeated` field 1.
  Apart from the float payloads, every byte is part of a protobuf varint (tags and
  ASCII keys are varints of one byte).

A batch is laid out as a `RecordLayout`: one row per record, each value in a fixed
slot of as many bytes as the batch's largest value needs, with a mask of the bytes a
varint really uses. Dropping the unused bytes (one boolean index) leaves the records
back to back. The tests read the files back with `tf.data` and Model Garden's loader.
"""

from __future__ import annotations

import gzip
import os
import shutil
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import google_crc32c
import numpy as np

from bert_tf.atomic import incomplete_path
from bert_tf.data.schema import mask_crc

# Protobuf tags (field number << 3 | wire type 2 = length-delimited), all single bytes.
_TAG_1 = 0x0A  # Example.features, Features.feature entry, entry key, [Int64|Float]List.value
_TAG_VALUE = 0x12  # map entry value
_TAG_FLOAT_LIST = 0x12  # Feature.float_list
_TAG_INT64_LIST = 0x1A  # Feature.int64_list

_CRC32C_POLYNOMIAL = 0x82F63B78  # reflected


def _crc32c_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ _CRC32C_POLYNOMIAL, table >> 1).astype(np.uint32)
    return table


_CRC_TABLE = _crc32c_table()


@dataclass(frozen=True)
class IntFeature:
    """An int64 feature of `values.shape[1]` non-negative values per example."""

    name: str
    values: np.ndarray  # [n, width]


@dataclass(frozen=True)
class FloatFeature:
    """A float feature of `values.shape[1]` values per example."""

    name: str
    values: np.ndarray  # [n, width]


_VARINT_THRESHOLDS = np.array([1 << shift for shift in range(7, 64, 7)], dtype=np.uint64)


def varint_length(values: np.ndarray) -> np.ndarray:
    """Bytes taken by each non-negative value as a protobuf varint."""
    return 1 + np.searchsorted(_VARINT_THRESHOLDS, np.asarray(values, dtype=np.uint64), side="right")


def _varint_slots(values: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """`[..., width]` varint bytes of `values` (each < 128**width) and the mask of used ones."""
    values = np.asarray(values, dtype=np.int64)
    lengths = varint_length(values)[..., None]
    byte = np.arange(width)
    # Byte k of a value holds its bits 7k..7k+6, with bit 7 set on all but the last.
    slots = ((values[..., None] >> (7 * byte)) & 0x7F) | ((byte < lengths - 1).astype(np.int64) << 7)
    return slots.astype(np.uint8), byte < lengths


# The varints of all values below 2**16 (token ids of most vocabularies, lengths,
# positions), 4 slot bytes packed in a uint32, and the mask of the bytes in use: a batch
# is then encoded with two `np.take`s.
_TABLE_SIZE = 1 << 16


def _packed_tables() -> tuple[np.ndarray, np.ndarray]:
    slots, used = _varint_slots(np.arange(_TABLE_SIZE), 4)
    return slots.view(np.uint32).ravel(), used.astype(np.uint8).view(np.uint32).ravel()


_TABLE_SLOTS, _TABLE_USED = _packed_tables()


class RecordLayout:
    """Rows of byte blocks; `varints` blocks use a mask of their bytes in use."""

    def __init__(self, rows: int):
        self.rows = rows
        self._blocks: list[tuple[np.ndarray, np.ndarray | None]] = []

    def add_bytes(self, data: np.ndarray) -> np.ndarray:
        """Appends `[rows, w]` bytes (or `[w]`, the same for every row); returns the
        number of bytes per row."""
        data = np.asarray(data, dtype=np.uint8)
        if data.ndim == 1:
            data = np.broadcast_to(data, (self.rows, len(data)))
        self._blocks.append((data, None))
        return np.full(self.rows, data.shape[1], dtype=np.int64)

    def add_varints(self, values: np.ndarray) -> np.ndarray:
        """Appends the varints of `[rows, m]` non-negative values; returns the number of
        bytes per row."""
        values = np.asarray(values)
        if values.size and values.min() < 0:
            raise ValueError("varints of negative values are not supported")
        largest = int(values.max(initial=0))
        width = int(varint_length(largest))
        if width == 1:
            return self.add_bytes(values.astype(np.uint8))
        if largest < _TABLE_SIZE:
            slots = np.take(_TABLE_SLOTS, values).view(np.uint8)
            used = np.take(_TABLE_USED, values).view(bool)
        else:
            slots, used = _varint_slots(values, width)
        self._blocks.append((slots.reshape(self.rows, -1), used.reshape(self.rows, -1)))
        return np.count_nonzero(used.reshape(self.rows, -1), axis=1)

    def extend(self, other: RecordLayout) -> None:
        """Appends the blocks of `other` (same rows)."""
        self._blocks += other._blocks

    def to_bytes(self) -> tuple[np.ndarray, np.ndarray]:
        """All rows back to back, without the unused bytes, and the `rows + 1` offsets."""
        data = np.concatenate([block for block, _ in self._blocks], axis=1)
        used = np.ones(data.shape, dtype=bool)
        column = 0
        for block, mask in self._blocks:
            if mask is not None:
                used[:, column : column + block.shape[1]] = mask
            column += block.shape[1]
        offsets = np.zeros(self.rows + 1, dtype=np.int64)
        np.cumsum(np.count_nonzero(used, axis=1), out=offsets[1:])
        return data[used], offsets


def _feature_header(name: str, kind_tag: int, payload_lengths: np.ndarray) -> np.ndarray:
    """The varints in front of a packed payload: tags, sizes and the key."""
    key = name.encode("ascii")
    list_size = 1 + varint_length(payload_lengths) + payload_lengths  # [Int64|Float]List
    feature_size = 1 + varint_length(list_size) + list_size  # Feature
    entry_size = 1 + varint_length(len(key)) + len(key) + 1 + varint_length(feature_size) + feature_size
    n = len(payload_lengths)
    columns = [
        np.full(n, _TAG_1),
        entry_size,
        np.full(n, _TAG_1),
        np.full(n, len(key)),
        *(np.full(n, byte) for byte in key),
        np.full(n, _TAG_VALUE),
        feature_size,
        np.full(n, kind_tag),
        list_size,
        np.full(n, _TAG_1),
        payload_lengths,
    ]
    return np.stack(columns, axis=1)


def _masked_crcs_of_lengths(lengths: np.ndarray) -> np.ndarray:
    """Masked CRC-32C of each 8-byte little-endian length, vectorised over records."""
    crc = np.full(len(lengths), 0xFFFFFFFF, dtype=np.uint32)
    for byte in lengths.astype("<u8").view(np.uint8).reshape(-1, 8).T:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return _mask(crc ^ np.uint32(0xFFFFFFFF))


def _mask(crc: np.ndarray) -> np.ndarray:
    return mask_crc(crc.astype(np.uint64)).astype("<u4")


def serialize_examples(features: Sequence[IntFeature | FloatFeature]) -> tuple[bytes, np.ndarray]:
    """A batch of `tf.train.Example`s as framed TFRecords, back to back.

    Returns the bytes and the `n + 1` record offsets in them.
    """
    n = len(features[0].values)
    body = RecordLayout(n)
    features_size = np.zeros(n, dtype=np.int64)
    for feature in features:
        payload = RecordLayout(n)
        if isinstance(feature, IntFeature):
            payload_size = payload.add_varints(feature.values)
            tag = _TAG_INT64_LIST
        else:
            payload_size = payload.add_bytes(np.ascontiguousarray(feature.values, dtype="<f4").view(np.uint8))
            tag = _TAG_FLOAT_LIST
        features_size += body.add_varints(_feature_header(feature.name, tag, payload_size))
        body.extend(payload)
        features_size += payload_size
    data_size = 1 + varint_length(features_size) + features_size
    record = RecordLayout(n)
    record.add_bytes(data_size.astype("<u8").view(np.uint8).reshape(n, 8))
    record.add_bytes(_masked_crcs_of_lengths(data_size).view(np.uint8).reshape(n, 4))
    record.add_varints(np.stack([np.full(n, _TAG_1), features_size], axis=1))
    record.extend(body)
    record.add_bytes(np.zeros(4, dtype=np.uint8))  # the data CRC, filled in below
    out, offsets = record.to_bytes()
    readable = out.view()
    readable.flags.writeable = False  # google_crc32c takes read-only buffers only
    crcs = np.fromiter(
        (google_crc32c.value(readable[offsets[i] + 12 : offsets[i + 1] - 4]) for i in range(n)),
        dtype=np.uint32,
        count=n,
    )
    out[(offsets[1:, None] - 4 + np.arange(4)).ravel()] = _mask(crcs).view(np.uint8)
    return out.tobytes(), offsets


def split_records(framed: bytes, offsets: np.ndarray, group: int = 1) -> list[bytes]:
    """The framed records of `framed` as `bytes`, `group` consecutive records in each."""
    bounds = offsets[::group].tolist()
    if bounds[-1] != offsets[-1]:
        bounds.append(int(offsets[-1]))
    return [framed[start:end] for start, end in zip(bounds, bounds[1:], strict=False)]


def unframe(framed: bytes) -> Iterator[bytes]:
    """The payloads of framed records (the checksums are not checked).

    >>> framed, _ = serialize_examples([IntFeature("a", np.array([[1], [2]]))])
    >>> [len(payload) for payload in unframe(framed)]
    [14, 14]
    """
    view = memoryview(framed)
    position = 0
    while position < len(view):
        (length,) = struct.unpack_from("<Q", view, position)
        yield bytes(view[position + 12 : position + 12 + length])
        position += 16 + length


def read_records(path: str) -> list[bytes]:
    """The payloads of a TFRecord file, plain or GZIP (which starts with 0x1f 0x8b)."""
    with open(path, "rb") as file:
        data = file.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return list(unframe(data))


class RecordFileWriter:
    """Appends framed records to a file under `bert_tf.atomic`'s temporary name; `commit` renames it."""

    def __init__(self, path: str, gzip: bool):
        self.path = path
        self.temp_path = incomplete_path(path)
        self._file = open(self.temp_path, "wb")
        # wbits=31: a gzip container; zlib writes mtime 0 and no file name, so the
        # output is byte-identical across runs (gzip.GzipFile would embed both).
        self._compressor = zlib.compressobj(6, zlib.DEFLATED, 31) if gzip else None

    def write(self, framed: bytes) -> None:
        """Appends already framed records."""
        if self._compressor is not None:
            framed = self._compressor.compress(framed)
        self._file.write(framed)

    def commit(self, sync: bool = True) -> None:
        """Flushes, syncs (unless told not to) and renames the file to its final name."""
        if self._compressor is not None:
            self._file.write(self._compressor.flush())
        self._file.flush()
        if sync:
            os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self.temp_path, self.path)

    def abort(self) -> None:
        """Closes and deletes the temporary file."""
        self._file.close()
        try:
            os.remove(self.temp_path)
        except FileNotFoundError:
            pass


def concatenate_files(parts: list[str], path: str) -> None:
    """Appends `parts[1:]` to `parts[0]` and renames that to `path`; deletes the parts.

    `path` appears complete or not at all. Concatenated TFRecord files are a TFRecord
    file, and concatenated gzip members a gzip file (RFC 1952), which TensorFlow's
    reader reads through.
    """
    with open(parts[0], "r+b") as target:  # not "ab": copy_file_range refuses O_APPEND
        target.seek(0, os.SEEK_END)
        for part in parts[1:]:
            with open(part, "rb") as source:
                _copy(source, target)
        target.flush()
        os.fsync(target.fileno())
    os.replace(parts[0], path)
    for part in parts[1:]:
        os.remove(part)


def _copy(source, target) -> None:
    """Copies a whole file into another, in the kernel where it can."""
    size = os.fstat(source.fileno()).st_size
    try:
        while size > 0:
            copied = os.copy_file_range(source.fileno(), target.fileno(), size)
            if copied == 0:
                break
            size -= copied
    except OSError:  # no copy_file_range across these file systems: copy in Python
        shutil.copyfileobj(source, target, 1 << 20)
        target.flush()  # the next part may be copied by the kernel again
