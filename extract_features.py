"""The original's `extract_features.py`: see `bert_tf.extract_features` (`bert-extract-features`)."""

import sys

from bert_tf.extract_features import main

if __name__ == "__main__":
    sys.exit(main())
