"""BERT pre-training with `tf.distribute`: the loop behind `run_pretraining.py`.

TensorFlow-only (strategies, `tf.data`, checkpoints), kept apart from the model
modules, which stay pure Keras 3.

- `distribution`: strategies by name (`one_device`, `mirrored`,
  `multi_worker_mirrored`, `tpu`) and who is the chief;
- `inputs`: checked input files, sharded per worker, split per replica;
- `steps`: `Trainer`, the distributed train/eval steps (gradient accumulation, XLA);
- `update`: `Updater`, one optimiser update across replicas (all-reduce, loss scaling,
  NaN detection, clipping), shared with fine-tuning;
- `pretraining`: `PretrainingOptions` and `run`, the whole job (checkpoints, resume,
  TensorBoard, `eval_results.txt`).
"""

from bert_tf.training.distribution import STRATEGIES, create_strategy
from bert_tf.training.pretraining import PRECISIONS, PretrainingOptions, PretrainingRun, run
from bert_tf.training.steps import StepOptions, Trainer

__all__ = [
    "PRECISIONS",
    "STRATEGIES",
    "PretrainingOptions",
    "PretrainingRun",
    "StepOptions",
    "Trainer",
    "create_strategy",
    "run",
]
