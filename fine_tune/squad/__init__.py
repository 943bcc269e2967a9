"""SQuAD v1.1 / v2.0 on the fine-tuning core (`run_squad.py`).

- `reader`: SQuAD JSON -> examples (contexts cut into words, answers aligned);
- `features`: examples -> windows of `[CLS] question [SEP] context [SEP]` with targets;
- `head`: the start/end span head and its loss;
- `postprocess`: logits -> n-best answer texts, predictions files;
- `evaluate`: exact match / F1 as the official v1.1 and v2.0 scripts;
- `task`: the task registered with `fine_tune.registry`, and the command line.
"""
