"""Ours from HF's exact start: does our pre-training follow HF's run when only the code differs?

`bench/pretrain_transfer.py` pre-trains ours and HF's from different initial weights (ours
a truncated normal, as the original; HF's a normal, std 0.02 each before truncation) on two
shuffles of the same records, and ours computes the original's tanh GELU where HF computes
the erf form (both configs say "gelu"). This runs our trainer (`PretrainingTrainer`, the
update and precision of `run_pretraining.py`) from HF's initial weights (made as the bench
makes them, under `torch.manual_seed(seed + 1)`, read through our importer) on HF's batch
stream (`hf_stream`), with the GELU form chosen, and prints the single-batch loss at every
100th step (HF's log) and the mean of the 100 steps (ours), to set beside HF's curve.

    python -m bench.pretrain_same_start --work_dir /tmp/ptx/en9 --hidden_act gelu_exact --steps 2400

Writes bench/results/pretrain_same_start_<hidden_act>.json.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import tempfile
import time

from bench.common import cpu, print_table, write_json
from bench.pretrain_transfer import PREDICTIONS, Work, hf_model, hf_stream


def hf_initial_weights(work: Work, seed: int, directory: pathlib.Path) -> pathlib.Path:
    """HF's phase-1 initial weights, as `pretrain_hf` draws them, saved for our importer."""
    import torch

    torch.manual_seed(seed + 1)
    hf_model(work).save_pretrained(directory)
    return directory


def our_trainer(work: Work, hidden_act: str, args):
    """`run_pretraining.py`'s model, optimiser and step for phase 1 of `args`' schedule."""
    import keras
    import tensorflow as tf

    from bert_tf import BertConfig, BertEncoder, BertPretrainer
    from bert_tf.optimization import create_optimizer
    from bert_tf.training import PretrainingTrainer, StepOptions
    from bert_tf.training.inputs import BatchPlan
    from bert_tf.training.runloop import dtype_policy, in_precision

    config = BertConfig(**{**json.loads(work.path("pretrain_config.json").read_text()), "hidden_act": hidden_act})
    keras.utils.set_random_seed(args.seed)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        encoder = BertEncoder(config, dtype=dtype_policy(args.mixed_precision))
        model = BertPretrainer(in_precision(encoder, args.mixed_precision), PREDICTIONS[128])
        optimizer = create_optimizer("adamw", args.learning_rate, args.phase1_steps, args.phase1_steps // 10,
                                     bias_correction=True, lr_decay="from_peak")  # fmt: skip
        return strategy, model, PretrainingTrainer(strategy, model, optimizer, StepOptions(BatchPlan(args.batch_size)))


def train_from_hf_start(work: Work, args) -> dict[int, dict[str, float]]:
    """{step: single-batch loss, 100-step mean} every 100 steps, ours from HF's start."""
    from bert_tf import checkpoints

    strategy, model, trainer = our_trainer(work, args.hidden_act, args)
    with tempfile.TemporaryDirectory() as directory, strategy.scope():
        checkpoints.load_into(model, hf_initial_weights(work, args.seed, pathlib.Path(directory)))
    batches = iter(hf_stream(work.path("train128.tfrecord"), args.batch_size, 128, True, args.seed))
    curve, start = {}, time.perf_counter()
    for step in range(0, args.steps, 100):
        others = trainer.train(batches, step, 99)["loss_sum"]
        last = trainer.train(batches, step + 99, 1)["loss_sum"]
        curve[step + 100] = {"single_batch_loss": round(last, 4), "mean_loss": round((others + last) / 100, 4)}
        print(f"step {step + 100}: single batch {last:.4f}, mean of 100 {curve[step + 100]['mean_loss']:.4f}, "
              f"{time.perf_counter() - start:.0f} s", flush=True)  # fmt: skip
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work_dir", required=True, type=pathlib.Path,
                        help="A pretrain_transfer.py work dir with its records (train128.tfrecord) and config.")
    parser.add_argument("--hidden_act", choices=("gelu", "gelu_exact"), default="gelu_exact",
                        help="gelu: the original's tanh form (ours by default); gelu_exact: HF's erf form.")
    parser.add_argument("--steps", type=int, default=2400, help="Steps run (a multiple of 100).")
    # pretrain_transfer.py's settings of the run compared (en9's by default).
    parser.add_argument("--phase1_steps", type=int, default=5000, help="The schedule's length.")
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--learning_rate", type=float, default=2e-3)
    parser.add_argument("--mixed_precision", default="bf16", choices=("none", "bf16"))
    parser.add_argument("--seed", type=int, default=12345)
    args = parser.parse_args()
    if not (args.work_dir / "train128.tfrecord").exists():
        parser.error(f"--work_dir {args.work_dir} has no train128.tfrecord; run bench/pretrain_transfer.py there first.")
    curve = train_from_hf_start(Work(args.work_dir), args)
    print_table([{"step": step, **values} for step, values in curve.items()], ["step", "single_batch_loss", "mean_loss"])
    settings = {key: str(value) if isinstance(value, pathlib.Path) else value for key, value in vars(args).items()}
    path = write_json(f"pretrain_same_start_{args.hidden_act}", {"cpu": cpu(), "args": settings, "curve": curve})
    print(f"Wrote {path}")


if __name__ == "__main__":
    main()
