"""BertEncoder / BertPretrainer against an independent NumPy BERT (tests/numpy_bert.py)."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
from keras import ops

from bert_tf import BertConfig, BertEncoder, BertPretrainer
from tests import numpy_bert

CONFIG = BertConfig.from_preset("tiny", vocab_size=97, num_hidden_layers=3, max_position_embeddings=40)


def random_tf1_weights(config: BertConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights under the original TF1 names, large enough to exercise every op."""
    rng = np.random.default_rng(seed)
    h, f, v = config.hidden_size, config.intermediate_size, config.vocab_size
    shapes = {
        "bert/embeddings/word_embeddings": (v, h),
        "bert/embeddings/token_type_embeddings": (config.type_vocab_size, h),
        "bert/embeddings/position_embeddings": (config.max_position_embeddings, h),
        "bert/embeddings/LayerNorm/gamma": (h,),
        "bert/embeddings/LayerNorm/beta": (h,),
        "bert/pooler/dense/kernel": (h, h),
        "bert/pooler/dense/bias": (h,),
        "cls/predictions/transform/dense/kernel": (h, h),
        "cls/predictions/transform/dense/bias": (h,),
        "cls/predictions/transform/LayerNorm/gamma": (h,),
        "cls/predictions/transform/LayerNorm/beta": (h,),
        "cls/predictions/output_bias": (v,),
        "cls/seq_relationship/output_weights": (2, h),
        "cls/seq_relationship/output_bias": (2,),
    }
    for i in range(config.num_hidden_layers):
        p = f"bert/encoder/layer_{i}/"
        for name in ("query", "key", "value"):
            shapes[p + f"attention/self/{name}/kernel"] = (h, h)
            shapes[p + f"attention/self/{name}/bias"] = (h,)
        shapes.update({
            p + "attention/output/dense/kernel": (h, h),
            p + "attention/output/dense/bias": (h,),
            p + "attention/output/LayerNorm/gamma": (h,),
            p + "attention/output/LayerNorm/beta": (h,),
            p + "intermediate/dense/kernel": (h, f),
            p + "intermediate/dense/bias": (f,),
            p + "output/dense/kernel": (f, h),
            p + "output/dense/bias": (h,),
            p + "output/LayerNorm/gamma": (h,),
            p + "output/LayerNorm/beta": (h,),
        })
    weights = {name: rng.normal(0.0, 0.1, shape).astype("float32") for name, shape in shapes.items()}
    for name in weights:
        if name.endswith("gamma"):
            weights[name] += 1.0
    return weights


def assign(pretrainer: BertPretrainer, w: dict[str, np.ndarray]) -> None:
    """Sets our variables from TF1-named arrays (written here, independently of bert_tf.checkpoints)."""
    enc = pretrainer.encoder
    pairs = [
        (enc.word_embeddings.embeddings, "bert/embeddings/word_embeddings"),
        (enc.token_type_embeddings.embeddings, "bert/embeddings/token_type_embeddings"),
        (enc.position_embeddings.embeddings, "bert/embeddings/position_embeddings"),
        (enc.embeddings_layer_norm.gamma, "bert/embeddings/LayerNorm/gamma"),
        (enc.embeddings_layer_norm.beta, "bert/embeddings/LayerNorm/beta"),
        (enc.pooler_dense.kernel, "bert/pooler/dense/kernel"),
        (enc.pooler_dense.bias, "bert/pooler/dense/bias"),
        (pretrainer.mlm_dense.kernel, "cls/predictions/transform/dense/kernel"),
        (pretrainer.mlm_dense.bias, "cls/predictions/transform/dense/bias"),
        (pretrainer.mlm_layer_norm.gamma, "cls/predictions/transform/LayerNorm/gamma"),
        (pretrainer.mlm_layer_norm.beta, "cls/predictions/transform/LayerNorm/beta"),
        (pretrainer.mlm_output_bias.bias, "cls/predictions/output_bias"),
        (pretrainer.nsp_dense.bias, "cls/seq_relationship/output_bias"),
    ]
    for i, block in enumerate(enc.transformer_layers):
        p = f"bert/encoder/layer_{i}/"
        for layer, name in (
            (block.query, "attention/self/query"),
            (block.key, "attention/self/key"),
            (block.value, "attention/self/value"),
            (block.attention_output, "attention/output/dense"),
            (block.intermediate, "intermediate/dense"),
            (block.output_dense, "output/dense"),
        ):
            pairs += [(layer.kernel, p + name + "/kernel"), (layer.bias, p + name + "/bias")]
        for layer, name in ((block.attention_layer_norm, "attention/output"), (block.output_layer_norm, "output")):
            pairs += [(layer.gamma, p + name + "/LayerNorm/gamma"), (layer.beta, p + name + "/LayerNorm/beta")]
    for variable, name in pairs:
        variable.assign(w[name])
    pretrainer.nsp_dense.kernel.assign(w["cls/seq_relationship/output_weights"].T)


