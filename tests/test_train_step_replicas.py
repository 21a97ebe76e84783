"""The training step under MirroredStrategy over two logical CPUs: gradient accumulation and
per-replica clipping end where one device ends. Two logical CPUs are fixed when TensorFlow starts,
so each check runs in a fresh interpreter."""

import os
import subprocess
import sys
from pathlib import Path


def _two_cpu_result(script: str, prefix: str) -> str:
    """Runs `script` in a fresh interpreter (two logical CPUs are fixed when TensorFlow starts) and
    returns the one line of its output that starts with `prefix`."""
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo), "CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-c", script], env=env, cwd=repo, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    (line,) = [line for line in result.stdout.splitlines() if line.startswith(prefix)]
    return line


# Two logical CPUs are fixed when TensorFlow starts, so this runs in a subprocess.
TWO_REPLICAS_ACCUMULATING = """
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import tf_keras
from electra_tf.optimization import create_optimizer
from electra_tf.training import make_train_step

x = tf.random.stateless_normal([16, 6], [4, 5])
y = tf.reduce_sum(x, 1, keepdims=True) * 3.0  # a gradient norm above 1: clipping is active


def train(strategy, accumulation, scale):
    def loss_fn(model, features, seed):
        del seed
        return tf.reduce_mean(tf.square(model(features["x"]) - features["y"])) * scale, None

    tf_keras.utils.set_random_seed(3)
    with strategy.scope():
        inputs = tf_keras.Input([6])
        model = tf_keras.Model(inputs, tf_keras.layers.Dense(1)(tf_keras.layers.Dense(8, activation="tanh")(inputs)))
        optimizer = create_optimizer(1e-2, 100, 0.01, 2)
        step = make_train_step(model, optimizer, loss_fn=loss_fn, gradient_accumulation_steps=accumulation)
    n = strategy.num_replicas_in_sync
    rows = 16 // n  # replica r trains rows r*rows ... of the global batch
    features = strategy.experimental_distribute_values_from_function(lambda context: {
        "x": x[context.replica_id_in_sync_group * rows:][:rows],
        "y": y[context.replica_id_in_sync_group * rows:][:rows]})
    run = tf.function(lambda i: strategy.run(step, args=(features, tf.stack([0, i]))))
    for i in range(5):
        run(tf.constant(i))
    return [v.numpy() for v in model.trainable_variables]


mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
accumulating = train(mirrored, 2, 1.0)
error = max(float(np.abs(a - b).max()) for a, b in zip(accumulating, train(mirrored, 1, 1.0)))
plain = train(tf.distribute.OneDeviceStrategy("/cpu:0"), 1, 1.0)  # one device, the global batch
plain_error = max(float(np.abs(a - b).max()) for a, b in zip(accumulating, plain))
moved = max(float(np.abs(a - b).max()) for a, b in zip(accumulating, train(mirrored, 1, 0.0)))
print(f"replicas {mirrored.num_replicas_in_sync} accumulation error {error:.2e} plain error {plain_error:.2e} "
      f"moved {moved:.3f}")
"""


def test_two_replicas_accumulating_equal_one_device_on_the_global_batch():
    """MirroredStrategy over 2 logical CPUs with 2 micro-batches per replica: the weights after 5
    steps equal those without accumulation, and those of one device training the global batch, to
    float32 rounding. (The replicas' gradients are summed, twice the global batch's mean gradient;
    the clip at 1.0, active at every step here, and AdamW's division by the gradient's scale make
    the update the same.) A zero loss leaves the weights where they start: "moved" shows the steps
    did something."""
    line = _two_cpu_result(TWO_REPLICAS_ACCUMULATING, "replicas ")
    words = line.split()
    assert words[1] == "2"
    assert float(words[4]) <= 1e-6 and float(words[7]) <= 1e-6 and float(words[9]) > 0.01, line


PER_REPLICA_CLIPPING = """
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import tf_keras
from electra_tf.optimization import create_optimizer, gradient_norm
from electra_tf.training import make_train_step

x = tf.random.stateless_normal([16, 6], [4, 5])
y = tf.reduce_sum(x, 1, keepdims=True) * 3.0
HALVES = (slice(0, 8), slice(8, 16))
# the halves' loss weights: the first half's gradient norm is above 1, the second's below, so
# clipping each is not clipping the sum
WEIGHTS = (1.0, 0.01)


def model_and_optimizer(clip_norm):
    tf_keras.utils.set_random_seed(3)
    inputs = tf_keras.Input([6])
    model = tf_keras.Model(inputs, tf_keras.layers.Dense(1)(tf_keras.layers.Dense(8, activation="tanh")(inputs)))
    return model, create_optimizer(1e-2, 100, 0.01, 2, clip_norm=clip_norm)


def half_loss(model, half):
    return tf.reduce_mean(tf.square(model(x[half]) - y[half])) * WEIGHTS[HALVES.index(half)]


def mirrored(per_replica):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        model, optimizer = model_and_optimizer(None if per_replica else 1.0)
        step = make_train_step(model, optimizer, loss_fn=lambda m, f, s: (half_loss(m, f["half"]), None),
                               clip_norm=1.0 if per_replica else None)
    features = strategy.experimental_distribute_values_from_function(
        lambda context: {"half": HALVES[context.replica_id_in_sync_group]})
    run = tf.function(lambda: strategy.run(step, args=(features,)))
    for _ in range(5):
        run()
    return [v.numpy() for v in model.trainable_variables]


def by_hand():
    # one device: each half's gradient clipped by TensorFlow's own clip_by_global_norm, the two summed
    model, optimizer = model_and_optimizer(None)
    norms = []
    for _ in range(5):
        clipped = []
        for half in HALVES:
            with tf.GradientTape() as tape:
                loss = half_loss(model, half)
            grads = tape.gradient(loss, model.trainable_variables)
            norms.append(float(gradient_norm(grads)))
            clipped.append(tf.clip_by_global_norm(grads, 1.0)[0])
        optimizer.apply_gradients(zip([a + b for a, b in zip(*clipped)], model.trainable_variables))
    return [v.numpy() for v in model.trainable_variables], norms


per_replica, summed_once = mirrored(True), mirrored(False)
reference, norms = by_hand()
error = max(float(np.abs(a - b).max()) for a, b in zip(per_replica, reference))
apart = max(float(np.abs(a - b).max()) for a, b in zip(per_replica, summed_once))
print(f"per-replica error {error:.2e} apart {apart:.2e} first-half norms {min(norms[0::2]):.3f} "
      f"second-half norms {max(norms[1::2]):.3f}")
"""


def test_per_replica_clipping_clips_each_replica_before_the_sum():
    """`clip_norm` in the step (`per_replica_clipping`, the original's TPU runs): over 2 mirrored
    logical CPUs, 5 steps end where one device ends when it clips each half-batch's gradient with
    tf.clip_by_global_norm and sums the two, to float32 rounding; and they end elsewhere than the
    default (sum, then clip once), since one half's norm is above 1 and the other's below."""
    line = _two_cpu_result(PER_REPLICA_CLIPPING, "per-replica ")
    words = line.split()
    assert float(words[2]) <= 1e-6 and float(words[4]) > 1e-3, line
    assert float(words[7]) > 1.0 > float(words[10]), line  # the case where the two differ
