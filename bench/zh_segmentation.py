"""Chinese whole-word masking: rjieba (jieba-rs) against jieba, the segmenter it replaced.

On all the shared Chinese pre-training text (`pretrain/zh/*` through
`data_prep.prepare_corpus`, text columns only, plus `pretrain/clue_zh_small.txt`):

- segmentation speed (MB/s of UTF-8 text, one line at a time as data generation calls
  it), jieba's `lcut` against rjieba's `cut`, both in jieba's default HMM mode, timed
  round-robin (bench.common), fastest round;
- word-boundary agreement: the character offsets where a word ends, of the two
  segmentations, |both| / |either| over the whole text (lines whose segmentations are
  identical also counted);
- `create_pretraining_data.py` speed (MB/s after start-up, from its --stats_file) on an
  even sample of the documents, default flags: without `--zh_whole_word_mask`, with it
  (this checkout: rjieba), and with it at `--before` (jieba, run from a `git archive`
  of that commit), round-robin, fastest round; with `--rjieba_before REF`, also with it
  at REF (an earlier rjieba path: speed only, its records checked equal to ours).
  Goal: whole-word masking within 1.5x of the plain path;
- masking statistics of each (`--dupe_factor=1`, static masking, and the same run with
  `--dynamic_masking` for the word boundaries, whose instances are the same): the
  fraction of tokens masked, the share of tokens that continue a word, and the
  whole-word share: of the masked tokens in words of two or more tokens, those whose
  whole word is masked (1.0 for ideal whole-word masking; the plain path's figure is
  measured with rjieba's words).

Prints a table and writes bench/results/zh_segmentation.json.

Usage: python bench/zh_segmentation.py [--rounds 2] [--sample_mb 3] [--before 542a3fb] [--rjieba_before REF]
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings
from pathlib import Path

# The repository first (see bench/data_prep.py: this folder would shadow data_prep).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import REPO_ROOT, data_dir, interleaved_times, print_table, write_json  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow reads the records back

GOAL_WWM_SLOWDOWN = 1.5
VOCAB = "vocab/google_zh_vocab.txt"


# === The corpus ===


def chinese_corpus(work: Path) -> Path:
    """All the shared Chinese pre-training text in BERT's layout, in one file."""
    from data_prep.prepare_corpus import InputFormat, prepare, sentence_splitter

    pretrain = data_dir() / "pretrain"
    zh = pretrain / "zh"
    split = sentence_splitter("zh")
    parts = [
        ([zh / "zhwiki_wiki_00"], InputFormat("wikiextractor")),
        ([zh / "thucnews_1000.tsv", zh / "book_review_cls.tsv"], InputFormat("tsv", text_column=1)),
        ([zh / "waimai_10k.csv"], InputFormat("csv", text_column=1, skip_header=True)),
    ]
    texts = []
    for k, (files, source) in enumerate(parts):
        out = work / f"part{k}.txt"
        prepare([str(path) for path in files], str(out), split, source)
        texts.append(out.read_text(encoding="utf-8"))
    texts.append((pretrain / "clue_zh_small.txt").read_text(encoding="utf-8"))
    corpus = work / "zh_corpus.txt"
    corpus.write_text("\n".join(text.strip("\n") + "\n" for text in texts), encoding="utf-8")
    return corpus


def even_sample(corpus: Path, megabytes: float, work: Path) -> Path:
    """Every k-th document of `corpus`, k chosen for about `megabytes` of text."""
    documents = corpus.read_text(encoding="utf-8").split("\n\n")
    step = max(1, round(corpus.stat().st_size / (megabytes * 1e6)))
    sample = work / "zh_sample.txt"
    sample.write_text("\n\n".join(documents[::step]), encoding="utf-8")
    return sample


# === Segmentation ===


def segmenters() -> dict:
    with warnings.catch_warnings():  # jieba imports the deprecated pkg_resources
        warnings.simplefilter("ignore")
        import jieba
    import rjieba

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return {"jieba": jieba.lcut, "rjieba": rjieba.cut}


