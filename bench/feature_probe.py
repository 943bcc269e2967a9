"""Linear probe: how much of a classification task the frozen features of each checkpoint carry.

The question behind it (issue 16): when one pre-trained checkpoint fine-tunes a task worse
than another (en13: RTE from ours 51.6 against HF's 53.7 over six seeds), is the difference
in what the encoder has learned, or in how fine-tuning moves from it? A logistic regression
on frozen sentence vectors sees only the first. Each checkpoint's vectors come from
`extract_features.py` (the user's path; `--pooling`, `--layers`), the regularisation is
chosen by 5-fold cross-validation on the training set, and the dev set is scored once.
`--checkpoint random` (or `name=random`) probes a randomly initialised encoder of `--bert_config_file` (seed
`--seed`): what fine-tuning from random initialisation starts from.

    python bench/feature_probe.py --task rte --data_dir ../shared/data/glue/RTE \
        --checkpoint ours=W/ours/phase2 --checkpoint hf=W/hf/model \
        --bert_config_file W/pretrain_config.json --vocab_file W/vocab.txt

Any sentence or pair task of `run_classifier.py` (e.g. `--task chnsenticorp` with
Google's Chinese vocabulary). Writes bench/results/feature_probe_<task>.json.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from bench.common import print_table, write_json  # noqa: E402
from bench.pretrain_transfer import run_tool  # noqa: E402

REGULARISATION = (0.001, 0.01, 0.1, 1.0)  # logistic regression's C, chosen by cross-validation


# === Data ===
def pairs(task: str, data_dir: str, split: str) -> tuple[list[str], list[str]]:
    """The split's examples as `extract_features.py` input lines (`a ||| b`) and their labels,
    read by the task's own reader (the rows `run_classifier.py` trains on)."""
    from fine_tune.glue import GlueConfig
    from fine_tune.registry import build_task

    examples = build_task(GlueConfig(task=task, data_dir=data_dir)).reader.read(data_dir, split)[0].examples
    lines = [e.text_a if e.text_b is None else f"{e.text_a} ||| {e.text_b}" for e in examples]
    return [line.replace("\n", " ") for line in lines], [e.label for e in examples]


def random_checkpoint(folder: pathlib.Path, args) -> str:
    """A randomly initialised encoder of `--bert_config_file`, written where
    `extract_features.py` reads checkpoints."""
    import keras

    from bert_tf import BertConfig, BertEncoder, checkpoints

    keras.utils.set_random_seed(args.seed)
    encoder = BertEncoder(BertConfig.from_json_file(args.bert_config_file))
    return checkpoints.save(encoder, folder, "tf1")


def features(checkpoint: str, source: pathlib.Path, output: pathlib.Path, pooling: str, args) -> np.ndarray:
    """One vector per line of `source` from `extract_features.py`."""
    run_tool("extract_features.py", f"--input_file={source}", f"--output_file={output}",
             f"--init_checkpoint={checkpoint}", f"--bert_config_file={args.bert_config_file}",
             f"--vocab_file={args.vocab_file}", "--do_lower_case", f"--max_seq_length={args.max_seq_length}",
             f"--layers={args.layers}", f"--pooling={pooling}", "--output_format=npy")  # fmt: skip
    return np.load(output)


# === Probe ===
def probe(train: np.ndarray, train_labels: list[str], dev: np.ndarray, dev_labels: list[str]) -> dict:
    """Cross-validated C, its cross-validation accuracy, and the dev accuracy, in points."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    def model(c: float):
        return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=2000))

    validated = {c: cross_val_score(model(c), train, train_labels, cv=5).mean() for c in REGULARISATION}
    best = max(validated, key=validated.get)
    dev_accuracy = model(best).fit(train, train_labels).score(dev, dev_labels)
    return {"C": best, "cross_validation": 100 * validated[best], "dev_accuracy": 100 * dev_accuracy}


def majority(labels: list[str]) -> float:
    """Dev accuracy of always answering the most frequent dev label, in points."""
    return 100 * max(labels.count(label) for label in set(labels)) / len(labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, help="A classification task (run_classifier.py's --task).")
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--checkpoint", action="append", required=True,
                        help="name=path, once per checkpoint; 'random' (or name=random) for a randomly initialised encoder.")
    parser.add_argument("--seed", type=int, default=12345, help="The random encoder's initialisation.")
    parser.add_argument("--bert_config_file", required=True)
    parser.add_argument("--vocab_file", required=True)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--max_train_examples", type=int, default=0, help="The first N training rows (0: all).")
    parser.add_argument("--layers", default="-1")
    parser.add_argument("--pooling", default="cls,mean", help="Comma-separated: cls, mean.")
    args = parser.parse_args()
    paths = dict(item.split("=", 1) if "=" in item else (item, item) for item in args.checkpoint)
    labels = {}
    rows = []
    with tempfile.TemporaryDirectory() as temporary:
        folder = pathlib.Path(temporary)
        for split in ("train", "dev"):  # written once, read for every checkpoint and pooling
            lines, labels[split] = pairs(args.task, args.data_dir, split)
            if split == "train" and args.max_train_examples:
                lines, labels[split] = lines[: args.max_train_examples], labels[split][: args.max_train_examples]
            (folder / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        for name, path in paths.items():
            if path == "random":
                path = random_checkpoint(folder / f"{name}-checkpoint", args)
            for pooling in args.pooling.split(","):
                train, dev = (features(path, folder / f"{split}.txt", folder / f"{name}-{split}-{pooling}.npy",
                                       pooling, args) for split in ("train", "dev"))  # fmt: skip
                rows.append({"checkpoint": name, "pooling": pooling, **probe(train, labels["train"], dev, labels["dev"])})
    print(f"{args.task}: linear probe on frozen features of layers {args.layers} (dev majority class "
          f"{majority(labels['dev']):.1f}; {len(labels['train'])} training, {len(labels['dev'])} dev rows)")
    print_table(rows, ["checkpoint", "pooling", "C", "cross_validation", "dev_accuracy"])
    path = write_json(f"feature_probe_{args.task}", {"args": vars(args), "dev_majority": majority(labels["dev"]), "probes": rows})
    print("wrote", path)


if __name__ == "__main__":
    main()
