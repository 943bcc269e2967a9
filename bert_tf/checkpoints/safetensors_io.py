"""Reads and writes the safetensors format with numpy alone.

The format (https://github.com/huggingface/safetensors): an 8-byte little-endian
header length N, N bytes of JSON `{name: {"dtype", "shape", "data_offsets": [begin,
end]}, "__metadata__": {...}}`, then the raw little-endian tensors back to back, with
offsets relative to the end of the header. We avoid the `safetensors` package so that
the runtime needs only numpy; reading memory-maps the file, so nothing is copied until
a tensor is used.

Example:
>>> import os, tempfile
>>> import numpy as np
>>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
>>> write(path, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, {"format": "pt"})
>>> read(path)["w"].tolist()
[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

import numpy as np

from bert_tf.errors import BertTfError

_TO_NUMPY = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
    "BOOL": "?",
}
_FROM_NUMPY = {np.dtype(code).str: name for name, code in _TO_NUMPY.items()}
# Headers beyond this are not BERT checkpoints but garbage read as a length.
_MAX_HEADER = 100 * 2**20


def _invalid(path: str, reason: str) -> BertTfError:
    return BertTfError(f"{path} is not a valid safetensors file ({reason}).")


def _read_header(path: str) -> tuple[dict[str, Any], int]:
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise _invalid(path, "it is shorter than the 8-byte header length")
        (length,) = struct.unpack("<Q", prefix)
        if length > min(size - 8, _MAX_HEADER):
            raise _invalid(path, f"its header length {length} does not fit in the file")
        try:
            header = json.loads(handle.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise _invalid(path, "its header is not JSON") from None
    if not isinstance(header, dict):
        raise _invalid(path, "its header is not a JSON object")
    return header, 8 + length


def _tensor(buffer: np.ndarray, name: str, entry: Any, path: str) -> np.ndarray:
    try:
        dtype, shape, (begin, end) = entry["dtype"], [int(d) for d in entry["shape"]], entry["data_offsets"]
    except (TypeError, KeyError, ValueError):
        raise _invalid(path, f"the header entry of {name} is malformed") from None
    if dtype != "BF16" and dtype not in _TO_NUMPY:
        raise _invalid(path, f"{name} has the unsupported dtype {dtype}")
    itemsize = 2 if dtype == "BF16" else np.dtype(_TO_NUMPY[dtype]).itemsize
    if not 0 <= begin <= end <= len(buffer) or end - begin != itemsize * int(np.prod(shape)):
        raise _invalid(path, f"the data of {name} lies outside the file or does not match its shape")
    raw = buffer[begin:end]
    if dtype == "BF16":
        # bfloat16 is the upper half of a float32: widen the bits, then reinterpret.
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return raw.view(_TO_NUMPY[dtype]).reshape(shape)


def read(path: str) -> dict[str, np.ndarray]:
    """Name -> array (memory-mapped) of every tensor in a safetensors file."""
    header, start = _read_header(path)
    if os.path.getsize(path) > start:
        buffer = np.memmap(path, dtype=np.uint8, mode="r", offset=start)
    else:
        buffer = np.zeros(0, dtype=np.uint8)
    return {name: _tensor(buffer, name, entry, path) for name, entry in header.items() if name != "__metadata__"}


def write(path: str, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    """Writes `tensors` (in their order, contiguous) as a safetensors file."""
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    arrays, offset = [], 0
    for name, value in tensors.items():
        array = np.ascontiguousarray(value)
        array = array.astype(array.dtype.newbyteorder("<"), copy=False)
        if array.dtype.str not in _FROM_NUMPY:
            raise TypeError(f"safetensors cannot hold {name} of dtype {array.dtype}.")
        header[name] = {
            "dtype": _FROM_NUMPY[array.dtype.str],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        arrays.append(array)
        offset += array.nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    # The reference writer pads the header with spaces so the data starts 8-byte aligned.
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(encoded)))
        handle.write(encoded)
        for array in arrays:
            handle.write(array.tobytes())
