"""The output files of `extract_features.py`: the original's JSON lines, byte for byte, and npy.

The original writes `json.dumps` of nested OrderedDicts holding `round(float(x), 6)` of
every value: about a microsecond a value, most of it in `float.__repr__`. Here the
same characters come from whole-array integer arithmetic (`json_value_lists`); the
rare values where that shortcut is not provably identical go through Python's own
`json.dumps`.

Example:
>>> import numpy as np
>>> json_value_lists(np.float32([[1 / 3, -2.0, 1 / 128], [3e-6, 1e9, -0.0]]))
['[0.333333, -2.0, 0.007812]', '[3e-06, 1000000000.0, -0.0]']
"""

from __future__ import annotations

import json
from typing import IO, Sequence

import numpy as np

DECIMALS = 6  # the original writes round(float(x), 6)

# === JSON numbers ===
# Each value is built in a row of bytes: sign, integer digits, ".", 6 decimals, ", ";
# unused bytes stay 0 and are dropped. A value off the shortcut holds a placeholder
# byte there, replaced by Python's own text afterwards.
_ZERO, _MINUS, _POINT, _COMMA, _SPACE = (ord(c) for c in "0-., ")
_PLACEHOLDER = "\x01"


def json_value_lists(values: np.ndarray) -> list[str]:
    """For each row of `values` [rows, n] (float32), `json.dumps([round(float(x), 6) for x in row])`.

    Why the shortcut is exact: a float32 times 10**6 is exact in float64 (24 + 20 bits
    of mantissa), so `rint` rounds the exact decimal value, ties to even, as `round`
    does: k = round(x * 10**6). `round` returns the double nearest to k / 10**6, and
    below 2**33 the ulp of a double is under 10**-6, so no shorter decimal than k / 10**6
    (trailing zeros dropped, one decimal kept) reads back as that double: that decimal
    is its `repr`. `repr` switches to exponents below 1e-4, so |k| < 100, |x| >= 1e9
    and non-finite values take Python's own path.
    """
    values = np.asarray(values, dtype=np.float32)
    k = np.rint(values.astype(np.float64) * 10**DECIMALS)
    magnitude = np.abs(k)
    shortcut = (magnitude >= 100) & (magnitude < 1e15)
    units = np.where(shortcut, magnitude, 0).astype(np.int64)
    integer = units // 10**DECIMALS
    decimals = units - integer * 10**DECIMALS
    digits = len(str(int(integer.max(initial=0))))  # integer digits that this array needs
    point = digits + 1
    field = np.zeros(values.shape + (point + DECIMALS + 3,), dtype=np.uint8)
    field[..., 0] = (k < 0) * np.uint8(_MINUS)
    # Division by a constant is fast in numpy (libdivide), divmod and np.where are not.
    for column in range(digits, 0, -1):  # units first; leading zeros are dropped, a lone "0" is not
        keep = (integer > 0) | (column == digits)
        quotient = integer // 10
        field[..., column] = ((integer - quotient * 10).astype(np.uint8) + np.uint8(_ZERO)) * keep
        integer = quotient
    field[..., point] = _POINT
    trailing = np.ones(values.shape, dtype=bool)
    for column in range(DECIMALS, 0, -1):  # last decimal first; trailing zeros are dropped, "2.0" keeps one
        quotient = decimals // 10
        digit = (decimals - quotient * 10).astype(np.uint8)
        trailing &= digit == 0
        field[..., point + column] = (digit + np.uint8(_ZERO)) * (~trailing | (column == 1))
        decimals = quotient
    field[..., -2:] = (_COMMA, _SPACE)
    others = ~shortcut
    field[others, : point + DECIMALS + 1] = 0
    field[others, 0] = ord(_PLACEHOLDER)
    flat = field.reshape(len(values), -1)
    kept = flat != 0
    text = flat[kept].tobytes().decode("ascii")
    ends = np.cumsum(kept.sum(axis=1)).tolist()
    lists = [text[start : end - 2] for start, end in zip([0, *ends[:-1]], ends)]
    for row in np.flatnonzero(others.any(axis=1)).tolist():
        texts = [json.dumps(round(float(x), DECIMALS)) for x in values[row][others[row]]]
        pieces = lists[row].split(_PLACEHOLDER)
        lists[row] = pieces[0] + "".join(t + piece for t, piece in zip(texts, pieces[1:]))
    return [f"[{values_text}]" for values_text in lists]