def boundaries(words: list[str]) -> set[int]:
    ends, offset = set(), 0
    for word in words:
        offset += len(word)
        ends.add(offset)
    return ends


def segmentation(lines: list[str], rounds: int) -> dict:
    cut = segmenters()
    results: dict[str, list[list[str]]] = {}

    def run(name: str):
        def step() -> None:
            results[name] = [cut[name](line) for line in lines]

        return step

    times = interleaved_times({name: run(name) for name in cut}, rounds, warmup=0)
    both = either = same_lines = 0
    for ours, theirs in zip(results["rjieba"], results["jieba"], strict=True):
        a, b = boundaries(ours), boundaries(theirs)
        both += len(a & b)
        either += len(a | b)
        same_lines += ours == theirs
    megabytes = sum(len(line.encode("utf-8")) for line in lines) / 1e6
    return {
        "megabytes": megabytes,
        "lines": len(lines),
        "mb_per_s": {name: megabytes / t["min"] for name, t in times.items()},
        "seconds": times,
        "boundary_agreement": both / either,
        "identical_lines": same_lines / len(lines),
    }


# === Data generation ===


def checkout_at(ref: str, work: Path) -> Path:
    """The tree of commit `ref` (its create_pretraining_data.py and packages), in `work`."""
    archive = subprocess.run(["git", "archive", ref], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    folder = work / f"at-{ref}"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def generate(tree: Path, corpus: Path, output: Path, *extra: str) -> dict:
    """Runs `tree`'s create_pretraining_data.py; returns its --stats_file."""
    stats = output.with_suffix(".json")
    command = [
        sys.executable,
        "create_pretraining_data.py",
        f"--input_file={corpus}",
        f"--output_file={output}",
        f"--vocab_file={data_dir() / VOCAB}",
        f"--stats_file={stats}",
        "--num_workers=1",
        "--overwrite",
        *extra,
    ]
    result = subprocess.run(command, cwd=tree, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr}")
    return json.loads(stats.read_text())


def generation_speed(contenders: dict[str, tuple[Path, tuple[str, ...]]], corpus: Path, rounds: int, work: Path):
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, (tree, extra) in contenders.items():
            seconds[name].append(generate(tree, corpus, work / f"{name}.tfrecord", *extra)["seconds"])
    megabytes = corpus.stat().st_size / 1e6
    return {name: {"mb_per_s": megabytes / min(s), "seconds": s} for name, s in seconds.items()}


def masking_statistics(tree: Path, corpus: Path, work: Path, name: str, words_of: Path, *extra: str) -> dict:
    """Masking figures of `tree`'s static output, with the word boundaries of the
    dynamic whole-word output `words_of` (made from the same instances)."""
    import numpy as np

    import data_prep  # noqa: F401  (before bert_tf: see data_prep/__init__.py)
    from data_prep.analysis import load_examples, undo_masking

    output = work / f"{name}.stats.tfrecord"
    generate(tree, corpus, output, "--dupe_factor=1", *extra)
    static, dynamic = load_examples([str(output)]), load_examples([str(words_of)])
    if not np.array_equal(undo_masking(static), dynamic["input_word_ids"]):
        raise SystemExit(f"{name}: the static and dynamic runs made different instances; no word boundaries.")
    real = static["input_mask"] > 0
    masked = np.zeros_like(real)
    rows = np.broadcast_to(np.arange(len(real))[:, None], static["masked_lm_positions"].shape)
    weights = static["masked_lm_weights"] > 0
    masked[rows[weights], static["masked_lm_positions"][weights]] = True
    continues = (dynamic["word_continuation"] > 0) & real
    # Word number of each token: a new word wherever a token does not continue one.
    word = np.cumsum(~continues, axis=1) + np.arange(len(real))[:, None] * real.shape[1]
    size = np.bincount(word.ravel(), weights=real.ravel())
    whole = np.bincount(word.ravel(), weights=(masked & real).ravel()) == size
    in_long_words = masked & real & (size[word] >= 2)
    return {
        "masked_fraction": float(masked[real].mean()),
        "continuation_share": float(continues[real].mean()),
        "whole_word_share": float(whole[word][in_long_words].mean()),
    }


def data_generation(sample: Path, before: str, rounds: int, work: Path, rjieba_before: str | None = None) -> dict:
    old = checkout_at(before, work)
    wwm = ("--zh_whole_word_mask",)
    contenders = {"plain": (REPO_ROOT, ()), "wwm_rjieba": (REPO_ROOT, wwm), f"wwm_jieba@{before}": (old, wwm)}
    if rjieba_before:  # an earlier rjieba path, for its speed: its records must be ours
        contenders[f"wwm_rjieba@{rjieba_before}"] = (checkout_at(rjieba_before, work), wwm)
    speed = generation_speed(contenders, sample, rounds, work)
    if rjieba_before and (work / "wwm_rjieba.tfrecord").read_bytes() != (
        work / f"wwm_rjieba@{rjieba_before}.tfrecord"
    ).read_bytes():
        raise SystemExit(f"--rjieba_before {rjieba_before} wrote other records than this checkout.")
    words = {}
    for tree, name in [(REPO_ROOT, "rjieba"), (old, "jieba")]:
        words[name] = work / f"words_{name}.tfrecord"
        generate(tree, sample, words[name], "--dupe_factor=1", "--dynamic_masking", *wwm)
    masking = {
        "plain": masking_statistics(REPO_ROOT, sample, work, "plain", words["rjieba"]),
        "wwm_rjieba": masking_statistics(REPO_ROOT, sample, work, "wwm_rjieba", words["rjieba"], *wwm),
        f"wwm_jieba@{before}": masking_statistics(old, sample, work, "wwm_jieba", words["jieba"], *wwm),
    }
    return {"megabytes": sample.stat().st_size / 1e6, "speed": speed, "masking": masking}


# === Report ===


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sample_mb", type=float, default=3.0, help="text for the data generation runs")
    parser.add_argument("--before", default="542a3fb", help="a commit whose --zh_whole_word_mask uses jieba")
    parser.add_argument("--rjieba_before", default=None, help="an earlier commit with rjieba, timed beside (speed only)")
    args = parser.parse_args()
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        corpus = chinese_corpus(work)
        lines = [line for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
        segmented = segmentation(lines, args.rounds)
        generated = data_generation(even_sample(corpus, args.sample_mb, work), args.before, args.rounds, work,
                                    args.rjieba_before)
    speed = generated["speed"]
    slowdown = speed["plain"]["mb_per_s"] / speed["wwm_rjieba"]["mb_per_s"]
    rows = [
        {"measure": f"segmentation MB/s ({segmented['megabytes']:.1f} MB)", **segmented["mb_per_s"]},
        {"measure": "word boundaries equal", "rjieba": segmented["boundary_agreement"]},
        {"measure": "lines segmented identically", "rjieba": segmented["identical_lines"]},
    ]
    print_table(rows, ["measure", "jieba", "rjieba"])
    print()
    table = [
        {"create_pretraining_data": name, "MB/s": figures["mb_per_s"], **generated["masking"].get(name, {})}
        for name, figures in speed.items()
    ]
    print_table(table, ["create_pretraining_data", "MB/s", "masked_fraction", "continuation_share", "whole_word_share"])
    print(f"\nwhole-word masking {slowdown:.2f}x slower than the plain path (goal <= {GOAL_WWM_SLOWDOWN}x)")
    path = write_json(
        "zh_segmentation",
        {
            "corpus": "pretrain/zh/* (prepare_corpus, text columns) + pretrain/clue_zh_small.txt",
            "segmentation": segmented,
            "data_generation": generated,
            "wwm_slowdown": slowdown,
            "goal_wwm_slowdown": GOAL_WWM_SLOWDOWN,
            "meets_goal": slowdown <= GOAL_WWM_SLOWDOWN,
            "wall_s": time.monotonic() - start,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
