"""Token tagging (NER): CoNLL-2003 (IOB1 as released, or IOB2) and character-level Chinese BIO (People's Daily, Weibo).

As the paper (section 5.3): each word is cut into WordPieces, the label sits on the
first piece and the other pieces are ignored in the loss and at prediction; there is
no CRF. With `--document_context`, each sentence is fed with as much of its document
around it as fits ("maximal document context"): the context is read by the encoder but
neither trained on nor predicted. A sentence longer than `max_seq_length` is cut into
windows at word boundaries, so every word gets a prediction.

Files: one token a line, its columns separated by whitespace, the word first and its
tag last; a blank line ends a sentence and a `-DOCSTART-` line starts a document (a
file without any is one document). Predictions are written back in the same columns
plus the predicted tag, which is the layout conlleval reads.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np

from bert_tf.errors import BertTfError, DataError
from bert_tf.flags import Flag
from bert_tf.tokenization import FullTokenizer
from fine_tune import metrics as metric_functions
from fine_tune.config import RunConfig, TaskConfig, check_data_dir, own, shared
from fine_tune.features import label_index, unknown_label
from fine_tune.heads import TokenClassificationHead, token_classification_loss
from fine_tune.jsonl import utf8_lines
from fine_tune.registry import register
from fine_tune.task import EvalSet, Features, PredictionWriter, Reader, Task, write_lines

DOCSTART = "-DOCSTART-"
LABEL_SCHEMES = ("iob2", "keep")


@dataclasses.dataclass(frozen=True)
class TaggedSentence:
    """A sentence of a CoNLL-style file.

    Args:
        guid: "<file>-<index>".
        words: the first column of each token line.
        label: the tags (in the training scheme), or None for an unlabelled file.
        lines: every token line's columns as read, for writing predictions back.
        document: index of the document the sentence belongs to.
        docstart: the `-DOCSTART-` line just before the sentence, if any.
        source: "file line N" of its first token.
        path: the file it was read from ("" if none).
        line: the line of its first token in `path` (its token lines follow one another).
    """

    guid: str
    words: tuple[str, ...]
    label: tuple[str, ...] | None
    lines: tuple[tuple[str, ...], ...]
    document: int
    docstart: str | None
    source: str
    path: str = ""
    line: int = 0

    def word_source(self, index: int) -> str:
        """Where word `index` is, for messages: "file line N" of its own line when read from a file."""
        return f"{self.path} line {self.line + index}" if self.path else self.source


# === Tag schemes ===
def _kind(tag: str) -> str:
    return tag[2:] if tag[:2] in ("B-", "I-") else ""


def iob1_to_iob2(tags: Sequence[str]) -> list[str]:
    """An `I-X` that starts an entity becomes `B-X`.

    >>> iob1_to_iob2(["I-PER", "I-PER", "O", "I-LOC", "B-LOC"])
    ['B-PER', 'I-PER', 'O', 'B-LOC', 'B-LOC']
    """
    converted, previous = [], "O"
    for tag in tags:
        if tag.startswith("I-") and _kind(previous) != tag[2:]:
            tag = "B-" + tag[2:]
        converted.append(tag)
        previous = tag
    return converted


def iob2_to_iob1(tags: Sequence[str]) -> list[str]:
    """A `B-X` stays only right after another X entity; otherwise it becomes `I-X`.

    >>> iob2_to_iob1(['B-PER', 'I-PER', 'O', 'B-LOC', 'B-LOC'])
    ['I-PER', 'I-PER', 'O', 'I-LOC', 'B-LOC']
    """
    converted, previous = [], "O"
    for tag in tags:
        if tag.startswith("B-") and _kind(previous) != tag[2:]:
            converted.append("I-" + tag[2:])
        else:
            converted.append(tag)
        previous = tag
    return converted


def is_iob1(sentences: Sequence[Sequence[str]]) -> bool:
    """Whether entities start with `I-` more often than with `B-` (the IOB1 of the
    CoNLL-2003 release). A few `I-` starts in a BIO file are annotation slips (Weibo
    NER's train file has 10 against 1,885 `B-`): the file stays BIO.

    >>> is_iob1([["I-PER", "O", "I-LOC", "B-LOC"]]), is_iob1([["B-PER", "O", "I-LOC", "O", "B-LOC"]])
    (True, False)
    """
    starts_with_i = sum(a != b for tags in sentences for a, b in zip(tags, iob1_to_iob2(tags)))
    starts_with_b = sum(tag.startswith("B-") for tags in sentences for tag in tags)
    return starts_with_i > starts_with_b


# === Reader ===
def as_is(cell: str) -> str:
    return cell


def read_conll(path: str, word: Callable[[str], str] = as_is) -> list[TaggedSentence]:
    """The sentences of a CoNLL-style file (`word`: the word of a line's first column);
    raises `DataError` on a line of the wrong width."""
    if not os.path.isfile(path):
        raise DataError(f"Data file {path} does not exist.")
    sentences: list[TaggedSentence] = []
    lines: list[tuple[str, ...]] = []
    first_line, width, document, docstart = 0, 0, 0, None

    def flush() -> None:
        nonlocal lines, docstart
        if lines:
            tags = tuple(cells[-1] for cells in lines) if width > 1 else None
            guid = f"{os.path.basename(path)}-{len(sentences)}"
            words = tuple(word(cells[0]) for cells in lines)
            sentences.append(
                TaggedSentence(guid, words, tags, tuple(lines), document, docstart, f"{path} line {first_line}", path,
                               first_line)
            )
            lines, docstart = [], None

    for number, text in utf8_lines(path):
        cells = tuple(text.split())
        if not cells:
            flush()
        elif cells[0] == DOCSTART:
            flush()
            document += bool(sentences)
            docstart = text
        else:
            width = width or len(cells)
            if len(cells) != width:
                raise DataError(
                    f"{path} line {number} has {len(cells)} whitespace-separated columns, "
                    f"but the file's first token line has {width}."
                )
            first_line = first_line if lines else number
            lines.append(cells)
    flush()
    return sentences


class ConllReader:
    """Reads `files[split]` (relative to the data dir) as CoNLL-style sentences.

    With `scheme="iob2"`, IOB1 tags are converted to IOB2 for training (the model then
    learns "B = an entity starts here"), and predictions go back to the file's scheme.
    """

    def __init__(
        self,
        files: dict[str, str],
        scheme: str,
        word: Callable[[str], str] = as_is,
        labels: tuple[str, ...] | None = None,
    ):
        if scheme not in LABEL_SCHEMES:
            raise DataError(f"Unknown --label_scheme {scheme!r}; use one of {', '.join(LABEL_SCHEMES)}.")
        self.files = files
        self.scheme = scheme
        self.word = word
        self.labels = labels  # None: taken from the training file
        self.file_is_iob1: dict[str, bool] = {}

    def read(self, data_dir: str, split: str) -> list[EvalSet]:
        path = os.path.join(data_dir, self.files[split])
        sentences = self._sentences(path, split)
        if not sentences:
            raise DataError(f"{path} holds no sentences for the {split} set.")
        labelled = [s.label for s in sentences if s.label is not None]
        self.file_is_iob1[path] = is_iob1(labelled)
        if self.scheme == "iob2":
            sentences = [
                dataclasses.replace(s, label=tuple(iob1_to_iob2(s.label))) if s.label is not None else s
                for s in sentences
            ]
        return [EvalSet(split, sentences, path)]

    def _sentences(self, path: str, split: str) -> list[TaggedSentence]:
        return read_conll(path, self.word)

    def labels_in(self, examples: Sequence[TaggedSentence]) -> tuple[str, ...]:
        """"O" first, then B- and I- of every entity type seen, and any other tag seen.

        Both prefixes of each type are included, so a dev file may use a prefix that the
        training file happens not to (e.g. a type only ever one word long in training).
        """
        seen = {tag for example in examples for tag in example.label or ()}
        kinds = {_kind(tag) for tag in seen} - {""}
        tags = seen | {f"{prefix}-{kind}" for kind in kinds for prefix in "BI"}
        return ("O", *sorted(tags - {"O"}, key=lambda tag: (_kind(tag) or tag, tag)))


# === Featuriser ===
@dataclasses.dataclass(frozen=True)
class Window:
    """Which words of its sentence a feature predicts, and at which token positions."""

    first_word: int
    positions: np.ndarray


class TaggingFeaturiser:
    """Label on each word's first WordPiece; windows at word boundaries; optional document context."""

    def __init__(self, document_context: bool):
        self.document_context = document_context

    def __call__(
        self, examples: Sequence[TaggedSentence], tokenizer: FullTokenizer, max_seq_length: int, labels: Sequence[str]
    ) -> Features:
        index = label_index(labels)
        room = max_seq_length - 2
        rows: dict[str, list[np.ndarray]] = {"input_word_ids": [], "input_type_ids": [], "label_ids": [],
                                             "label_weights": []}
        example_index, windows = [], []
        pieces = [self._pieces(sentence, tokenizer, room) for sentence in examples]
        for number, sentence in enumerate(examples):
            label_ids = self._label_ids(sentence, index, labels)
            context = self._context(examples, pieces, number, room)
            for chunk_start, chunk_end in _chunks(pieces[number], room):
                ids, positions = self._window(pieces[number], chunk_start, chunk_end, context, room, tokenizer)
                targets = np.zeros(len(ids), np.int32)
                weights = np.zeros(len(ids), np.int32)
                targets[positions] = label_ids[chunk_start:chunk_end]
                weights[positions] = 1
                rows["input_word_ids"].append(ids)
                rows["input_type_ids"].append(np.zeros(len(ids), np.int32))
                rows["label_ids"].append(targets)
                rows["label_weights"].append(weights)
                example_index.append(number)
                windows.append(Window(chunk_start, positions))
        return Features(rows, {}, np.array(example_index, dtype=np.int64), windows)

    @staticmethod
    def _pieces(sentence: TaggedSentence, tokenizer: FullTokenizer, room: int) -> list[list[int]]:
        """The WordPiece ids of each word ([UNK] for a word that tokenizes to nothing)."""
        words = []
        for word in sentence.words:
            tokens = tokenizer.tokenize(word) or ["[UNK]"]
            words.append(tokenizer.convert_tokens_to_ids(tokens[:room]))
        return words

    @staticmethod
    def _label_ids(sentence: TaggedSentence, index: dict[str, int], labels: Sequence[str]) -> np.ndarray:
        if sentence.label is None:
            return np.zeros(len(sentence.words), np.int32)
        for number, tag in enumerate(sentence.label):
            if tag not in index:  # named as the file has it (before any IOB1 -> IOB2 conversion)
                raise unknown_label(sentence.lines[number][-1] if sentence.lines else tag,
                                    sentence.word_source(number), labels)
        return np.array([index[tag] for tag in sentence.label], np.int32)

    def _context(
        self, examples: Sequence[TaggedSentence], pieces: list[list[list[int]]], number: int, room: int
    ) -> tuple[list[int], list[int]]:
        """Up to `room` piece ids of the sentence's document before and after it (none without context)."""
        if not self.document_context:
            return [], []
        document = examples[number].document
        before: list[int] = []
        other = number - 1
        while other >= 0 and examples[other].document == document and len(before) < room:
            before[:0] = _flat(pieces[other])
            other -= 1
        after: list[int] = []
        other = number + 1
        while other < len(examples) and examples[other].document == document and len(after) < room:
            after.extend(_flat(pieces[other]))
            other += 1
        return before, after

    def _window(
        self,
        words: list[list[int]],
        start: int,
        end: int,
        context: tuple[list[int], list[int]],
        room: int,
        tokenizer: FullTokenizer,
    ) -> tuple[np.ndarray, np.ndarray]:
        """[CLS] left-context words[start:end] right-context [SEP], and the first-piece positions.

        With document context, the context is the sentence's own words outside the
        window, then the neighbouring sentences; the free room is split evenly, and a
        side with too little context leaves the rest to the other.
        """
        left, right = [], []
        if self.document_context:
            left = context[0] + _flat(words[:start])
            right = _flat(words[end:]) + context[1]
        target = _flat(words[start:end])
        free = room - len(target)
        take_right = min(len(right), free - min(len(left), free // 2))
        take_left = min(len(left), free - take_right)
        cls, sep = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]"])
        ids = [cls, *left[len(left) - take_left :], *target, *right[:take_right], sep]
        offsets = np.cumsum([0] + [len(word) for word in words[start:end]])[:-1]
        return np.asarray(ids, np.int32), (1 + take_left + offsets).astype(np.int64)


def _flat(words: list[list[int]]) -> list[int]:
    return [piece for word in words for piece in word]


def _chunks(words: list[list[int]], room: int) -> list[tuple[int, int]]:
    """Word ranges whose pieces fit in `room`, cut at word boundaries.

    >>> _chunks([[1, 2], [3], [4, 5, 6], [7]], 4)
    [(0, 2), (2, 4)]
    """
    chunks, start, used = [], 0, 0
    for number, word in enumerate(words):
        if used + len(word) > room and number > start:
            chunks.append((start, number))
            start, used = number, 0
        used += len(word)
    chunks.append((start, len(words)))
    return chunks


# === Head, metrics, writer ===
class TaggingHead(TokenClassificationHead):
    """The token classifier; decodes each word's tag from its first WordPiece."""

    def decode(
        self, examples: Sequence[TaggedSentence], features: Features, outputs: list[np.ndarray], labels: Sequence[str]
    ) -> list[tuple[str, ...]]:
        tags: list[list[str]] = [[""] * len(example.words) for example in examples]
        for row, window in enumerate(features.extras):
            chosen = np.argmax(outputs[row][window.positions], axis=-1)
            sentence = tags[features.example_index[row]]
            sentence[window.first_word : window.first_word + len(chosen)] = [labels[i] for i in chosen]
        return [tuple(sentence) for sentence in tags]


class EntityMetrics:
    """Entity-level precision, recall and F1, as conlleval."""

    primary = "f1"

    def __call__(self, examples: Sequence[TaggedSentence], predictions: Sequence[Sequence[str]]) -> dict[str, float]:
        return metric_functions.entity_scores([example.label for example in examples], predictions)


class ConllWriter:
    """`<set>_predictions.txt`: the input's lines plus the predicted tag, in the input's own scheme."""

    def __init__(self, reader: ConllReader):
        self.reader = reader

    def __call__(
        self, output_dir: str, eval_set: EvalSet, predictions: Sequence[Sequence[str]], labels: Sequence[str]
    ) -> list[str]:
        back_to_iob1 = self.reader.scheme == "iob2" and self.reader.file_is_iob1.get(eval_set.source, False)
        lines = []
        for sentence, tags in zip(eval_set.examples, predictions, strict=True):
            if sentence.docstart is not None:
                lines += [sentence.docstart, ""]
            tags = iob2_to_iob1(tags) if back_to_iob1 else tags
            lines += [" ".join((*cells, tag)) for cells, tag in zip(sentence.lines, tags, strict=True)]
            lines.append("")
        return [write_lines(output_dir, f"{eval_set.name}_predictions.txt", lines)]


@dataclasses.dataclass
class ConllConfig(TaskConfig):
    """A NER task over CoNLL-style files: the file flags name them (relative to
    `data_dir` if given), else the task's own names in `data_dir`."""

    family: ClassVar[str] = "ner"
    train_file: str | None = shared("train_file")
    dev_file: str | None = shared("dev_file")
    test_file: str | None = shared("test_file")
    label_scheme: str = own(Flag(LABEL_SCHEMES, "iob2", "iob2: train on IOB2 tags; keep: as in the files."))
    document_context: bool = own(Flag(bool, False, "Feed each sentence with its document around it (paper, 5.3)."))


def tagging_task(
    name: str,
    files: dict[str, str],
    config: ConllConfig,
    run: RunConfig,
    description: str,
    file_format: Callable[[dict[str, str], ConllConfig], tuple[Reader, PredictionWriter]] | None = None,
) -> Task:
    """A NER task over the task's own `files`; `--train_file` etc. override them.

    `file_format(files, config)` gives the reader and prediction writer of the files
    (default: CoNLL columns, written back in the files' own tag scheme)."""
    given = {"train": config.train_file, "dev": config.dev_file, "test": config.test_file}
    check_data_dir(config, run, given)
    reader, writer = (file_format or conll_format)(
        {split: given[split] or default for split, default in files.items()}, config
    )
    return Task(
        name=name,
        reader=reader,
        featuriser=TaggingFeaturiser(config.document_context),
        head=TaggingHead(),
        loss=token_classification_loss,
        metrics=EntityMetrics(),
        writer=writer,
        description=description,
    )


def conll_format(files: dict[str, str], config: ConllConfig) -> tuple[Reader, PredictionWriter]:
    reader = ConllReader(files, config.label_scheme)
    return reader, ConllWriter(reader)


@register("conll2003", "CoNLL-2003 English NER: eng.train, eng.testa (dev), eng.testb (test)", ConllConfig)
def conll2003(config: ConllConfig, run: RunConfig) -> Task:
    files = {"train": "eng.train", "dev": "eng.testa", "test": "eng.testb"}
    return tagging_task("conll2003", files, config, run, "CoNLL-2003 English NER")


# === Chinese: one character a line ===
class EveryNthReader(ConllReader):
    """Train and dev sets from one file: the Nth, 2Nth, 3Nth, ... sentences of the dev
    file are the dev set, all the others the train set (the test file is read as named).

    Example (sentences 1..7, every 3rd to dev):
    >>> [k for k in range(1, 8) if EveryNthReader.in_dev(k - 1, 3)]
    [3, 6]
    """

    def __init__(self, files: dict[str, str], scheme: str, every: int):
        if every < 2:
            raise DataError(f"--split_dev_every must be 2 or more (every Nth sentence to dev), got {every}.")
        super().__init__({**files, "train": files["dev"]}, scheme)
        self.every = every

    @staticmethod
    def in_dev(index: int, every: int) -> bool:
        return (index + 1) % every == 0

    def _sentences(self, path: str, split: str) -> list[TaggedSentence]:
        sentences = super()._sentences(path, split)
        if split == "test":
            return sentences
        return [s for index, s in enumerate(sentences) if self.in_dev(index, self.every) == (split == "dev")]


@dataclasses.dataclass
class PeoplesDailyConfig(ConllConfig):
    """People's Daily; `split_dev_every` makes train and dev of its dev file alone (the
    shared data has only example.dev)."""

    split_dev_every: int = own(Flag(int, 0, "peoples_daily: take train and dev from the dev file (--dev_file, "
                                    "default example.dev): its Nth, 2Nth, ... sentences are dev, the others train "
                                    "(0: example.train and example.dev as named)."))  # fmt: skip


@register(
    "peoples_daily",
    "People's Daily Chinese NER, one character a line in BIO: example.train, example.dev, example.test "
    "(or --split_dev_every=5: train and dev of example.dev alone)",
    PeoplesDailyConfig,
    aliases=("zh_ner", "chinese_ner"),
)
def peoples_daily(config: PeoplesDailyConfig, run: RunConfig) -> Task:
    """People's Daily NER. The shared data holds only example.dev (2,318 sentences):
    `--split_dev_every=5` makes its sentences 5, 10, 15, ... (463) the dev set and the
    other 1,855 the train set; the file's order decides, nothing random."""
    files = {"train": "example.train", "dev": "example.dev", "test": "example.test"}
    data_dir = config.data_dir or ""
    if config.split_dev_every and config.train_file:
        raise BertTfError("--split_dev_every takes the train set from the dev file; drop --train_file or it.")
    train = os.path.join(data_dir, config.train_file or files["train"])
    dev = os.path.join(data_dir, config.dev_file or files["dev"])
    if not config.split_dev_every and run.do_train and not os.path.isfile(train) and os.path.isfile(dev):
        raise DataError(f"Data file {train} does not exist; to train on {dev} alone, add --split_dev_every=5 "
                        "(every 5th sentence to dev, the others to train).")
    if not config.split_dev_every:
        return tagging_task("peoples_daily", files, config, run, "People's Daily Chinese NER")

    def every_nth(files: dict[str, str], config: PeoplesDailyConfig) -> tuple[Reader, PredictionWriter]:
        reader = EveryNthReader(files, config.label_scheme, config.split_dev_every)
        return reader, ConllWriter(reader)

    description = f"People's Daily Chinese NER, every {config.split_dev_every}th sentence of the dev file as dev"
    return tagging_task("peoples_daily", files, config, run, description, every_nth)


def weibo_character(cell: str) -> str:
    """The character of a weiboNER_2nd_conll line. Its first column is the character
    followed by the character's position in its segmented word ("科0 技1", up to "339" in
    a long number: "3" at 39), so the character is the column's first code point; the 44
    lines whose emoji the release lost hold two U+FFFD, one of which is kept (the
    tokenizer drops it: [UNK]).

    >>> weibo_character("科0"), weibo_character("339"), weibo_character("\ufffd\ufffd0")
    ('科', '3', '\ufffd')
    """
    return cell[:1]


# Weibo's 4 types, each a name (NAM) or a nominal mention (NOM), in `labels_in`'s order:
# fixed, so that a training subset without, say, GPE.NOM still reads every dev file.
WEIBO_LABELS = ("O", *(f"{prefix}-{kind}.{mention}" for kind in ("GPE", "LOC", "ORG", "PER")
                       for mention in ("NAM", "NOM") for prefix in "BI"))  # fmt: skip


def weibo_format(files: dict[str, str], config: ConllConfig) -> tuple[Reader, PredictionWriter]:
    reader = ConllReader(files, config.label_scheme, word=weibo_character, labels=WEIBO_LABELS)
    return reader, ConllWriter(reader)


@register(
    "weibo_ner",
    "Weibo NER (PER/ORG/LOC/GPE, NAM/NOM): weiboNER_2nd_conll.train, .dev, .test, one character a line",
    ConllConfig,
    aliases=("weibo",),
)
def weibo_ner(config: ConllConfig, run: RunConfig) -> Task:
    """Weibo NER: each character a word (the 2nd release's word-position digit dropped),
    tags such as B-PER.NAM (a named person) and B-PER.NOM (a nominal mention) scored as
    entity types of their own, as the papers report them."""
    files = {split: f"weiboNER_2nd_conll.{split}" for split in ("train", "dev", "test")}
    return tagging_task("weibo_ner", files, config, run, "Weibo Chinese NER", weibo_format)


@register("conll", "any CoNLL-style files: --train_file --dev_file --test_file (word first, tag last)", ConllConfig)
def conll(config: ConllConfig, run: RunConfig) -> Task:
    files = {"train": "train.txt", "dev": "dev.txt", "test": "test.txt"}
    return tagging_task("conll", files, config, run, "CoNLL-style tagging")
