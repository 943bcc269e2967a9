"""Fine-tuning BERT: one core for every task (paper, Figure 3).

A task is reader + featuriser + head + loss + metrics + prediction writer
(`fine_tune.task.Task`), registered by name (`fine_tune.registry`); `fine_tune.trainer`
trains any of them, `fine_tune.batching` pads per batch, `fine_tune.cli` is the command
line of `run_classifier.py` and `run_ner.py`. Built-in tasks: `fine_tune.glue` (GLUE,
XNLI, TSV) and `fine_tune.tagging` (CoNLL-2003, Chinese BIO).
"""
