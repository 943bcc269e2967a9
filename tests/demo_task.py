"""Test fixture: a small sentence-classification task written from any vocabulary.

Each sentence is six random whole words of the vocabulary plus one of two marker
words; the label says which marker it holds. The task is in the SST-2 layout
(`sentence<TAB>label`, with a header), so `run_classifier.py --task=sst-2` reads it,
and a model that learns anything at all scores near 100% on its dev set.

Example:
>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> vocab = os.path.join(folder, "vocab.txt")
>>> _ = open(vocab, "w").write("\\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "##s"]
...                                     + [f"word{chr(97 + i)}" for i in range(10)]))
>>> paths = write_demo_task(os.path.join(folder, "task"), vocab, train_size=8, dev_size=4)
>>> open(paths["train"]).readline().strip()
'sentence\\tlabel'
"""

from __future__ import annotations

import os

import numpy as np

from bert_tf.errors import BertTfError
from bert_tf.tokenization import load_vocab


def whole_words(vocab_file: str) -> list[str]:
    """The vocabulary's alphabetic whole-word entries (no [SPECIAL] nor ##piece)."""
    return [token for token in load_vocab(vocab_file) if token.isalpha() and token.isascii()]


def write_demo_task(
    data_dir: str, vocab_file: str, train_size: int = 512, dev_size: int = 128, seed: int = 0
) -> dict[str, str]:
    """Writes `train.tsv` and `dev.tsv` of the marker-word task; returns their paths."""
    words = whole_words(vocab_file)
    if len(words) < 8:
        raise BertTfError(f"The vocabulary {vocab_file} has fewer than 8 whole words to build the demo task from.")
    rng = np.random.default_rng(seed)
    markers, fillers = words[:2], words[2:]
    os.makedirs(data_dir, exist_ok=True)
    paths = {}
    for split, size in (("train", train_size), ("dev", dev_size)):
        rows = ["sentence\tlabel"]
        for index in range(size):
            label = index % 2
            sentence = list(rng.choice(fillers, size=6))
            sentence.insert(int(rng.integers(0, 7)), markers[label])
            rows.append(f"{' '.join(sentence)}\t{label}")
        paths[split] = os.path.join(data_dir, f"{split}.tsv")
        with open(paths[split], "w", encoding="utf-8") as handle:
            handle.write("\n".join(rows) + "\n")
    return paths

