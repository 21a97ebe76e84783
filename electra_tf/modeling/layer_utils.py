"""Small pieces every model layer shares: activations, initialisers, LayerNorm epsilon, scoped building.

Variable names matter here: the checkpoint-interop code maps our names to the original's TF1
names (`electra/encoder/layer_0/attention/self/query/kernel`, ...) by a simple rule, so layers
build their children explicitly inside the right `tf.name_scope`s (`build_in_scope`).
"""

import contextlib
from typing import Callable, Optional

import tensorflow as tf
import tf_keras

# The original's `contrib.layers.layer_norm` epsilon (see the spec §6.2; HF uses the same value).
LAYER_NORM_EPSILON = 1e-12


def gelu(x: tf.Tensor) -> tf.Tensor:
    """Exact (erf) GELU, as the original; Model Garden defaults to the tanh approximation."""
    return tf.nn.gelu(x, approximate=False)


_ACTIVATIONS = {"gelu": gelu, "relu": tf.nn.relu, "tanh": tf.tanh, "linear": None}


def get_activation(name: str) -> Optional[Callable[[tf.Tensor], tf.Tensor]]:
    """The activation for a `BertConfig.hidden_act` value (None = linear, as Keras expects)."""
    return _ACTIVATIONS[name]


def truncated_normal(stddev: float) -> tf_keras.initializers.Initializer:
    """A fresh truncated-normal initialiser (cut at 2 stddev, like TF1's `truncated_normal_initializer`).

    A new object per variable: tf_keras repeats the same values when one unseeded instance is reused.
    """
    return tf_keras.initializers.TruncatedNormal(stddev=stddev)


def layer_norm(name: str = "LayerNorm", dtype=None) -> tf_keras.layers.LayerNormalization:
    """LayerNorm over the last axis with the original's epsilon; variables `<name>/{gamma,beta}`.

    Under a mixed policy tf_keras computes it in float32 (it casts half inputs up) and returns
    the compute dtype.
    """
    return tf_keras.layers.LayerNormalization(axis=-1, epsilon=LAYER_NORM_EPSILON, name=name, dtype=dtype)


def build_in_scope(layer: tf_keras.layers.Layer, input_shape, *scopes: str) -> None:
    """Build `layer` now, naming its variables `<current scope>/<scopes...>/<layer.name>/<weight>`.

    Keras would otherwise name variables after whichever call first builds the layer; building
    explicitly keeps the names fixed (e.g. shared embeddings always live under `electra/`).
    """
    with contextlib.ExitStack() as stack:
        for scope in (*scopes, layer.name):
            stack.enter_context(tf.name_scope(scope))
        layer.build(input_shape)
