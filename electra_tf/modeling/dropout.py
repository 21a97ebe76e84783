"""Dropout drawing 16 random bits per element instead of a 32-bit float.

Random number generation is the costly part of dropout on CPU (Philox makes 128 bits a call):
one 32-bit draw split in two 16-bit halves halves it, and the keep mask is applied with a single
multiply, whose gradient is a single multiply too (tf.nn.dropout scales, selects and, backwards,
selects and scales again). A unit is dropped when its 16 bits fall below round(rate * 2^16), so
the rate is rounded to a multiple of 2^-16 (0.1 becomes 0.100006); kept units are scaled by the
inverse of the realised keep probability, so the output's expectation is exactly the input.

Randomness comes from the layer's tf_keras random generator: with
`tf_keras.backend.experimental.enable_tf_random_generator()` (deterministic runs) it is a
`tf.random.Generator` held in the checkpoint (`training.checkpointing.dropout_generators`), so a
resumed run repeats the same masks; otherwise each call draws a fresh stateful seed.
"""

import tensorflow as tf
import tf_keras

_LEVELS = 2 ** 16  # distinct values of one 16-bit draw
_INT32_MAX = 2 ** 31 - 1


def keep_mask(shape: tf.TensorShape, dynamic_shape: tf.Tensor, rate: float, seed: tf.Tensor) -> tf.Tensor:
    """bool tensor of `shape`, each element True with probability 1 - round(rate·2^16)/2^16.

    Uses half a uint32 per element when the last dimension is known and even (always, in the
    model's tensors), otherwise a whole uint32 compared against the same threshold in 32 bits.
    """
    threshold = round(rate * _LEVELS)
    last = shape[-1] if shape.rank else None
    if last is not None and last % 2 == 0:
        halves = tf.concat([dynamic_shape[:-1], [last // 2]], 0)
        bits = tf.random.stateless_uniform(halves, seed, minval=None, maxval=None, dtype=tf.uint32)
        bits = tf.reshape(tf.bitcast(bits, tf.uint16), dynamic_shape)  # [..., last/2, 2] -> shape
        return bits >= tf.constant(threshold, tf.uint16)
    bits = tf.random.stateless_uniform(dynamic_shape, seed, minval=None, maxval=None, dtype=tf.uint32)
    return bits >= tf.constant(threshold * _LEVELS, tf.uint32)


class Dropout(tf_keras.layers.Dropout):
    """tf_keras Dropout (same arguments and random-generator handling) with 16-bit keep masks."""

    def __init__(self, rate: float, **kwargs):
        if not 0 <= rate < 1:
            raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
        if kwargs.get("noise_shape") is not None:
            raise ValueError("noise_shape is not supported: every element gets its own draw")
        super().__init__(rate, **kwargs)

    @property
    def keep_scale(self) -> float:
        """What kept units are multiplied by: 1 / the realised keep probability."""
        return _LEVELS / (_LEVELS - round(self.rate * _LEVELS))

    def keep_mask(self, shape: tf.TensorShape, dynamic_shape: tf.Tensor) -> tf.Tensor:
        """A fresh bool keep mask for one call on a tensor of this shape (for kernels that apply
        dropout themselves, e.g. the fused attention)."""
        return keep_mask(shape, dynamic_shape, self.rate, self._seed())

    def _seed(self) -> tf.Tensor:
        """A fresh [2] int seed for one call's mask."""
        generator = self._random_generator
        seed = generator.make_seed_for_stateless_op()  # from the layer's tf.random.Generator, if any
        if seed is None:  # legacy stateful mode: a stateful op gives each call (and step) new bits
            seed = tf.random.uniform([2], maxval=_INT32_MAX, dtype=tf.int32, seed=generator.make_legacy_seed())
        return seed

    def call(self, inputs, training=None):
        if self.rate == 0:
            return tf.identity(inputs)
        if training is None:
            training = tf_keras.backend.learning_phase()

        def dropped():
            keep = self.keep_mask(inputs.shape, tf.shape(inputs))
            scale = tf.constant(self.keep_scale, inputs.dtype)
            return inputs * tf.where(keep, scale, tf.constant(0, inputs.dtype))

        return tf.__internal__.smart_cond.smart_cond(training, dropped, lambda: tf.identity(inputs))
