"""The original BERT optimiser: updates checked against numpy, by hand."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from bert_tf import BertConfig, BertEncoder, BertPretrainer, BertTfError
from bert_tf.optimization import AdamWeightDecay, Lamb, WarmupLinearDecay, create_optimizer
from tests.conftest import require_module

BETA_1, BETA_2, EPSILON, DECAY = 0.9, 0.999, 1e-6, 0.01


def variable(scope: str, name: str, value) -> keras.Variable:
    with keras.name_scope(scope):
        return keras.Variable(np.array(value, "float32"), name=name)


def numpy_adamw(weights, gradient_steps, learning_rates, decayed, clip=1.0):
    """The original AdamWeightDecayOptimizer, written out: clip, moments, no bias correction."""
    weights = [np.array(w, np.float64) for w in weights]
    m = [np.zeros_like(w) for w in weights]
    v = [np.zeros_like(w) for w in weights]
    for grads, lr in zip(gradient_steps, learning_rates):
        grads = [np.array(g, np.float64) for g in grads]
        norm = np.sqrt(sum((g**2).sum() for g in grads))
        if clip is not None and norm > clip:
            grads = [g * clip / norm for g in grads]
        for i, g in enumerate(grads):
            m[i] = BETA_1 * m[i] + (1 - BETA_1) * g
            v[i] = BETA_2 * v[i] + (1 - BETA_2) * g * g
            update = m[i] / (np.sqrt(v[i]) + EPSILON)
            if decayed[i]:
                update += DECAY * weights[i]
            weights[i] = weights[i] - lr * update
    return weights


def test_two_adamw_updates_match_the_hand_computation():
    initial = [[0.5, -1.0, 2.0], [0.3, 0.7], [0.1, -0.2]]
    weights = [
        variable("dense", "kernel", initial[0]),
        variable("attention_layer_norm", "gamma", initial[1]),
        variable("dense", "bias", initial[2]),
    ]
    # Step 1 is clipped (global norm 13 > 1); step 2 is not (norm < 1).
    steps = [
        [np.array([3.0, 4.0, 0.0]), np.array([12.0, 0.0]), np.array([0.0, 0.0])],
        [np.array([0.1, -0.2, 0.05]), np.array([0.01, 0.3]), np.array([-0.4, 0.2])],
    ]
    schedule = WarmupLinearDecay(0.1, num_train_steps=10, num_warmup_steps=0)
    optimizer = AdamWeightDecay(learning_rate=schedule)
    for grads in steps:
        optimizer.apply([g.astype("float32") for g in grads], weights)

    expected = numpy_adamw(initial, steps, [0.1, 0.09], decayed=[True, False, False])
    for got, want in zip(weights, expected):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    # Clipping mattered: without it, step 2 would be another update.
    unclipped = numpy_adamw(initial, steps, [0.1, 0.09], decayed=[True, False, False], clip=None)
    assert not np.allclose(unclipped[0], expected[0], atol=1e-4)


def test_first_update_has_no_bias_correction():
    # m / (sqrt(v) + eps) = 0.1 g / (sqrt(0.001) |g|) = 3.162..., not Adam's bias-corrected 1.
    weight = variable("dense", "bias", [0.0])
    AdamWeightDecay(learning_rate=1.0).apply([np.array([0.5], "float32")], [weight])
    np.testing.assert_allclose(np.asarray(weight), [-0.1 / np.sqrt(0.001)], rtol=1e-4)


def test_bias_corrected_adamw_matches_torch_adamw():
    """`bias_correction=True` is torch's AdamW (decoupled decay on the pre-update weights)."""
    require_module("torch", "torch.optim.AdamW is the reference")
    import torch
    rng = np.random.default_rng(0)
    initial = rng.normal(size=(3, 4)).astype("float32")
    grads = rng.normal(size=(5, 3, 4)).astype("float32")
    kernel = variable("dense", "kernel", initial)
    ours = AdamWeightDecay(learning_rate=0.01, weight_decay_rate=0.1, global_clipnorm=None, bias_correction=True)
    reference = torch.nn.Parameter(torch.tensor(initial))
    theirs = torch.optim.AdamW([reference], lr=0.01, weight_decay=0.1, eps=1e-6)
    for grad in grads:
        ours.apply([grad], [kernel])
        reference.grad = torch.tensor(grad)
        theirs.step()
    np.testing.assert_allclose(np.asarray(kernel), reference.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_learning_rate_warms_up_then_decays_linearly_to_zero():
    schedule = WarmupLinearDecay(1e-4, num_train_steps=100, num_warmup_steps=10)
    steps = [0, 1, 5, 9, 10, 11, 50, 99, 100, 250]
    got = [float(schedule(step)) for step in steps]
    want = [0.0, 1e-5, 5e-5, 9e-5, 9e-5, 8.9e-5, 5e-5, 1e-6, 0.0, 0.0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-12)
    no_warmup = WarmupLinearDecay(2e-5, num_train_steps=4)
    np.testing.assert_allclose([float(no_warmup(s)) for s in range(5)], [2e-5, 1.5e-5, 1e-5, 5e-6, 0.0], rtol=1e-6)


def test_decay_from_peak_is_hf_get_linear_schedule_with_warmup():
    """`decay="from_peak"` gives HF's schedule at every step (the rate of update `step`)."""
    require_module("transformers", "its get_linear_schedule_with_warmup is the reference")
    import torch
    import transformers
    total, warmup, peak = 57, 6, 3e-5
    reference = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=peak)
    schedule = transformers.get_linear_schedule_with_warmup(reference, warmup, total)
    want = []
    for _ in range(total + 3):
        want.append(reference.param_groups[0]["lr"])
        reference.step()
        schedule.step()
    ours = WarmupLinearDecay(peak, num_train_steps=total, num_warmup_steps=warmup, decay="from_peak")
    np.testing.assert_allclose([float(ours(step)) for step in range(total + 3)], want, rtol=1e-5, atol=1e-12)


