"""Command-line tools for BERT checkpoints; see `checkpoints.convert`."""
