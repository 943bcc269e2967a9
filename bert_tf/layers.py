"""The building blocks of `BertEncoder`, in pure Keras 3 (`keras.ops` only).

Every layer here runs unchanged on the TensorFlow and JAX backends. Each keeps the
variable layout of the original TF1 code (kernels [in, out], separate query / key /
value projections) so that checkpoint conversion is a rename, never a reshape.

Mixed precision: under a `mixed_*` policy, matmuls run in the compute dtype while
LayerNorm and the attention softmax run in float32, as in the original TPU code.
"""

from __future__ import annotations

import math

import keras
from keras import ops

# The original adds this to the attention logits of padding positions: large enough
# that exp() underflows to exactly 0 in float32, small enough to be safe in bfloat16.
MASK_ADDER = -10000.0
LAYER_NORM_EPSILON = 1e-12


def activation(name: str):
    """The activation function named in a `BertConfig`."""
    if name == "gelu":  # the original TF code's tanh approximation
        return lambda x: keras.activations.gelu(x, approximate=True)
    if name == "gelu_exact":  # erf form, HuggingFace's "gelu"
        return exact_gelu
    return keras.activations.get(name)


def exact_gelu(x):
    """x * Phi(x) with erf; a bfloat16 input is computed in float32 and cast back.

    erf in bfloat16 is slow on CPUs and coarse (every step of its polynomial rounded to
    8 significant bits): on a [4096, 1536] activation here, TF's bf16 GELU took 132 ms
    against 25 ms for this one, whose largest error (0.0078, against float64) is the
    one rounding of its output, where the bf16 one's is 0.0098.

    >>> x = ops.convert_to_tensor([-1.0, 0.5, 2.0], dtype="bfloat16")
    >>> y = exact_gelu(x)
    >>> keras.backend.standardize_dtype(y.dtype), ops.convert_to_numpy(ops.cast(y, "float32")).tolist()
    ('bfloat16', [-0.158203125, 0.345703125, 1.953125])
    """
    if keras.backend.standardize_dtype(x.dtype) != "bfloat16":
        return keras.activations.gelu(x, approximate=False)
    return ops.cast(keras.activations.gelu(ops.cast(x, "float32"), approximate=False), "bfloat16")


def truncated_normal(stddev: float) -> keras.initializers.Initializer:
    return keras.initializers.TruncatedNormal(stddev=stddev)


def layer_norm(name: str) -> keras.layers.LayerNormalization:
    # Always float32: LayerNorm statistics in bfloat16 lose too many bits.
    return keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, dtype="float32", name=name)


# === Embeddings ===
@keras.saving.register_keras_serializable(package="bert_tf")
class TiedEmbedding(keras.layers.Embedding):
    """Word embeddings that also project hidden states back to vocab logits.

    `layer(ids)` looks ids up; `layer(hidden, reverse=True)` returns
    `hidden @ embeddings^T`, which is how BERT's masked-LM decoder shares weights with
    the input embeddings.

    Example:
    >>> import numpy as np
    >>> layer = TiedEmbedding(10, 4)
    >>> tuple(layer(np.array([[1, 2]])).shape)
    (1, 2, 4)
    >>> tuple(layer(np.zeros((1, 2, 4)), reverse=True).shape)
    (1, 2, 10)
    """

    #: The dtype of the reverse projection's matmul (None: the compute dtype), as
    #: `PositionwiseDense.matmul_dtype`; set by `compute_projections_in`.
    matmul_dtype: str | None = None

    def call(self, inputs, reverse: bool = False):
        if not reverse:
            return super().call(inputs)
        dtype = self.matmul_dtype or self.compute_dtype
        kernel = ops.cast(self.embeddings, dtype)
        return ops.cast(ops.matmul(ops.cast(inputs, dtype), ops.transpose(kernel)), self.compute_dtype)

    def compute_output_spec(self, inputs, reverse: bool = False):
        if reverse:
            return keras.KerasTensor(tuple(inputs.shape[:-1]) + (self.input_dim,), dtype=self.compute_dtype)
        return super().compute_output_spec(inputs)


