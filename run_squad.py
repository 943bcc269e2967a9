"""Fine-tunes BERT on SQuAD v1.1 / v2.0 and predicts answer spans, with the original's flags.

    python run_squad.py --init_checkpoint=BERT_DIR --do_train --train_file=train-v1.1.json \
        --do_predict --predict_file=dev-v1.1.json --train_batch_size=32 --learning_rate=3e-5 \
        --num_train_epochs=2 --max_seq_length=384 --doc_stride=128 --output_dir=/tmp/squad

Add `--version_2_with_negative` (and `--null_score_diff_threshold`) for SQuAD 2.0.
Writes predictions.json, nbest_predictions.json (and null_odds.json) to --output_dir
and, when the predict file has answers, the official EM/F1 to test_scores.txt. See
`python run_squad.py --help` and `fine_tune/cli.py`.
"""

import sys

from fine_tune.cli import squad_main

if __name__ == "__main__":
    sys.exit(squad_main())
