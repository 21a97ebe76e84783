"""LAMB (`"optimizer": "lamb"`, Model Garden's optimizer, which the original did not have): it
lowers a quadratic, and create_optimizer sets it up as a NumPy reference computes it."""

import numpy as np
import tensorflow as tf
from official.modeling.optimization import lamb

from electra_tf.optimization import create_optimizer


def test_lamb_reduces_a_quadratic():
    target = tf.constant(np.random.default_rng(4).normal(size=(3, 4)), tf.float32)
    w = tf.Variable(tf.zeros((3, 4)), name="w/kernel")
    opt = create_optimizer(0.1, 100, 0.01, optimizer="lamb")
    assert isinstance(opt, lamb.LAMB)

    def loss():
        return tf.reduce_sum((w - target) ** 2)

    losses = [float(loss())]
    for _ in range(5):
        with tf.GradientTape() as tape:
            value = loss()
        opt.apply_gradients([(tape.gradient(value, w), w)])
        losses.append(float(loss()))
    assert all(later < earlier for earlier, later in zip(losses, losses[1:]))
    assert losses[-1] < 0.85 * losses[0]


def test_lamb_matches_numpy():
    """Model Garden's LAMB as create_optimizer sets it up: bias-corrected Adam moments, weight decay
    and the trust ratio ||w|| / ||update|| except for biases and LayerNorm (ratio 1, no decay), the
    schedule's rate, and the gradient clipped to global norm 1 first (here it is about 8)."""
    rng = np.random.default_rng(5)
    targets = {"w/kernel": rng.normal(size=(3, 4)).astype(np.float32),
               "w/bias": rng.normal(size=(4,)).astype(np.float32)}
    values = {"w/kernel": rng.normal(size=(3, 4)).astype(np.float32), "w/bias": np.zeros(4, np.float32)}
    variables = {name: tf.Variable(value, name=name) for name, value in values.items()}
    lr, steps, decay = 0.1, 10, 0.01
    opt = create_optimizer(lr, steps, decay, optimizer="lamb")
    m = {name: np.zeros_like(value, np.float64) for name, value in values.items()}
    v = {name: np.zeros_like(value, np.float64) for name, value in values.items()}
    w = {name: value.astype(np.float64) for name, value in values.items()}
    for t in range(1, 4):
        with tf.GradientTape() as tape:
            loss = sum(tf.reduce_sum((variables[n] - targets[n]) ** 2) for n in variables)
        gradients = tape.gradient(loss, list(variables.values()))
        opt.apply_gradients(zip(gradients, variables.values()))
        grads = {n: 2.0 * (w[n] - targets[n]) for n in w}
        norm = np.sqrt(sum((g ** 2).sum() for g in grads.values()))
        assert norm > 1.0
        rate = lr * (1.0 - (t - 1) / steps)  # linear decay, no warm-up; the step's rate is taken before it counts
        for n, g in grads.items():
            g = g / norm
            m[n] = 0.9 * m[n] + 0.1 * g
            v[n] = 0.999 * v[n] + 0.001 * g ** 2
            update = (m[n] / (1 - 0.9 ** t)) / (np.sqrt(v[n] / (1 - 0.999 ** t)) + 1e-6)
            ratio = 1.0
            if n == "w/kernel":
                update = update + decay * w[n]
                ratio = np.linalg.norm(w[n]) / np.linalg.norm(update)
            w[n] = w[n] - ratio * rate * update
        for n in w:
            np.testing.assert_allclose(variables[n].numpy(), w[n], rtol=1e-5, atol=1e-6, err_msg=f"{n}, step {t}")
