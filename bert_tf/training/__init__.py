"""BERT pre-training with `tf.distribute`: the loop behind `run_pretraining.py`, and the
run core it shares with fine-tuning.

TensorFlow-only (strategies, `tf.data`, checkpoints), kept apart from the model
modules, which stay pure Keras 3.

- `distribution`: strategies by name (`one_device`, `mirrored`,
  `multi_worker_mirrored`, `tpu`) and who is the chief;
- `inputs`: checked input files, sharded per worker, split per replica;
- `steps`: `PretrainingTrainer`, the distributed pre-training train/eval steps
  (gradient accumulation, XLA) and their metrics;
- `update`: `Updater`, one optimiser update across replicas (all-reduce, loss scaling,
  NaN detection, clipping), shared with fine-tuning;
- `runloop`: the run core shared with fine-tuning: the host loop over
  `iterations_per_loop`, checkpoints and resume, TensorBoard, the NaN stop, results
  files, the precision table;
- `options`: `PretrainingOptions`, the flags of `run_pretraining.py`;
- `input_state`: the phase an output dir holds (two-phase pre-training) and each
  worker's input position at each checkpoint;
- `pretraining`: `PretrainingRun` and `run`, the whole job.
"""

from bert_tf.training.distribution import STRATEGIES, create_strategy
from bert_tf.training.options import PretrainingOptions
from bert_tf.training.pretraining import PretrainingRun, run
from bert_tf.training.runloop import PRECISIONS
from bert_tf.training.steps import PretrainingTrainer, StepOptions

__all__ = [
    "PRECISIONS",
    "STRATEGIES",
    "PretrainingOptions",
    "PretrainingRun",
    "PretrainingTrainer",
    "StepOptions",
    "create_strategy",
    "run",
]
