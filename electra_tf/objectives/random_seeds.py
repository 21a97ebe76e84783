"""Stateless random seeds for the objectives' in-graph draws.

Every random op in `electra_tf.objectives` is a `tf.random.stateless_*` op keyed by a seed tensor
of shape [2], so a training loop gets reproducible masks and samples by passing a per-step seed
(e.g. `tf.random.experimental.stateless_fold_in(base_seed, step)`). Without a seed, one is drawn
from the global generator, which gives ordinary non-reproducible randomness through the same ops.
A seed reproduces its draws on the same device and compile mode; eager and XLA-compiled runs of
the same seed may differ.
"""

from typing import Optional

import tensorflow as tf


def split_seed(seed: Optional[tf.Tensor], num: int) -> tf.Tensor:
    """`num` independent stateless seeds, shape [num, 2] int32, derived from `seed` ([2] ints).

    `seed=None` draws a fresh seed from the global generator (non-deterministic).
    """
    if seed is None:
        seed = tf.random.uniform([2], minval=tf.int32.min, maxval=tf.int32.max, dtype=tf.int32)
    seed = tf.cast(tf.convert_to_tensor(seed), tf.int32)
    return tf.random.experimental.stateless_split(seed, num=num)
