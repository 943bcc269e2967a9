"""Pre-training data for BERT: corpus preparation, vocabulary and the TFRecord writer.

- `python create_pretraining_data.py`: the original's tool, streaming and parallel
  (`data_prep.generate`).
- `python -m data_prep.prepare_corpus`: raw text to one sentence a line, blank lines
  between documents.
- `python -m data_prep.build_vocab`: a WordPiece vocabulary in BERT's layout.

The record schema (feature names, special tokens, masking rates, file formats) and the
`tf.data` reader live in the core, `bert_tf.data`; the writer here imports the schema.
Generation never imports TensorFlow: it runs in a few tens of MB.
"""