def padded_batch(seed: int = 1, batch: int = 3, length: int = 17):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, CONFIG.vocab_size, (batch, length)).astype("int32")
    lengths = np.array([length, 9, 4][:batch])
    mask = (np.arange(length)[None] < lengths[:, None]).astype("int32")
    types = (np.arange(length)[None] >= lengths[:, None] // 2).astype("int32") * mask
    ids = ids * mask
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


def build(act: str = "gelu", dtype=None) -> tuple[BertPretrainer, dict]:
    config = BertConfig(**{**CONFIG.to_dict(), "hidden_act": act})
    pretrainer = BertPretrainer(BertEncoder(config, dtype=dtype))
    weights = random_tf1_weights(config)
    assign(pretrainer, weights)
    return pretrainer, weights


@pytest.mark.parametrize("act,reference", [("gelu", numpy_bert.gelu_tanh), ("gelu_exact", numpy_bert.gelu_erf)])
def test_encoder_matches_numpy_reference(act, reference):
    pretrainer, weights = build(act)
    batch = padded_batch()
    ours = pretrainer.encoder(batch)
    ref = numpy_bert.encoder_forward(
        weights, batch["input_word_ids"], batch["input_mask"], batch["input_type_ids"], CONFIG.num_attention_heads, reference
    )
    np.testing.assert_allclose(np.asarray(ours["sequence_output"]), ref["sequence_output"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(ours["pooled_output"]), ref["pooled_output"], atol=1e-5, rtol=0)
    assert len(ours["encoder_outputs"]) == CONFIG.num_hidden_layers
    for layer_ours, layer_ref in zip(ours["encoder_outputs"], ref["encoder_outputs"]):
        np.testing.assert_allclose(np.asarray(layer_ours), layer_ref, atol=1e-5, rtol=0)


def test_activations_differ_so_the_choice_matters():
    tanh_model, _ = build("gelu")
    erf_model, _ = build("gelu_exact")
    batch = padded_batch()
    gap = np.abs(np.asarray(tanh_model.encoder(batch)["sequence_output"]) - np.asarray(erf_model.encoder(batch)["sequence_output"]))
    assert gap.max() > 1e-4


def test_pretraining_heads_match_numpy_reference():
    pretrainer, weights = build()
    batch = padded_batch()
    positions = np.array([[1, 5, 16], [0, 3, 8], [1, 2, 0]], dtype="int32")
    ours = pretrainer({**batch, "masked_lm_positions": positions})
    enc = numpy_bert.encoder_forward(
        weights, batch["input_word_ids"], batch["input_mask"], batch["input_type_ids"], 2, numpy_bert.gelu_tanh
    )
    ref = numpy_bert.pretraining_heads(weights, enc["sequence_output"], enc["pooled_output"], positions, numpy_bert.gelu_tanh)
    np.testing.assert_allclose(np.asarray(ours["masked_lm_logits"]), ref["masked_lm_logits"], atol=2e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(ours["next_sentence_logits"]), ref["next_sentence_logits"], atol=1e-5, rtol=0)


def test_decoder_is_tied_to_word_embeddings():
    pretrainer, _ = build()
    embedding_ids = {id(v) for v in pretrainer.encoder.word_embeddings.weights}
    assert len([w for w in pretrainer.weights if id(w) in embedding_ids]) == 1
    # One word-embedding matrix, the MLM output bias of size V, and nothing else of size V.
    vocab_sized = [w.path for w in pretrainer.weights if CONFIG.vocab_size in tuple(w.shape)]
    assert sorted(vocab_sized) == ["mlm_output_bias/bias", "word_embeddings/embeddings"]


def test_padding_does_not_leak_into_real_positions():
    pretrainer, _ = build()
    batch = padded_batch()
    changed = dict(batch, input_word_ids=np.where(batch["input_mask"] == 1, batch["input_word_ids"], 5))
    a = np.asarray(pretrainer.encoder(batch)["sequence_output"])
    b = np.asarray(pretrainer.encoder(changed)["sequence_output"])
    real = batch["input_mask"].astype(bool)
    np.testing.assert_allclose(a[real], b[real], atol=1e-6)


def test_dropout_only_in_training():
    pretrainer, _ = build()
    batch = padded_batch()
    eval_a = np.asarray(pretrainer.encoder(batch, training=False)["sequence_output"])
    eval_b = np.asarray(pretrainer.encoder(batch)["sequence_output"])
    train = np.asarray(pretrainer.encoder(batch, training=True)["sequence_output"])
    np.testing.assert_array_equal(eval_a, eval_b)
    assert np.abs(train - eval_a).max() > 1e-3


def test_too_long_input_is_a_clear_error():
    encoder = BertEncoder(CONFIG)
    ones = np.ones((1, CONFIG.max_position_embeddings + 1), "int32")
    with pytest.raises(ValueError, match=r"41 tokens .* max_position_embeddings=40"):
        encoder({"input_word_ids": ones, "input_mask": ones, "input_type_ids": 0 * ones})


@pytest.mark.parametrize("policy,tolerance", [("mixed_bfloat16", 0.15), ("mixed_float16", 0.02)])
def test_mixed_precision_keeps_layer_norm_and_softmax_in_float32(policy, tolerance):
    full, weights = build()
    mixed, _ = build(dtype=policy)
    batch = padded_batch()
    block = mixed.encoder.transformer_layers[0]
    assert block.query.compute_dtype == policy.split("_")[1]
    assert block.query.kernel.dtype == "float32"  # variables stay float32
    assert block.attention_layer_norm.compute_dtype == "float32"
    out = mixed({**batch, "masked_lm_positions": np.zeros((3, 2), "int32")})
    assert out["masked_lm_logits"].dtype == "float32"
    assert mixed.encoder(batch)["sequence_output"].dtype == "float32"  # a LayerNorm output
    gap = np.abs(np.asarray(mixed.encoder(batch)["sequence_output"]) - np.asarray(full.encoder(batch)["sequence_output"]))
    assert gap.max() < tolerance
    assert np.isfinite(np.asarray(out["masked_lm_logits"])).all()


def test_exact_gelu_under_bfloat16_is_the_float32_gelu_rounded_once():
    """A bf16 model's erf GELU runs in float32 (`layers.exact_gelu`): the output is the float64 GELU of the
    bf16 input, rounded to bf16 (within half a bf16 step), which the GELU computed in bf16 is not."""
    from scipy.special import erf

    from bert_tf.layers import activation

    x = ops.convert_to_tensor(np.linspace(-6, 6, 4001, dtype=np.float32), dtype="bfloat16")
    inputs = ops.convert_to_numpy(ops.cast(x, "float32")).astype(np.float64)
    truth = inputs * 0.5 * (1 + erf(inputs / np.sqrt(2)))
    y = activation("gelu_exact")(x)
    assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(truth), 1e-30))) - 7)
    ours = np.abs(ops.convert_to_numpy(ops.cast(y, "float32")) - truth)
    assert np.all(ours <= ulp / 2 + 1e-12)
    in_bf16 = np.abs(ops.convert_to_numpy(ops.cast(keras.activations.gelu(x, approximate=False), "float32")) - truth)
    assert np.sum(in_bf16 > ulp / 2 + 1e-12) > 100


