"""Tokenizer throughput, and identity with the original on every shared text.

Speed: tokens/s on the same shared text (English: WikiText-2 + SQuAD with the uncased
vocabulary; Chinese: CLUE + ChnSentiCorp with the Chinese one), timed round-robin (see
bench/common.py), of

- `fast_threads`: our `FastBertTokenizer` on batch tensors (`--batch_size` texts), two
  Python threads calling it (TF ops release the GIL), so both cores work;
- `fast_batches`: the same, one batch after the other;
- `fast_lists`: `FastBertTokenizer.tokenize_to_ids`, Python lists in and out;
- `python`: our `FullTokenizer` (tokens, then ids), text by text;
- `model_garden`: Model Garden's `FullTokenizer` (the original's code), text by text;
- `hf_tokenizers`: HuggingFace `tokenizers.BertWordPieceTokenizer.encode_batch` on the
  same vocabulary and casing (Rust, all cores), with the original's 200-character
  word limit; its share of texts with the original's ids is reported too;

and, timed alone after the others (a live `tf.data` iterator keeps computing ahead in
the background, so it cannot take turns): `fast_tf_data`, the tokenizer mapped over
batches by `tf.data` with two parallel calls, three passes through one iterator.

Identity (`--no_check` skips it): every text of every shared corpus with the uncased,
cased and Chinese vocabularies, Model Garden's ids (max_input_chars_per_word = 200)
against our Python path and our fast path: texts identical / texts.

    python -m bench.tokenizer [--rounds 3] [--batch_size 2048] [--no_check]
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf

from bench.common import data_dir, interleaved_times, print_table, write_json
from bert_tf.fast_tokenizer import FastBertTokenizer
from bert_tf.tokenization import FullTokenizer
from tests.test_tokenization import VOCABS, fast_ids, ids_of, load_corpora, model_garden_tokenizer

# name -> (vocabulary of VOCABS, corpora of load_corpora)
WORKLOADS = {
    "en": ("uncased", ["pretrain/wikitext2_valid.tokens", "squad"]),
    "zh": ("zh", ["pretrain/clue_zh_small", "zh/chnsenticorp"]),
}


def hf_tokenizer(vocab_file: str, do_lower_case: bool):
    from tokenizers import BertWordPieceTokenizer

    tokenizer = BertWordPieceTokenizer(
        vocab_file, clean_text=True, handle_chinese_chars=True, strip_accents=do_lower_case, lowercase=do_lower_case
    )
    tokenizer._tokenizer.model.max_input_chars_per_word = 200  # HF's default is 100.
    return tokenizer


def tf_data_seconds_per_pass(tokenizer: FastBertTokenizer, texts: list[str], batch_size: int, passes: int = 3) -> float:
    """Seconds per pass of a `tf.data` pipeline that maps the tokenizer over batches."""
    strings = tf.constant([text.encode("utf-8") for text in texts])
    dataset = tf.data.Dataset.from_tensor_slices(strings).batch(batch_size).repeat()
    iterator = iter(dataset.map(tokenizer, num_parallel_calls=2, deterministic=True))
    next(iterator)  # Builds the pipeline; at most two batches are computed ahead of the clock.
    batches_per_pass = -(-len(texts) // batch_size)
    start = time.perf_counter()
    for _ in range(passes * batches_per_pass):
        next(iterator)
    return (time.perf_counter() - start) / passes


def speed(name: str, rounds: int, batch_size: int, corpora: dict[str, list[str]]) -> list[dict]:
    vocab, corpus_names = WORKLOADS[name]
    relative, do_lower_case = VOCABS[vocab]
    vocab_file = str(data_dir() / relative)
    texts = [text for corpus in corpus_names for text in corpora[corpus]]
    ours = FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    oracle = model_garden_tokenizer(vocab_file, do_lower_case)
    fast = FastBertTokenizer(vocab_file, do_lower_case=do_lower_case)
    hf = hf_tokenizer(vocab_file, do_lower_case)
    expected = ids_of(oracle, texts)
    num_tokens = sum(map(len, expected))
    lists = [texts[i : i + batch_size] for i in range(0, len(texts), batch_size)]
    batches = [tf.constant([text.encode("utf-8") for text in batch]) for batch in lists]
    hf_ids = [encoding.ids for encoding in hf.encode_batch(texts, add_special_tokens=False)]
    with ThreadPoolExecutor(2) as pool:
        steps = {
            "fast_threads": lambda: list(pool.map(fast, batches)),
            "fast_batches": lambda: [fast(batch) for batch in batches],
            "fast_lists": lambda: [fast.tokenize_to_ids(batch) for batch in lists],
            "python": lambda: ids_of(ours, texts),
            "model_garden": lambda: ids_of(oracle, texts),
            "hf_tokenizers": lambda: [encoding.ids for encoding in hf.encode_batch(texts, add_special_tokens=False)],
        }
        times = interleaved_times(steps, rounds, warmup=1)
    seconds = {contender: contender_times["median"] for contender, contender_times in times.items()}
    seconds["fast_tf_data"] = tf_data_seconds_per_pass(fast, texts, batch_size)
    hf_identical = sum(a == b for a, b in zip(hf_ids, expected)) / len(texts)
    rows = []
    for contender, median in seconds.items():
        rows.append({
            "workload": name,
            "contender": contender,
            "texts": len(texts),
            "tokens": num_tokens,
            "median_s": median,
            "tokens_per_s": num_tokens / median,
            "vs_model_garden": seconds["model_garden"] / median,
            "vs_hf": seconds["hf_tokenizers"] / median,
            "hf_texts_identical": hf_identical if contender == "hf_tokenizers" else None,
        })
    return rows


def identity(corpora: dict[str, list[str]]) -> list[dict]:
    """Texts with the original's ids, per vocabulary and corpus, for both our paths."""
    rows = []
    for vocab, (relative, do_lower_case) in VOCABS.items():
        vocab_file = data_dir() / relative
        oracle = model_garden_tokenizer(vocab_file, do_lower_case)
        ours = FullTokenizer(vocab_file, do_lower_case=do_lower_case)
        fast = FastBertTokenizer(vocab_file, do_lower_case=do_lower_case)
        for corpus, texts in corpora.items():
            start = time.perf_counter()
            expected = ids_of(oracle, texts)
            python, fast_path = ids_of(ours, texts), fast_ids(fast, texts)
            rows.append({
                "vocab": vocab,
                "corpus": corpus,
                "texts": len(texts),
                "python_identical": sum(a == b for a, b in zip(expected, python)),
                "fast_identical": sum(a == b for a, b in zip(expected, fast_path)),
                "seconds": time.perf_counter() - start,
            })
            row = rows[-1]
            print(f"identity {vocab} {corpus}: python {row['python_identical']}, fast {row['fast_identical']} of {row['texts']}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=2048)
    parser.add_argument("--no_check", action="store_true", help="skip the identity check on every text")
    args = parser.parse_args()
    corpora = load_corpora(data_dir())
    rows = [row for name in WORKLOADS for row in speed(name, args.rounds, args.batch_size, corpora)]
    print_table(rows, list(rows[0]))
    payload = {"rounds": args.rounds, "batch_size": args.batch_size, "load_average": os.getloadavg(), "speed": rows}
    if not args.no_check:
        payload["identity"] = identity(corpora)
        print_table(payload["identity"], list(payload["identity"][0]))
        all_identical = all(r["python_identical"] == r["fast_identical"] == r["texts"] for r in payload["identity"])
        print("identity:", "every text identical" if all_identical else "MISMATCHES (see the table)")
    print("wrote", write_json("tokenizer", payload))


if __name__ == "__main__":
    main()