@keras.saving.register_keras_serializable(package="bert_tf")
class PositionEmbedding(keras.layers.Layer):
    """Learned absolute position embeddings, sliced to the input's length.

    Example:
    >>> import numpy as np
    >>> tuple(PositionEmbedding(16, 4)(np.zeros((2, 3, 4))).shape)
    (2, 3, 4)
    """

    def __init__(self, max_length: int, width: int, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length
        self.width = width
        self.initializer_range = initializer_range

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.max_length, self.width),
            initializer=truncated_normal(self.initializer_range),
        )

    def call(self, inputs):
        length = ops.shape(inputs)[1]
        if isinstance(length, int) and length > self.max_length:
            raise ValueError(
                f"The input has {length} tokens but the model accepts at most "
                f"max_position_embeddings={self.max_length}; truncate it or use a model with more positions."
            )
        positions = ops.slice(ops.cast(self.embeddings, self.compute_dtype), (0, 0), (length, self.width))
        return ops.broadcast_to(positions[None], ops.shape(inputs)[:-1] + (self.width,))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.width,)

    def get_config(self):
        return {
            **super().get_config(),
            "max_length": self.max_length,
            "width": self.width,
            "initializer_range": self.initializer_range,
        }


@keras.saving.register_keras_serializable(package="bert_tf")
class AttentionMaskAdder(keras.layers.Layer):
    """[batch, seq] 0/1 input mask -> [batch, 1, 1, seq] float32 logit adder.

    Positions with mask 0 get `MASK_ADDER` added to every query's attention logits,
    exactly as the original `create_attention_mask_from_input_mask` + `adder`.
    """

    def call(self, input_mask):
        mask = ops.cast(input_mask, "float32")
        return ((1.0 - mask) * MASK_ADDER)[:, None, None, :]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], 1, 1, input_shape[1])

    def compute_output_spec(self, input_mask):
        return keras.KerasTensor(self.compute_output_shape(input_mask.shape), dtype="float32")


# === Projections ===
@keras.saving.register_keras_serializable(package="bert_tf")
class PositionwiseDense(keras.layers.Dense):
    """`Dense` over the last axis of [batch, positions, width], computed as one batch matmul.

    Why: TensorFlow runs a `Dense` of a 3-D input as a 2-D MatMul, which oneDNN executes
    through its sgemm API, and that API ignores oneDNN's bf16 math mode
    (`TF_SET_ONEDNN_FPMATH_MODE=BF16`: a float32 model whose matmuls run in bfloat16, on
    AMX where the CPU has it, everything else staying float32; `bert_tf.onednn`). The same
    product as a [1, rows, width] x [1, width, units] batch matmul goes through oneDNN's
    matmul primitive, which honours the mode. Measured on an Intel Xeon with AMX
    (MiniLM-L6 shape, forward of 32 x 64 tokens): float32 197 ms either way, 108 ms in the
    bf16 math mode (the `mixed_bfloat16` policy: 124 ms); training steps unchanged. The
    broadcast form, [batch, positions, width] x [width, units], is not used: its gradient
    materialises a [batch, width, units] array per projection and ran out of memory.

    Example (the numbers are `Dense`'s):
    >>> import numpy as np
    >>> x = np.random.default_rng(0).standard_normal((2, 4, 5)).astype("float32")
    >>> layer, reference = PositionwiseDense(3), keras.layers.Dense(3)
    >>> layer.build(x.shape), reference.build(x.shape)
    (None, None)
    >>> reference.set_weights(layer.get_weights())
    >>> bool(np.allclose(ops.convert_to_numpy(layer(x)), ops.convert_to_numpy(reference(x)), atol=1e-6))
    True
    >>> layer.quantize("int8")  # as a Dense can be (Keras' own check refuses subclasses)
    >>> quantized = ops.convert_to_numpy(layer(x))
    >>> layer.quantization_mode, bool(np.allclose(quantized, ops.convert_to_numpy(reference(x)), atol=0.05))
    ('int8', True)
    """

    #: The dtype the product is computed in, its inputs and kernel cast to it and the result
    #: cast back (None: the layer's compute dtype); set by `compute_projections_in`.
    matmul_dtype: str | None = None

    def call(self, inputs, training=None):
        if len(inputs.shape) != 3:
            return super().call(inputs, training=training)
        batch, length = ops.shape(inputs)[0], ops.shape(inputs)[1]
        dtype = self.matmul_dtype or self.compute_dtype
        rows = ops.cast(ops.reshape(inputs, (1, -1, self.kernel.shape[0])), dtype)
        product = ops.cast(ops.matmul(rows, ops.cast(ops.expand_dims(self.kernel, 0), dtype)), self.compute_dtype)
        outputs = ops.reshape(product, (batch, length, self.units))
        if self.bias is not None:
            outputs = ops.add(outputs, self.bias)
        return outputs if self.activation is None else self.activation(outputs)

    def quantize(self, mode=None, type_check=True, config=None):
        # Keras' Dense refuses subclasses (its quantized call does not use `call`, so ours is fine).
        return super().quantize(mode, type_check=False, config=config)