def test_unknown_learning_rate_decay_is_a_user_error():
    with pytest.raises(BertTfError, match="Unknown learning-rate decay 'cosine'; use one of original, from_peak"):
        create_optimizer("adamw", 1e-4, 10, 1, lr_decay="cosine")


def test_weight_decay_skips_every_layer_norm_and_bias_of_the_model():
    model = BertPretrainer(BertEncoder(BertConfig.from_preset("tiny", vocab_size=100)), 4)
    optimizer = create_optimizer("adamw", 1e-4, 100, 10)
    optimizer.build(model.trainable_variables)
    decayed = {v.path for v in model.trainable_variables if optimizer.decays(v)}
    excluded = {v.path for v in model.trainable_variables} - decayed
    assert all(p.endswith(("/kernel", "/embeddings")) for p in decayed), decayed
    assert all(p.endswith("/bias") or "layer_norm/" in p for p in excluded), excluded
    # 2 layers x (6 biases + 2 LayerNorms) + embeddings LN + pooler, MLM dense, MLM LN, MLM output, NSP biases.
    assert len(excluded) == 2 * (6 + 4) + 2 + 1 + 1 + 2 + 1 + 1
    assert "word_embeddings/embeddings" in decayed


def test_lamb_update_matches_the_hand_computation():
    w0, g = np.array([1.0, -2.0, 2.0]), np.array([0.3, 0.1, -0.2])
    weight = variable("dense", "kernel", w0)
    Lamb(learning_rate=0.01, weight_decay_rate=DECAY).apply([g.astype("float32")], [weight])
    m_hat = (1 - BETA_1) * g / (1 - BETA_1)
    v_hat = (1 - BETA_2) * g * g / (1 - BETA_2)
    update = m_hat / (np.sqrt(v_hat) + EPSILON) + DECAY * w0
    trust = np.linalg.norm(w0) / np.linalg.norm(update)
    np.testing.assert_allclose(np.asarray(weight), w0 - 0.01 * trust * update, rtol=1e-5)


def test_lamb_without_bias_correction_uses_the_raw_moments():
    w0, g = np.array([1.0, -2.0, 2.0]), np.array([0.3, 0.1, -0.2])
    weight = variable("dense", "kernel", w0)
    Lamb(learning_rate=0.01, weight_decay_rate=DECAY, bias_correction=False).apply([g.astype("float32")], [weight])
    update = (1 - BETA_1) * g / (np.sqrt((1 - BETA_2) * g * g) + EPSILON) + DECAY * w0
    trust = np.linalg.norm(w0) / np.linalg.norm(update)
    np.testing.assert_allclose(np.asarray(weight), w0 - 0.01 * trust * update, rtol=1e-5)


def test_unknown_optimizer_is_a_user_error():
    with pytest.raises(BertTfError, match="Unknown optimizer 'sgd'"):
        create_optimizer("sgd", 1e-4, 10, 1)


JAX_SCRIPT = """
import json, numpy as np, keras
from bert_tf.optimization import AdamWeightDecay, WarmupLinearDecay
with keras.name_scope("dense"):
    kernel, bias = keras.Variable(np.array([0.5, -1.0, 2.0], "float32"), name="kernel"), keras.Variable(np.array([0.1, -0.2], "float32"), name="bias")
optimizer = AdamWeightDecay(learning_rate=WarmupLinearDecay(0.1, num_train_steps=10))
for grads in ([[3.0, 4.0, 0.0], [12.0, 0.0]], [[0.1, -0.2, 0.05], [-0.4, 0.2]]):
    optimizer.apply([np.array(g, "float32") for g in grads], [kernel, bias])
print(keras.backend.backend(), json.dumps([np.asarray(kernel).tolist(), np.asarray(bias).tolist()]))
"""


def test_the_optimizer_runs_on_the_jax_backend_too(project):
    require_module("jax", "the JAX backend check")
    result = project.run("-c", JAX_SCRIPT, env={"KERAS_BACKEND": "jax"}, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    backend, values = result.stdout.strip().splitlines()[-1].split(" ", 1)
    steps = [
        [np.array([3.0, 4.0, 0.0]), np.array([12.0, 0.0])],
        [np.array([0.1, -0.2, 0.05]), np.array([-0.4, 0.2])],
    ]
    expected = numpy_adamw([[0.5, -1.0, 2.0], [0.1, -0.2]], steps, [0.1, 0.09], decayed=[True, False])
    assert backend == "jax"
    for got, want in zip(json.loads(values), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
