"""Fine-tuning BERT: one core for every task (paper, Figure 3).

A task is reader + featuriser + head + loss + metrics + prediction writer
(`fine_tune.task.Task`), configured by a typed config (`fine_tune.config`) and
registered by name (`fine_tune.registry`); `fine_tune.trainer` trains any of them,
`fine_tune.batching` pads per batch, `fine_tune.cli` holds the commands
(run_classifier.py, run_ner.py, run_squad.py) and `fine_tune.run(task_config,
run_config)`, the library entry they call. Built-in tasks: `fine_tune.glue` (GLUE,
XNLI, TSV), `fine_tune.tagging` (CoNLL-2003, Chinese BIO) and `fine_tune.squad`.
"""

import bert_tf  # noqa: F401  (first: it quiets TensorFlow's C++ start-up logs before TensorFlow is imported)


def __getattr__(name: str):
    # Imported on first use: `fine_tune.registry` and the task modules are imported by
    # `fine_tune.cli`, which must not be half-initialised when they import this package.
    if name == "run":
        from fine_tune.cli import run

        return run
    raise AttributeError(f"module 'fine_tune' has no attribute {name!r}")
