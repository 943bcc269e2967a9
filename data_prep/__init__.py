"""Pre-training data for BERT: corpus preparation, vocabulary, TFRecords and their reader.

- `python create_pretraining_data.py`: the original's tool, streaming and parallel
  (`data_prep.generate`).
- `python -m data_prep.prepare_corpus`: raw text to one sentence a line, blank lines
  between documents.
- `python -m data_prep.build_vocab`: a WordPiece vocabulary in BERT's layout.
- `data_prep.pretraining_dataset.pretraining_dataset`: the `tf.data` reader, with static
  or dynamic masking.

Only the reader imports TensorFlow: data generation runs in a few tens of MB.
"""
