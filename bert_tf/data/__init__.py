"""Pre-training records: their schema and the `tf.data` reader.

- `schema`: the feature names of both format versions, the special tokens, the
  masking rates and the file formats; pure Python, shared with the writer
  (`data_prep`, which generates the records);
- `reader`: `pretraining_dataset`, the input pipeline of pre-training (static or
  dynamic masking), and `detect_format`/`list_files` for checking files; imports
  TensorFlow.

Nothing is imported here, so `import bert_tf.data.schema` stays light.
"""
