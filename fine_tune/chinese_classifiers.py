"""Chinese sentence classification: ChnSentiCorp (TSV) and CLUE's TNEWS (JSON lines).

Both are single-sentence tasks of `fine_tune.glue`'s kind (its featuriser, head,
metrics and writer); only the files differ:

| task | files (in `--data_dir`) | text | label | labels |
|---|---|---|---|---|
| chnsenticorp | train.tsv, dev.tsv, test.tsv (header `label<TAB>text_a`) | text_a | label | 0 1 |
| tnews | train.json, dev.json, test.json (JSON lines) | sentence | label ("108") | labels.json's, in order |

TNEWS lines are `{"label", "label_desc", "sentence", "keywords"}`, labels.json lines
`{"label", "label_desc"}` (15 of them).

TNEWS is read as CLUE's baseline reads it: the title alone (`keywords` unused); a test
line without "label" is unlabelled and keeps its "id" for the predictions file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from bert_tf.errors import DataError
from fine_tune.config import RunConfig, check_data_dir
from fine_tune.features import PairExample
from fine_tune.glue import BINARY, GlueConfig, Layout, TsvReader, sentence_task
from fine_tune.jsonl import read_json_lines
from fine_tune.registry import register
from fine_tune.task import SPLITS, EvalSet, Task


# === ChnSentiCorp ===
@register(
    "chnsenticorp",
    "ChnSentiCorp: Chinese review sentiment, train.tsv / dev.tsv / test.tsv with a label<TAB>text_a header",
    GlueConfig,
)
def chnsenticorp(config: GlueConfig, run: RunConfig) -> Task:
    check_data_dir(config, run)
    layouts = {split: (Layout(f"{split}.tsv", True, "text_a", None, "label", optional_label=split == "test"),)
               for split in SPLITS}  # fmt: skip
    return sentence_task("chnsenticorp", TsvReader(layouts, BINARY), ("accuracy",), "ChnSentiCorp sentiment")


# === TNEWS ===
class JsonLinesReader:
    """Reads `files[split]` (relative to the data dir) as one JSON object a line.

    Example:
    >>> import os, tempfile
    >>> data_dir = tempfile.mkdtemp()
    >>> _ = open(os.path.join(data_dir, "dev.json"), "w").write('{"label": "108", "sentence": "上课"}\\n')
    >>> reader = JsonLinesReader({"dev": "dev.json"}, ("108",), text_key="sentence")
    >>> [(e.guid, e.text_a, e.label) for e in reader.read(data_dir, "dev")[0].examples]
    [('0', '上课', '108')]
    """

    takes_pairs = False  # one text a line

    def __init__(self, files: dict[str, str], labels: tuple[str, ...] | None, text_key: str,
                 label_key: str = "label"):
        self.files = files
        self.labels = labels
        self.text_key = text_key
        self.label_key = label_key

    def read(self, data_dir: str, split: str) -> list[EvalSet]:
        path = os.path.join(data_dir, self.files[split])
        examples = [self._example(path, number, record) for number, record in read_json_lines(path)]
        if not examples:
            raise DataError(f"{path} holds no examples for the {split} set.")
        labelled = [example.label is not None for example in examples]
        if not all(labelled) and (split == "train" or any(labelled)):  # a test file may be unlabelled as a whole
            source = examples[labelled.index(False)].source
            raise DataError(f'{source} has no "{self.label_key}"; every line of a {split} file needs one.')
        return [EvalSet(split, examples, path)]

    def labels_in(self, examples: Sequence[PairExample]) -> tuple[str, ...]:
        return self.labels

    def _example(self, path: str, number: int, record: dict) -> PairExample:
        source = f"{path} line {number}"
        text = record.get(self.text_key)
        if not isinstance(text, str):
            raise DataError(f'{source} has no "{self.text_key}" string.')
        label = record.get(self.label_key)
        guid = record.get("id", number - 1)
        return PairExample(str(guid), text, None, None if label is None else str(label), source)


def tnews_labels(path: str) -> tuple[str, ...]:
    """The "label" of each line of TNEWS's labels.json, in file order."""
    labels = []
    for number, record in read_json_lines(path):
        if not isinstance(record.get("label"), (str, int)):
            raise DataError(f'{path} line {number} has no "label"; labels.json lines are {{"label", "label_desc"}}.')
        labels.append(str(record["label"]))
    if len(set(labels)) != len(labels) or not labels:
        raise DataError(f"{path} must list each label once; it lists {', '.join(labels) or 'none'}.")
    return tuple(labels)


@register("tnews", "CLUE TNEWS: news-title classification, 15 labels (train/dev/test.json, labels.json)", GlueConfig)
def tnews(config: GlueConfig, run: RunConfig) -> Task:
    check_data_dir(config, run)
    # A finished run keeps its labels in its record: loading it to predict (no split read)
    # must not need the data dir it trained from, which may be gone.
    reads = any(run.wants(split) for split in SPLITS)
    labels = tnews_labels(os.path.join(config.data_dir, "labels.json")) if reads else None
    files = {split: f"{split}.json" for split in SPLITS}
    return sentence_task("tnews", JsonLinesReader(files, labels, "sentence"), ("accuracy",), "TNEWS news titles")
