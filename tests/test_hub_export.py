"""`bert_tf.hub_export`: our encoder and preprocessing, loaded as TF Hub BERT users load Model Garden's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import BertConfig, BertEncoder
from bert_tf.hub_export import export_encoder, export_preprocessing
from bert_tf.preprocessing import BertPreprocessor
from tests.conftest import require_module, shared_file

TEXT_A = ["The cat sat on the mat.", "Héllo wörld", "", "a b c " * 40]
TEXT_B = ["It was a sunny day!", "中文", "x", "short"]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    require_module("tensorflow_hub", "the TF Hub export is loaded through hub.KerasLayer")
    root = tmp_path_factory.mktemp("hub")
    vocab = str(shared_file("vocab/google_uncased_en_vocab.txt"))
    encoder = BertEncoder(BertConfig.from_preset("tiny", vocab_size=30522))
    export_preprocessing(str(root / "preprocess"), vocab, do_lower_case=True, seq_length=32)
    export_encoder(str(root / "encoder"), encoder)
    return root, encoder, BertPreprocessor(vocab, seq_length=32)


def hub():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tensorflow_hub imports the deprecated pkg_resources
        import tensorflow_hub
    return tensorflow_hub


def test_preprocess_and_encode_through_hub_keras_layers(exports):
    root, encoder, preprocessor = exports
    preprocess = hub().load(str(root / "preprocess"))
    tokenize = hub().KerasLayer(preprocess.tokenize)
    pack = hub().KerasLayer(preprocess.bert_pack_inputs, arguments=dict(seq_length=24))
    inputs = pack([tokenize(tf.constant(TEXT_A)), tokenize(tf.constant(TEXT_B))])
    ours = preprocessor.pack([preprocessor.tokenize(tf.constant(t)) for t in (TEXT_A, TEXT_B)], seq_length=24)
    assert sorted(inputs) == sorted(ours)
    for name, value in ours.items():
        assert inputs[name].dtype == tf.int32 and inputs[name].shape == (4, 24)
        np.testing.assert_array_equal(inputs[name].numpy(), value.numpy(), err_msg=name)

    outputs = hub().KerasLayer(str(root / "encoder"), trainable=True)(inputs)
    expected = encoder(ours, training=False)
    for name in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(outputs[name].numpy(), np.asarray(expected[name]), atol=1e-5, err_msg=name)
    np.testing.assert_allclose(outputs["default"].numpy(), np.asarray(expected["pooled_output"]), atol=1e-5)
    assert len(outputs["encoder_outputs"]) == len(expected["encoder_outputs"])
    for got, want in zip(outputs["encoder_outputs"], expected["encoder_outputs"]):
        np.testing.assert_allclose(got.numpy(), np.asarray(want), atol=1e-5)


def test_the_preprocessing_default_call_and_special_tokens(exports):
    root, _, preprocessor = exports
    inputs = hub().KerasLayer(str(root / "preprocess"))(tf.constant(TEXT_A))
    for name, value in preprocessor(tf.constant(TEXT_A)).items():
        assert inputs[name].shape == (4, 32)
        np.testing.assert_array_equal(inputs[name].numpy(), value.numpy(), err_msg=name)
    preprocess = hub().load(str(root / "preprocess"))
    special = {k: int(v) for k, v in preprocess.tokenize.get_special_tokens_dict().items()}
    assert special == {"vocab_size": 30522, "start_of_sequence_id": 101, "end_of_segment_id": 102,
                       "padding_id": 0, "mask_id": 103}
    # One segment of ragged rank 1 (already merged words) packs too.
    tokens = preprocess.tokenize(tf.constant(TEXT_B)).merge_dims(1, 2)
    packed = preprocess.bert_pack_inputs([tokens], seq_length=16)
    np.testing.assert_array_equal(packed["input_word_ids"].numpy(),
                                  preprocessor.pack([tokens], seq_length=16)["input_word_ids"].numpy())
