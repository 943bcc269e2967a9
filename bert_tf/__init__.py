"""bert-tf: a faithful BERT (Devlin et al. 2018) in TensorFlow 2 and Keras 3.

The model modules (`layers`, `encoder`, `pretrainer`, `losses`) use `keras.ops` only,
so they also run with `KERAS_BACKEND=jax`; `tokenization` is pure Python; TF-only code
(tf.data, TFRecords, tensorflow-text, checkpoints) lives in its own modules.
"""

from bert_tf.config import PRESETS, BertConfig, BertConfigError
from bert_tf.encoder import BertEncoder
from bert_tf.errors import BertTfError
from bert_tf.pretrainer import BertPretrainer

__all__ = ["PRESETS", "BertConfig", "BertConfigError", "BertEncoder", "BertPretrainer", "BertTfError"]
