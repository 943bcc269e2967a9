"""`bert-predict`: a finished run's predictions for every line of a file, as JSON lines.

    bert-predict --model_dir out/mrpc --input_file pairs.tsv --output_file predictions.jsonl

`--model_dir` is the `--output_dir` of run_classifier.py, run_ner.py or run_squad.py, or
a `bert-export` folder of one (predictions through its SavedModel, `fine_tune.exported`).
The input is read by its extension; what a line holds depends on the model:

| model | .txt (a line) | .tsv (tab-separated, no header, no quoting) | .jsonl (an object a line) |
|---|---|---|---|
| classifier, regressor | one text | text_a, or text_a<TAB>text_b | {"text"} or {"text_a", "text_b"} |
| tagger (NER) | one text | one text | {"text"}, or {"words": [...]} already split |
| question answerer | - | question<TAB>context | {"question", "context"} |

Every line of a .txt or .tsv file is an input (an empty line is an empty text, a valid
input); blank lines of a .jsonl file are skipped. Each input gives one line of output,
in input order: the prediction's fields (`fine_tune.predictor`: `label`, `label_id`,
`probabilities`; `score`; `text`, `words`, `entities`; `text`, `start`, `end`, `score`,
`has_answer`, `null_score_diff`), after the input's `"id"` when a .jsonl object has one.

The file is streamed in chunks of `--chunk_size` inputs (memory stays bounded), with
progress (rows/s, time left) on stderr. Every input is read and checked before the
first is predicted, so a bad line (not valid JSON, not UTF-8, of the wrong shape: file
and line named) stops the run at once; the output is written under a temporary name
and renamed when complete, so a failure leaves no partial output (nor a new folder).
SQuAD 2.0 and other task flags the run does not record go in `--setting name=value` (e.g.
`--setting version_2_with_negative=true`). `--mixed_precision=bf16` (a run dir) computes in
bfloat16: where TensorFlow takes oneDNN's bf16 math mode (measured on an Intel Xeon with
AMX), a float32 model whose matmuls run in bfloat16 (`bert_tf.onednn`); elsewhere the
encoder's projections cast to bfloat16 and back, as `torch.autocast` does
(`bert_tf.layers.compute_projections_in`; the AVX512-BF16 AMD EPYC). An export computes in what
`bert-export --mixed_precision` gave it (serve a float32 one with
`TF_SET_ONEDNN_FPMATH_MODE=BF16` set for the math mode). `--jit_compile` runs the model
through XLA; it does not combine with bf16 (XLA's matmuls do not take oneDNN's mode).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from absl.flags import FlagValues

from bert_tf.errors import BertTfError
from bert_tf.atomic import atomic_outputs
from bert_tf.flags import Flag, check_output_file, flag_values, path_within, require, run_main, set_help
from fine_tune.jsonl import utf8_lines

FORMATS = (".txt", ".tsv", ".jsonl")
NO_ID = object()  # the id of an input without one (a .jsonl object with "id": null keeps its null)


@dataclasses.dataclass(frozen=True)
class Row:
    """One input: where it is (for messages), the model's input, the id to copy to the output."""

    source: str
    value: Any
    id: Any = NO_ID


# === Flags ===
FLAGS = flag_values(
    "input_file", "output_file", "mixed_precision", "jit_compile", "setting",
    own={
        "model_dir": Flag(str, None, "The --output_dir of a run_classifier.py, run_ner.py or run_squad.py run, or a "
                          "bert-export folder."),
        "batch_size": Flag(int, 32, "Rows per forward pass."),
        "chunk_size": Flag(int, 1024, "Inputs read, predicted and written at a time."),
    },
)  # fmt: skip
set_help(FLAGS, "input_file", "The file of inputs, one a line: .txt, .tsv or .jsonl (see above).")
set_help(FLAGS, "jit_compile", "Predict through XLA (a run dir): faster small batches, each new batch shape "
         "compiled once (~1 s) the first time it comes (bert_tf.by_length).")