def test_config_round_trip_and_keras_file(tmp_path):
    pretrainer, _ = build("gelu_exact")
    batch = padded_batch()
    rebuilt = BertEncoder.from_config(pretrainer.encoder.get_config())
    assert rebuilt.bert_config == pretrainer.encoder.bert_config
    pretrainer.encoder.save(tmp_path / "encoder.keras")
    loaded = keras.saving.load_model(tmp_path / "encoder.keras")
    assert isinstance(loaded, BertEncoder) and loaded.bert_config.hidden_act == "gelu_exact"
    np.testing.assert_array_equal(
        np.asarray(loaded(batch)["sequence_output"]), np.asarray(pretrainer.encoder(batch)["sequence_output"])
    )
    pretrainer.save(tmp_path / "pretrainer.keras")
    loaded_pt = keras.saving.load_model(tmp_path / "pretrainer.keras")
    inputs = {**batch, "masked_lm_positions": np.ones((3, 2), "int32")}
    np.testing.assert_array_equal(
        np.asarray(loaded_pt(inputs)["masked_lm_logits"]), np.asarray(pretrainer(inputs)["masked_lm_logits"])
    )


def test_parameter_count_of_bert_base_matches_transformers():
    encoder = BertEncoder(BertConfig.from_preset("base"))
    ours = encoder.count_params()
    transformers = pytest.importorskip("transformers", reason="transformers is the reference for the count")
    hf = transformers.BertModel(transformers.BertConfig(**BertConfig.from_preset("base").to_hf_dict()))
    assert ours == sum(p.numel() for p in hf.parameters()) == 109_482_240


