"""The hand-written pieces of a transformer layer (faster on CPU than TF's own) against TF's own:
GELU, LayerNorm and the narrowing matmul's values and gradients, and the 16-bit dropout's
statistics and gradient."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from electra_tf.modeling.dropout import Dropout
from electra_tf.modeling.layer_utils import (LAYER_NORM_EPSILON, gelu, layer_norm,
                                             matmul_transposed_kernel_grad)


def _value_and_grads(fn, inputs, upstream):
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        out = fn(*inputs)
    return out, tape.gradient(out, inputs, output_gradients=upstream)


def test_gelu_equals_tf_exact_gelu_with_the_same_gradient():
    x = tf.constant(np.linspace(-8, 8, 4001), tf.float32)
    upstream = tf.random.stateless_normal(x.shape, [1, 2])
    ours, (ours_grad,) = _value_and_grads(gelu, [x], upstream)
    ref, (ref_grad,) = _value_and_grads(lambda t: tf.nn.gelu(t, approximate=False), [x], upstream)
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    np.testing.assert_allclose(ours_grad.numpy(), ref_grad.numpy(), rtol=1e-5, atol=1e-6)
    # d/dx x·Φ(x) at 0 is 1/2, and tends to 1 (x >> 0) and 0 (x << 0).
    np.testing.assert_allclose(_value_and_grads(gelu, [tf.constant([0.0, 8.0, -8.0])], None)[1][0],
                               [0.5, 1.0, 0.0], atol=1e-6)
    assert gelu(tf.constant([1.0], tf.float16)).dtype == tf.float16


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16])
def test_matmul_transposed_kernel_grad_equals_matmul_with_the_same_gradients(dtype):
    x = tf.cast(tf.random.stateless_normal([96, 64], [3, 4]), dtype)  # [N, K]
    kernel = tf.cast(tf.random.stateless_normal([64, 16], [5, 6]), dtype)  # [K, M], K > M
    upstream = tf.cast(tf.random.stateless_normal([96, 16], [7, 8]), dtype)
    ours, ours_grads = _value_and_grads(matmul_transposed_kernel_grad, [x, kernel], upstream)
    ref, ref_grads = _value_and_grads(tf.matmul, [x, kernel], upstream)
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == tf.float32 else dict(rtol=1e-2, atol=1e-2)
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    for name, mine, theirs in zip(("x", "kernel"), ours_grads, ref_grads):
        assert mine.shape == theirs.shape and mine.dtype == dtype, name
        np.testing.assert_allclose(mine.numpy().astype(np.float32), theirs.numpy().astype(np.float32),
                                   err_msg=name, **tolerance)


@pytest.mark.parametrize("shape", [(64, 256), (3, 5, 16)])
def test_layer_norm_equals_tf_keras_layer_normalization_values_and_gradients(shape):
    ours = layer_norm()
    ref = tf_keras.layers.LayerNormalization(axis=-1, epsilon=LAYER_NORM_EPSILON)
    for layer in (ours, ref):
        layer.build(shape)
    gamma = tf.random.stateless_normal(shape[-1:], [3, 4])
    beta = tf.random.stateless_normal(shape[-1:], [5, 6])
    for layer in (ours, ref):
        layer.gamma.assign(gamma)
        layer.beta.assign(beta)
    x = 3.0 + 2.0 * tf.random.stateless_normal(shape, [7, 8])
    upstream = tf.random.stateless_normal(shape, [9, 10])

    def run(layer):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = layer(x)
        return [out, *tape.gradient(out, [x, layer.gamma, layer.beta], output_gradients=upstream)]

    for got, want, name in zip(run(ours), run(ref), ("output", "d_x", "d_gamma", "d_beta")):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=2e-5, err_msg=name)
    normalized = ((x - tf.reduce_mean(x, -1, keepdims=True)) / tf.math.reduce_std(x, -1, keepdims=True)).numpy()
    np.testing.assert_allclose(ours(x).numpy(), normalized * gamma.numpy() + beta.numpy(), atol=1e-4)


def test_layer_norm_under_mixed_precision_computes_in_float32_and_returns_half():
    tf_keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        layer = layer_norm()
        layer.build([4, 8])
        x = tf.constant(np.random.RandomState(0).normal(100.0, 3.0, (4, 8)), tf.float16)
        out = layer(x)
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")
    assert out.dtype == tf.float16 and layer.gamma.dtype == tf.float32
    x32 = x.numpy().astype(np.float32)
    want = (x32 - x32.mean(-1, keepdims=True)) / x32.std(-1, keepdims=True)
    np.testing.assert_allclose(out.numpy().astype(np.float32), want, atol=5e-3)


@pytest.mark.parametrize("shape", [(256, 1024), (2001, 33)])  # even last dim: 16-bit draws; odd: 32-bit
def test_dropout_drops_the_rate_and_keeps_the_expectation(shape):
    layer = Dropout(0.1)
    x = tf.ones(shape)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = layer(x, training=True)
    values = out.numpy()
    scale = 2 ** 16 / (2 ** 16 - round(0.1 * 2 ** 16))
    assert set(np.unique(values)) == {0.0, np.float32(scale)}
    n = values.size
    dropped = (values == 0).mean()
    assert abs(dropped - 6554 / 2 ** 16) < 4 * np.sqrt(0.09 / n), dropped  # rate rounded to 2^-16
    assert abs(values.mean() - 1.0) < 4 * scale * np.sqrt(0.09 / n)
    # The gradient is the mask times the scale: d out / d x = out / x.
    np.testing.assert_array_equal(tape.gradient(out, x).numpy(), values)
    # A second call draws another mask; inference is the identity.
    assert (layer(x, training=True).numpy() != values).any()
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())


def test_dropout_masks_change_across_tf_function_steps_and_keep_the_dtype():
    layer = Dropout(0.5, dtype="mixed_bfloat16")

    @tf.function
    def step(x):
        return layer(x, training=True)

    x = tf.ones([8, 64], tf.bfloat16)
    first, second = step(x).numpy(), step(x).numpy()
    assert first.dtype == tf.bfloat16.as_numpy_dtype and (first != second).any()
    assert set(np.unique(first.astype(np.float32))) == {0.0, 2.0}


def test_dropout_follows_its_tf_random_generator_so_a_restored_state_repeats_the_mask():
    layer = Dropout(0.3, rng_type="stateful")
    layer._random_generator._maybe_init()
    generator = layer._random_generator._generator
    x = tf.ones([16, 32])
    saved = generator.state.numpy()
    first = layer(x, training=True).numpy()
    assert (layer(x, training=True).numpy() != first).any()
    generator.reset(saved)
    np.testing.assert_array_equal(layer(x, training=True).numpy(), first)


def test_dropout_rejects_what_it_cannot_do():
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        Dropout(1.0)
    with pytest.raises(ValueError, match="noise_shape"):
        Dropout(0.1, noise_shape=(1, 4))
