"""Small pieces every model layer shares: activations, initialisers, LayerNorm epsilon, scoped building.

Variable names matter here: the checkpoint-interop code maps our names to the original's TF1
names (`electra/encoder/layer_0/attention/self/query/kernel`, ...) by a simple rule, so layers
build their children explicitly inside the right `tf.name_scope`s (`build_in_scope`).
"""

import contextlib
import math
from typing import Callable, Optional

import tensorflow as tf
import tf_keras

# The original's `contrib.layers.layer_norm` epsilon (docs/fidelity.md#encoder; HF uses the same value).
LAYER_NORM_EPSILON = 1e-12


@tf.custom_gradient
def gelu(x: tf.Tensor):
    """Exact (erf) GELU x·Φ(x), as the original; Model Garden defaults to the tanh approximation.

    The values are tf.nn.gelu's (0.5·x·erfc(−x/√2)); the gradient Φ(x) + x·φ(x) is written out,
    reusing the forward pass's Φ(x): autodiff of tf.nn.gelu takes about 1.5x the time on CPU.
    """
    cdf = 0.5 * tf.math.erfc(x * -math.sqrt(0.5))  # Φ(x)

    def grad(dy):
        return dy * (cdf + x * tf.exp(-0.5 * tf.square(x)) * (1 / math.sqrt(2 * math.pi)))

    return x * cdf, grad


@tf.custom_gradient
def matmul_transposed_kernel_grad(x: tf.Tensor, kernel: tf.Tensor):
    """x [N, K] @ kernel [K, M] for a layer that narrows (K > M, the FFN output F → H).

    Its kernel gradient x^T·dy is computed as (dy^T·x)^T: on CPU oneDNN runs the [M, K]-shaped
    product about 1.3x faster than the [K, M] one with a transposed input. Same sums.
    """

    def grad(dy):
        return tf.matmul(dy, kernel, transpose_b=True), tf.transpose(tf.matmul(dy, x, transpose_a=True))

    return tf.matmul(x, kernel), grad


_ACTIVATIONS = {"gelu": gelu, "relu": tf.nn.relu, "tanh": tf.tanh, "linear": None}


def get_activation(name: str) -> Optional[Callable[[tf.Tensor], tf.Tensor]]:
    """The activation for a `BertConfig.hidden_act` value (None = linear, as Keras expects)."""
    return _ACTIVATIONS[name]


@contextlib.contextmanager
def converter_gelu():
    """Within this block, "gelu" traces as `tf.nn.gelu(approximate=False)`: the same values
    (0.5·x·erfc(−x/√2)) without the custom gradient, which the TFLite converter turns into its GELU
    op (it has no Erfc op). For graphs that are only run, never trained (`finetune.litert`)."""
    before = _ACTIVATIONS["gelu"]
    _ACTIVATIONS["gelu"] = lambda x: tf.nn.gelu(x, approximate=False)
    try:
        yield
    finally:
        _ACTIVATIONS["gelu"] = before


def truncated_normal(stddev: float) -> tf_keras.initializers.Initializer:
    """A fresh truncated-normal initialiser (cut at 2 stddev, like TF1's `truncated_normal_initializer`).

    A new object per variable: tf_keras repeats the same values when one unseeded instance is reused.
    """
    return tf_keras.initializers.TruncatedNormal(stddev=stddev)


@tf.custom_gradient
def _normalize(x: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor, epsilon: tf.Tensor):
    """LayerNorm over the last axis, x [..., H] float32, gamma and beta [H], with its gradient
    written out: autodiff of the moments takes about 1.4x the time on CPU."""
    mean = tf.reduce_mean(x, -1, keepdims=True)
    centered = x - mean
    inv_std = tf.math.rsqrt(tf.reduce_mean(tf.square(centered), -1, keepdims=True) + epsilon)
    normalized = centered * inv_std  # [..., H]

    def grad(dy):
        outer = list(range(dy.shape.rank - 1))
        d_normalized = dy * gamma
        mean_d = tf.reduce_mean(d_normalized, -1, keepdims=True)
        mean_d_dot = tf.reduce_mean(d_normalized * normalized, -1, keepdims=True)
        dx = (d_normalized - mean_d - normalized * mean_d_dot) * inv_std
        return dx, tf.reduce_sum(dy * normalized, outer), tf.reduce_sum(dy, outer), None

    return normalized * gamma + beta, grad


class LayerNorm(tf_keras.layers.LayerNormalization):
    """tf_keras LayerNormalization over the last axis (its variables and dtype handling) computed
    by `_normalize`. tf_keras cannot use its fused kernel here: that needs epsilon >= 1.001e-5."""

    def call(self, inputs):
        if self.axis != [inputs.shape.rank - 1]:
            return super().call(inputs)
        inputs = tf.cast(inputs, self.compute_dtype)
        outputs = _normalize(tf.cast(inputs, tf.float32), tf.convert_to_tensor(self.gamma),
                             tf.convert_to_tensor(self.beta), tf.constant(self.epsilon, tf.float32))
        return tf.cast(outputs, inputs.dtype)


def layer_norm(name: str = "LayerNorm", dtype=None) -> LayerNorm:
    """LayerNorm over the last axis with the original's epsilon; variables `<name>/{gamma,beta}`.

    Computed in float32 whatever the policy (half inputs are cast up) and returned in the compute dtype.
    """
    return LayerNorm(axis=-1, epsilon=LAYER_NORM_EPSILON, name=name, dtype=dtype)


def build_in_scope(layer: tf_keras.layers.Layer, input_shape, *scopes: str) -> None:
    """Build `layer` now, naming its variables `<current scope>/<scopes...>/<layer.name>/<weight>`.

    Keras would otherwise name variables after whichever call first builds the layer; building
    explicitly keeps the names fixed (e.g. shared embeddings always live under `electra/`).
    """
    with contextlib.ExitStack() as stack:
        for scope in (*scopes, layer.name):
            stack.enter_context(tf.name_scope(scope))
        layer.build(input_shape)