def compute_projections_in(model: keras.Layer, dtype: str) -> int:
    """Computes the matmul of every `PositionwiseDense` of `model` (the encoder's query, key,
    value, attention output, intermediate and output projections) and of its masked-LM output
    projection (`TiedEmbedding`'s reverse) in `dtype`, and returns how many layers:
    `torch.autocast`'s way to bfloat16. The projections' inputs and kernels
    are cast to `dtype`, their products (accumulated in float32 by oneDNN) cast back, and
    everything else (embeddings, attention scores, softmax, LayerNorm, GELU, heads) stays in
    the model's own dtype, so only the casts of the matmuls' operands are added. Why not the
    `mixed_bfloat16` policy: its casts around every layer and its bf16 element-wise ops cost
    what the matmuls gain on a CPU. Measured on an AMD EPYC with AVX512-BF16 (MiniLM-L6,
    forward of 32 x 48 tokens): 1.49-1.58x float32, where `mixed_bfloat16` gave 1.24-1.45x
    end to end. Set it before the model's function is traced.

    Example (a product of bf16-rounded operands, within a bf16 step of float32's):
    >>> import numpy as np
    >>> x = np.random.default_rng(0).standard_normal((2, 4, 64)).astype("float32")
    >>> layer = PositionwiseDense(8)
    >>> exact = ops.convert_to_numpy(layer(x))
    >>> compute_projections_in(layer, "bfloat16"), layer.compute_dtype
    (1, 'float32')
    >>> rounded = ops.convert_to_numpy(layer(x))
    >>> gap = float(np.abs(rounded - exact).max() / np.abs(exact).max())
    >>> rounded.dtype, 1e-4 < gap < 2 ** -7
    (dtype('float32'), True)
    """
    projections = [layer for layer in model._flatten_layers(include_self=True, recursive=True)
                   if isinstance(layer, (PositionwiseDense, TiedEmbedding))]
    for layer in projections:
        layer.matmul_dtype = dtype
    return len(projections)