def _layers_json(layers: Sequence[int], lists: Sequence[str]) -> str:
    return ", ".join(f'{{"index": {layer}, "values": {values}}}' for layer, values in zip(layers, lists))


def token_features_line(index: int, tokens: Sequence[str], values: np.ndarray, layers: Sequence[int]) -> str:
    """One line of the original's output, exactly as its `json.dumps` writes it:
    `values` [len(tokens), len(layers) * H], the layers side by side.

    >>> token_features_line(3, ["[CLS]"], np.float32([[0.5, 1 / 3]]), [-1])
    '{"linex_index": 3, "features": [{"token": "[CLS]", "layers": [{"index": -1, "values": [0.5, 0.333333]}]}]}'
    """
    if not tokens:  # --pooling=first_subword of an empty text: no word
        return f'{{"linex_index": {index}, "features": []}}'
    count = len(layers)
    lists = json_value_lists(np.asarray(values).reshape(len(tokens) * count, -1))
    features = ", ".join(
        f'{{"token": {json.dumps(token)}, "layers": [{_layers_json(layers, lists[row * count : (row + 1) * count])}]}}'
        for row, token in enumerate(tokens)
    )
    return f'{{"linex_index": {index}, "features": [{features}]}}'


def pooled_line(index: int, pooling: str, values: np.ndarray, layers: Sequence[int]) -> str:
    """One line of pooled output: `values` [len(layers) * H].

    >>> print(pooled_line(0, "mean", np.float32([0.25, -1.0]), [-1, -2]))
    {"linex_index": 0, "pooling": "mean", "layers": [{"index": -1, "values": [0.25]}, {"index": -2, "values": [-1.0]}]}
    """
    lists = json_value_lists(np.asarray(values).reshape(len(layers), -1))
    return f'{{"linex_index": {index}, "pooling": {json.dumps(pooling)}, "layers": [{_layers_json(layers, lists)}]}}'


# === Writers ===
# Both take, line by line, `(index, tokens, values)`: for token-level output the
# tokens that get a row and `values` [>= len(tokens), F]; for pooled output tokens
# None and `values` [F].
class JsonLinesWriter:
    def __init__(self, stream: IO[str], layers: Sequence[int], pooling: str):
        self.stream, self.layers, self.pooling = stream, list(layers), pooling

    def write(self, index: int, tokens: Sequence[str] | None, values: np.ndarray) -> None:
        if tokens is None:
            line = pooled_line(index, self.pooling, values, self.layers)
        else:
            line = token_features_line(index, tokens, values[: len(tokens)], self.layers)
        self.stream.write(line + "\n")

    def close(self) -> None:
        self.stream.close()


def companion_paths(output_file: str) -> tuple[str, str]:
    """(offsets, tokens) files beside a token-level npy output.

    >>> companion_paths("out/words.npy")
    ('out/words.offsets.npy', 'out/words.tokens.txt')
    """
    stem = output_file[: -len(".npy")] if output_file.endswith(".npy") else output_file
    return f"{stem}.offsets.npy", f"{stem}.tokens.txt"


class NpyWriter:
    """float32 rows into a memory-mapped .npy whose shape is known in advance.

    Args:
        paths: the array, then (token-level only) the offsets and the tokens files.
        row_counts: rows of each line (token-level), or None for one row a line.
        num_lines: lines in all.
        width: features a row.
    """

    def __init__(self, paths: Sequence[str], row_counts: np.ndarray | None, num_lines: int, width: int):
        self.paths = paths
        self.offsets = None if row_counts is None else np.concatenate([[0], np.cumsum(row_counts)]).astype(np.int64)
        rows = num_lines if self.offsets is None else int(self.offsets[-1])
        self.array = np.lib.format.open_memmap(paths[0], mode="w+", dtype=np.float32, shape=(rows, width))
        self.tokens = None if self.offsets is None else open(paths[2], "w", encoding="utf-8")

    def write(self, index: int, tokens: Sequence[str] | None, values: np.ndarray) -> None:
        if tokens is None:
            self.array[index] = values
            return
        start = self.offsets[index]
        self.array[start : start + len(tokens)] = values[: len(tokens)]
        self.tokens.write(" ".join(tokens) + "\n")  # WordPieces hold no spaces

    def close(self) -> None:
        self.array.flush()
        del self.array  # unmaps the file, so that it can be renamed on every OS
        if self.offsets is not None:
            with open(self.paths[1], "wb") as handle:
                np.save(handle, self.offsets)
            self.tokens.close()
