"""Pre-trains BERT (masked LM + next sentence) on the TFRecords of create_pretraining_data.py.

    python run_pretraining.py --input_file='data/train.tfrecord*' --output_dir=out \\
        --preset=tiny --do_train --do_eval --train_batch_size=32 --num_train_steps=1000

The original's flags; see `python run_pretraining.py --help` and `bert_tf/training/cli.py`.
"""

import sys

from bert_tf.training.cli import main

if __name__ == "__main__":
    sys.exit(main())
