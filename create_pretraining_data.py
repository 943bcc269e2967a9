"""Creates masked-LM / next-sentence TFRecords for BERT pre-training, with the original's flags.

    python create_pretraining_data.py --input_file='corpus/*.txt' \
        --output_file=out/train.tfrecord --vocab_file=vocab.txt --num_workers=8

See `python create_pretraining_data.py --help` and `data_prep/create_pretraining_data.py`.
"""

import sys

from data_prep.create_pretraining_data import main

if __name__ == "__main__":
    sys.exit(main())