set_help(FLAGS, "mixed_precision", "bf16: oneDNN's bf16 math mode where the CPU takes it, else the encoder's "
         "projections computed in bfloat16 (a run dir; see above).")


def _check(args: FlagValues) -> str:
    require(args, "model_dir", "input_file", "output_file")
    extension = os.path.splitext(args.input_file)[1].lower()
    if extension not in FORMATS:
        raise BertTfError(f"--input_file {args.input_file} must end in {', '.join(FORMATS)}, which say how to read it.")
    if not os.path.isfile(args.input_file):
        raise BertTfError(f"--input_file {args.input_file} does not exist.")
    for flag in ("batch_size", "chunk_size"):
        if getattr(args, flag) < 1:
            raise BertTfError(f"--{flag} must be positive, got {getattr(args, flag)}.")
    check_output_file(args.output_file, "--output_file")
    if path_within(args.output_file, args.input_file):
        raise BertTfError(f"--output_file {args.output_file} is --input_file; give another file name.")
    if args.jit_compile and args.mixed_precision != "none":
        raise BertTfError("--jit_compile and --mixed_precision do not combine (XLA's matmuls do not take oneDNN's bf16 "
                          "math mode, and ran slower in bf16 here); give one of them.")
    return extension


# === Reading ===
def _json_field(record: dict[str, Any], key: str, source: str) -> Any:
    if key not in record:
        raise BertTfError(f"{source} has no \"{key}\" field.")
    return record[key]


def read_rows(path: str, extension: str, kind: str) -> Iterator[Row]:
    """The inputs of `path` for a model of `kind` ("classifier", "tagger", "question answerer", ...)."""
    for number, text in utf8_lines(path):
        source = f"{path} line {number}"
        if extension == ".jsonl":
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as error:
                raise BertTfError(f"{source} is not valid JSON ({error.msg} at column {error.colno}); "
                                  "each line must be one JSON object.") from None
            if not isinstance(record, dict):
                raise BertTfError(f"{source} is a JSON {type(record).__name__}, not an object.")
            yield Row(source, _json_input(record, source, kind), record.get("id", NO_ID))
        elif extension == ".tsv":
            cells = next(csv.reader([text], delimiter="\t", quotechar=None)) if text else [""]
            yield Row(source, _tsv_input(cells, source, kind))
        else:
            if kind == "question answerer":
                raise BertTfError(f"{path}: a question answerer needs a question and a context per line; "
                                  "use a .tsv (question<TAB>context) or .jsonl ({\"question\", \"context\"}) file.")
            yield Row(source, text)


def _json_input(record: dict[str, Any], source: str, kind: str) -> Any:
    if kind == "question answerer":
        return (_json_field(record, "question", source), _json_field(record, "context", source))
    inputs = ("text", "text_a", "words") if kind == "tagger" else ("text", "text_a")
    given = [key for key in inputs if key in record]
    if len(given) > 1:
        raise BertTfError(f"{source} has both \"{given[0]}\" and \"{given[1]}\"; give one of them.")
    # A second text the model would drop (beside "text") or read as words (a tagger's).
    if "text_b" in record and (kind == "tagger" or "text_a" not in record):
        takes = 'one text ("text" or "words")' if kind == "tagger" else '"text", or "text_a" and "text_b"'
        raise BertTfError(f"{source} has a \"text_b\" this line cannot use; a {kind} line gives {takes}.")
    if kind == "tagger" and "words" in record:
        words = record["words"]
        if not isinstance(words, list):
            raise BertTfError(f"{source}: \"words\" must be a list of strings.")
        return tuple(words)
    if "text_a" in record:
        return (record["text_a"], record["text_b"]) if "text_b" in record else record["text_a"]
    if "text" not in record:
        expected = '"text" (or "words")' if kind == "tagger" else '"text" or "text_a" (and "text_b")'
        raise BertTfError(f"{source} has no {expected} field.")
    return record["text"]