# === Transformer block ===
@keras.saving.register_keras_serializable(package="bert_tf")
class TransformerBlock(keras.layers.Layer):
    """One post-LayerNorm BERT block: self-attention, add & norm, FFN, add & norm.

    Sub-layers are named after the original TF1 scopes (`attention/self/query`,
    `attention/output/dense`, `intermediate/dense`, `output/dense`, ...).

    Example:
    >>> import numpy as np
    >>> block = TransformerBlock(num_heads=2, hidden_size=8, intermediate_size=16)
    >>> tuple(block(np.zeros((1, 3, 8)), np.zeros((1, 1, 1, 3))).shape)
    (1, 3, 8)
    """

    def __init__(
        self,
        num_heads: int,
        hidden_size: int,
        intermediate_size: int,
        hidden_act: str = "gelu",
        hidden_dropout: float = 0.1,
        attention_dropout: float = 0.1,
        initializer_range: float = 0.02,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout = hidden_dropout
        self.attention_dropout = attention_dropout
        self.initializer_range = initializer_range
        self.head_size = hidden_size // num_heads

        def dense(width: int, name: str, act=None) -> PositionwiseDense:
            return PositionwiseDense(
                width,
                activation=act,
                kernel_initializer=truncated_normal(initializer_range),
                dtype=self.dtype_policy,
                name=name,
            )

        self.query = dense(hidden_size, "query")
        self.key = dense(hidden_size, "key")
        self.value = dense(hidden_size, "value")
        self.attention_output = dense(hidden_size, "attention_output")
        self.attention_layer_norm = layer_norm("attention_layer_norm")
        self.intermediate = dense(intermediate_size, "intermediate", activation(hidden_act))
        self.output_dense = dense(hidden_size, "output_dense")
        self.output_layer_norm = layer_norm("output_layer_norm")
        self.attention_dropout_layer = keras.layers.Dropout(attention_dropout, dtype=self.dtype_policy)
        self.hidden_dropout_layer = keras.layers.Dropout(hidden_dropout, dtype=self.dtype_policy)

    def build(self, hidden_shape, mask_adder_shape=None):
        hidden_shape = tuple(hidden_shape)
        for layer in (self.query, self.key, self.value, self.attention_output):
            layer.build(hidden_shape)
        self.attention_layer_norm.build(hidden_shape)
        self.intermediate.build(hidden_shape)
        self.output_dense.build(hidden_shape[:-1] + (self.intermediate_size,))
        self.output_layer_norm.build(hidden_shape)

    def _split_heads(self, x):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        x = ops.reshape(x, (batch, length, self.num_heads, self.head_size))
        return ops.transpose(x, (0, 2, 1, 3))  # [batch, heads, length, head_size]

    def _attention(self, hidden, mask_adder, training):
        query = self._split_heads(self.query(hidden))
        key = self._split_heads(self.key(hidden))
        value = self._split_heads(self.value(hidden))
        # Scale after the matmul, as the original does (not the query before it).
        scores = ops.matmul(query, ops.transpose(key, (0, 1, 3, 2)))
        scores = ops.cast(scores, "float32") * (1.0 / math.sqrt(self.head_size)) + ops.cast(mask_adder, "float32")
        probs = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)
        probs = self.attention_dropout_layer(probs, training=training)
        context = ops.transpose(ops.matmul(probs, value), (0, 2, 1, 3))
        batch, length = ops.shape(context)[0], ops.shape(context)[1]
        return ops.reshape(context, (batch, length, self.hidden_size))

    def call(self, hidden, mask_adder, training=None):
        attended = self.attention_output(self._attention(hidden, mask_adder, training))
        attended = self.hidden_dropout_layer(attended, training=training)
        hidden = self.attention_layer_norm(ops.cast(attended, "float32") + ops.cast(hidden, "float32"))
        hidden = ops.cast(hidden, self.compute_dtype)
        ffn = self.output_dense(self.intermediate(hidden))
        ffn = self.hidden_dropout_layer(ffn, training=training)
        return self.output_layer_norm(ops.cast(ffn, "float32") + ops.cast(hidden, "float32"))

    def compute_output_spec(self, hidden, mask_adder, training=None):
        return keras.KerasTensor(hidden.shape, dtype="float32")

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "hidden_act": self.hidden_act,
            "hidden_dropout": self.hidden_dropout,
            "attention_dropout": self.attention_dropout,
            "initializer_range": self.initializer_range,
        }