JAX_SCRIPT = r"""
import json, sys
import numpy as np
import keras
assert keras.backend.backend() == "jax", keras.backend.backend()
from bert_tf import BertConfig, BertEncoder
args = json.loads(sys.argv[1])
arrays = np.load(args["weights"])
encoder = BertEncoder(BertConfig(**args["config"]))
encoder.set_weights([arrays[f"w{i}"] for i in range(len(arrays.files))])
batch = {k: np.asarray(v, "int32") for k, v in args["batch"].items()}
out = encoder(batch)
np.savez(args["output"], sequence=np.asarray(out["sequence_output"]), pooled=np.asarray(out["pooled_output"]))
"""


def test_jax_backend_gives_the_same_outputs(tmp_path, project):
    pytest.importorskip("jax", reason="the JAX backend needs jax installed")
    pretrainer, _ = build()
    encoder = pretrainer.encoder
    batch = padded_batch()
    np.savez(tmp_path / "w.npz", **{f"w{i}": w for i, w in enumerate(encoder.get_weights())})
    args = {
        "weights": str(tmp_path / "w.npz"),
        "output": str(tmp_path / "out.npz"),
        "config": encoder.bert_config.to_dict(),
        "batch": {k: v.tolist() for k, v in batch.items()},
    }
    env = {"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    project.run("-c", JAX_SCRIPT, json.dumps(args), env=env, check=True, capture_output=False)
    jax_out = np.load(tmp_path / "out.npz")
    tf_out = encoder(batch)
    np.testing.assert_allclose(jax_out["sequence"], np.asarray(tf_out["sequence_output"]), atol=1e-5, rtol=0)
    np.testing.assert_allclose(jax_out["pooled"], np.asarray(tf_out["pooled_output"]), atol=1e-5, rtol=0)