def _tsv_input(cells: list[str], source: str, kind: str) -> Any:
    wanted = {"question answerer": (2,), "tagger": (1,)}.get(kind, (1, 2))
    if len(cells) not in wanted:
        what = {"question answerer": "question<TAB>context", "tagger": "one text (no tab)"}.get(
            kind, "text_a or text_a<TAB>text_b")
        raise BertTfError(f"{source} has {len(cells)} tab-separated columns; a {kind} reads {what}.")
    return cells[0] if len(cells) == 1 else tuple(cells)


def check_rows(path: str, extension: str, model: Any, chunk_size: int) -> int:
    """Reads every input once and checks it as `model` would, so that a bad line is named
    before anything is predicted or written; returns how many inputs there are."""
    count = 0
    for chunk in chunks(read_rows(path, extension, model.kind), chunk_size):
        if model.kind in ("classifier", "regressor"):
            for row in chunk:
                _check_text_count(row, model)
        model.examples_of([row.value for row in chunk], [row.source for row in chunk])
        count += len(chunk)
    return count


def _check_text_count(row: Row, model: Any) -> None:
    """A line holds one text or a pair as the classifier's task takes, said in the file's terms."""
    pair = isinstance(row.value, tuple)
    if pair and not model.takes_pairs:
        raise BertTfError(f"{row.source} is a pair of texts, but {model.task_name} classifies single texts; "
                          "give one text a line.")
    if model.takes_pairs and not pair:
        raise BertTfError(f"{row.source} is one text, but {model.task_name} classifies pairs; give text_a<TAB>text_b "
                          '(.tsv) or {"text_a": ..., "text_b": ...} (.jsonl) lines.')


def chunks(rows: Iterator[Row], size: int) -> Iterator[list[Row]]:
    chunk: list[Row] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# === Writing ===
def record_of(row: Row, result: Any) -> dict[str, Any]:
    fields = dataclasses.asdict(result)
    return {"id": row.id, **fields} if row.id is not NO_ID else fields


def predict_file(args: FlagValues) -> int:
    """Writes the predictions of every input of `--input_file`; returns how many."""
    extension = _check(args)
    # Imported here: the flags are checked (and --help answered) without loading TensorFlow.
    from bert_tf.onednn import enable_bf16_math
    from bert_tf.progress import progress_bar
    from fine_tune.exported import is_export
    from fine_tune.predictor import load_task_model
    from fine_tune.run_dir import settings_of

    precision = args.mixed_precision
    if precision == "bf16" and not is_export(args.model_dir):
        if enable_bf16_math():  # before any matmul
            precision = "none"
            print("bf16: oneDNN's bf16 math mode (a float32 model, its matmuls in bfloat16).", file=sys.stderr)
        else:
            print("bf16: the encoder's projections in bfloat16 (oneDNN's bf16 math mode does not take on this CPU).",
                  file=sys.stderr)
    model = load_task_model(args.model_dir, batch_size=args.batch_size, mixed_precision=precision,
                            jit_compile=args.jit_compile, **settings_of(args.setting))
    progress = progress_bar(check_rows(args.input_file, extension, model, args.chunk_size), "rows")
    written = truncated = 0
    try:
        with atomic_outputs([args.output_file]) as (temporary,), open(temporary, "w", encoding="utf-8") as output:
            for chunk in chunks(read_rows(args.input_file, extension, model.kind), args.chunk_size):
                results, cut = model.predict_rows([row.value for row in chunk], [row.source for row in chunk],
                                                  progress=False)
                output.writelines(json.dumps(record_of(row, result), ensure_ascii=False) + "\n"
                                  for row, result in zip(chunk, results))
                written += len(chunk)
                truncated += cut
                progress.update(len(chunk))
    finally:
        progress.close()
    model.report_truncated(truncated, written)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """bert-predict (`argv` without the program name): exit status 0, or 1 after one
    `error: ...` line on stderr."""
    return run_main(FLAGS, argv, __doc__, _predict)


def _predict(args: FlagValues) -> None:
    written = predict_file(args)
    print(f"Wrote {written} predictions to {args.output_file}.", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
