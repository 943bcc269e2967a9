"""Fine-tunes BERT for named-entity recognition: CoNLL-2003 (IOB1/IOB2) or Chinese BIO.

    python run_ner.py --task=conll2003 --data_dir=conll2003 --init_checkpoint=BERT_DIR \
        --nodo_lower_case --do_train --do_eval --do_predict --output_dir=/tmp/ner

See `python run_ner.py --help` and `fine_tune/cli.py`.
"""

import sys

from fine_tune.cli import ner_main

if __name__ == "__main__":
    sys.exit(ner_main())
