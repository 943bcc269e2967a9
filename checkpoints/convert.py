"""`python -m checkpoints.convert`: the alias of `bert-convert` (`bert_tf.checkpoints.convert`)."""

import sys

from bert_tf.checkpoints.convert import main

if __name__ == "__main__":
    sys.exit(main())
