"""Fine-tunes BERT on a sentence(-pair) task: every GLUE task, XNLI, or your own TSV files.

    python run_classifier.py --task=MRPC --data_dir=glue_data/MRPC --init_checkpoint=BERT_DIR \
        --do_train --do_eval --do_predict --output_dir=/tmp/mrpc

The flags of the original `run_classifier.py` (`--task_name` works too); see
`python run_classifier.py --help` and `fine_tune/cli.py`.
"""

import sys

from fine_tune.cli import classifier_main

if __name__ == "__main__":
    sys.exit(classifier_main())
