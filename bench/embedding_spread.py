"""How alike a pre-trained checkpoint's word embeddings are, by how often each token was seen.

Why: BERT-tiny pre-trained here for an hour fine-tunes below random initialisation on
SST-2 and CoNLL-2003 (`pretrain_transfer.py`). The masked-LM softmax shares the word
embeddings, and every step pushes the tokens that are not the answer away from the hidden
state, all the same way: a token the corpus rarely shows as input only ever gets that push.
On 10M words, most of a 30,522-token vocabulary is such a token, and those embeddings end
up nearly parallel, where a random initialisation keeps every token apart; tasks that
lean on rare words (names, sentiment words) then start from inputs they cannot tell apart.
This measures it: the mean cosine between the embeddings of tokens seen about as often
(pairs of a sample of up to 1,000 per group), and their mean length.

    python -m bench.embedding_spread --checkpoint W/ours/phase2 --corpus W/train.txt --vocab_file W/vocab.txt

Prints a table and writes `results/embedding_spread.json`. `--reset_checkpoint DIR` also
writes the checkpoint with the embeddings of tokens seen fewer than `--reset_below` times
drawn afresh as a random initialisation draws them, to fine-tune from (does the
similarity explain the gap to random initialisation?).
"""

from __future__ import annotations

import argparse

import numpy as np

from bench.common import cpu, print_table, write_json
from bert_tf import checkpoints
from bert_tf.fast_tokenizer import FastBertTokenizer

# Groups of tokens by how many times the corpus shows them: [low, high].
SEEN = ((0, 0), (1, 9), (10, 99), (100, 999), (1000, 9999), (10000, None))
SAMPLE = 1000
LINES_PER_CALL = 20000


def token_counts(corpus: str, tokenizer: FastBertTokenizer, vocab_size: int) -> np.ndarray:
    lines = [line for line in open(corpus, encoding="utf-8") if line.strip()]
    counts = np.zeros(vocab_size, np.int64)
    for start in range(0, len(lines), LINES_PER_CALL):
        for ids in tokenizer.tokenize_to_ids(lines[start : start + LINES_PER_CALL]):
            np.add.at(counts, ids, 1)
    return counts


def mean_cosine(vectors: np.ndarray) -> float:
    """The mean cosine between every two of `vectors`."""
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return float((unit @ unit.T)[np.triu_indices(len(unit), 1)].mean())


def spread(embeddings: np.ndarray, counts: np.ndarray, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for low, high in SEEN:
        chosen = np.where((counts >= low) & (counts <= (high if high is not None else counts.max())))[0]
        if len(chosen) < 2:
            continue
        sample = rng.choice(chosen, min(SAMPLE, len(chosen)), replace=False)
        rows.append({"seen": f"{low}-{high if high is not None else ''}", "tokens": len(chosen),
                     "mean_cosine": round(mean_cosine(embeddings[sample]), 3),
                     "mean_norm": round(float(np.linalg.norm(embeddings[chosen], axis=1).mean()), 3)})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="A run_pretraining.py output dir (or any checkpoint).")
    parser.add_argument("--corpus", required=True, help="The text it was pre-trained on.")
    parser.add_argument("--vocab_file", required=True)
    parser.add_argument("--initializer_range", type=float, default=0.02, help="The random initialisation beside it.")
    parser.add_argument("--reset_checkpoint", default=None, help="Write the checkpoint with rare tokens reset here (TF1).")
    parser.add_argument("--reset_below", type=int, default=100)
    args = parser.parse_args()
    model = checkpoints.load_pretrainer(args.checkpoint)
    variable = next(w for w in model.weights if "word_embeddings" in w.path)
    embeddings = np.asarray(variable)
    counts = token_counts(args.corpus, FastBertTokenizer(args.vocab_file, do_lower_case=True), len(embeddings))
    random = np.random.default_rng(1).normal(0.0, args.initializer_range, embeddings.shape)
    results = {"pre-trained": spread(embeddings, counts), "random": spread(random, counts)}
    for name, rows in results.items():
        print(f"{name} word embeddings, by how often the corpus shows each token:")
        print_table(rows, ["seen", "tokens", "mean_cosine", "mean_norm"])
    print("wrote", write_json("embedding_spread", {"cpu": cpu(), "args": vars(args), **results}))
    if args.reset_checkpoint:
        rare = counts < args.reset_below
        embeddings[rare] = np.random.default_rng(7).normal(0.0, args.initializer_range, (rare.sum(), embeddings.shape[1]))
        variable.assign(embeddings)
        print(f"reset {rare.sum()} rows; wrote", checkpoints.save(model, args.reset_checkpoint, "tf1", vocab_file=args.vocab_file))


if __name__ == "__main__":
    main()
