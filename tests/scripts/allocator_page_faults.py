"""Prints the median page faults of a step that makes temporaries of eight sizes (4-32 MB), after
warm-up steps; with argument `pooled` it first calls `use_pooled_cpu_allocator()`, as the run
scripts do. Run in a fresh process: TF fixes its CPU allocator at the first tensor."""

import resource
import statistics
import sys

import tensorflow as tf

from electra_tf.cli import use_pooled_cpu_allocator

if sys.argv[1:] == ["pooled"]:
    use_pooled_cpu_allocator()


@tf.function
def step(x):
    return tf.add_n([tf.reduce_sum(tf.nn.relu(x[:, : 128 * k] * float(k))) for k in range(1, 9)])


x = tf.random.normal([8192, 1024])  # [N, 1024] float32: 32 MB
for _ in range(3):  # warm-up: the ops' order varies, so the pool may reach its peak after the first step
    step(x).numpy()
faults = []
for _ in range(7):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step(x).numpy()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(statistics.median(faults))  # the median: a one-off burst (a thread starting, say) is not the allocator's
