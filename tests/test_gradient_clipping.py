"""Clipping at global norm 1.0: the norm of the dense gradient (a token looked up twice counts
once, as the original's dense TPU gradients), and the per-replica clip of `per_replica_clipping`.
How replicas aggregate before the optimizer's clip: test_optimization.py and test_train_step.py."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from electra_tf.optimization import clip_by_exact_global_norm, create_optimizer, sum_duplicate_indices


def test_global_norm_counts_a_repeated_token_once():
    table = tf.Variable(tf.ones((4, 2)), name="electra/embeddings/word_embeddings")
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(table, [1, 1, 3]))  # dense gradient rows: 0, 2, 0, 1
    grad = tape.gradient(loss, table)
    assert isinstance(grad, tf.IndexedSlices)
    (summed, _), = sum_duplicate_indices([(grad, table)])
    assert float(tf.linalg.global_norm([summed])) == pytest.approx(np.sqrt(4 * 2 + 1 * 2))
    assert float(tf.linalg.global_norm([grad])) == pytest.approx(np.sqrt(3 * 2))  # as given


def test_per_replica_clip_is_clip_by_global_norm_of_the_dense_gradient():
    """clip_by_exact_global_norm (per_replica_clipping's clip) on a repeated-token IndexedSlices
    gradient, a dense one and a None: the dense result is tf.clip_by_global_norm's on the dense
    equivalents (the original's TPU gradients were dense), and None stays None."""
    table = tf.Variable(tf.ones((4, 2)), name="electra/embeddings/word_embeddings")
    kernel = tf.Variable(tf.ones((2, 2)), name="w/kernel")
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(table, [1, 1, 3])) + 0.5 * tf.reduce_sum(kernel * kernel)
    grads = tape.gradient(loss, [table, kernel])
    assert isinstance(grads[0], tf.IndexedSlices)
    clipped = clip_by_exact_global_norm(grads + [None], 1.0)
    expected, norm = tf.clip_by_global_norm([tf.convert_to_tensor(grads[0]), grads[1]], 1.0)
    assert float(norm) == pytest.approx(np.sqrt(4 * 2 + 1 * 2 + 4)) and clipped[2] is None
    for got, want in zip(clipped[:2], expected):
        np.testing.assert_allclose(tf.convert_to_tensor(got).numpy(), want.numpy(), rtol=1e-6)
    unclipped = clip_by_exact_global_norm(grads, 100.0)  # below the threshold: unchanged
    np.testing.assert_allclose(unclipped[1].numpy(), grads[1].numpy())


def test_make_train_step_refuses_to_clip_twice():
    from electra_tf.training import make_train_step
    model = tf_keras.Sequential([tf_keras.layers.Dense(1, input_shape=(2,))])
    with pytest.raises(ValueError, match="clipped twice"):
        make_train_step(model, create_optimizer(1e-3, 10), clip_norm=1.0)
    make_train_step(model, create_optimizer(1e-3, 10, clip_norm=None), clip_norm=1.0)
