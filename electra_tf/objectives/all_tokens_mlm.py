"""The "All-Tokens MLM" ablation's copy mechanism (paper §3.2, Table 5).

All-Tokens MLM feeds the model generator-replaced input (like Replace MLM) and predicts the
original identity of EVERY token, not only the masked ones. The paper trains it with an explicit
copy mechanism: a sigmoid copy probability D per position, and the output distribution

    p(x | position) = D * onehot(input token)(x) + (1 - D) * softmax(logits)(x).

The loss is the mean of -log p(target) over the weighted positions (normally input_mask). It is
computed in log space: log D = log_sigmoid(c), log(1 - D) = log_sigmoid(-c), so a confident copy
gate or a tiny softmax probability cannot produce log(0).
"""

from typing import NamedTuple

import tensorflow as tf


class CopyMlmOutput(NamedTuple):
    """`copy_mechanism_loss` results."""

    loss: tf.Tensor  # [] float32: weighted mean of -log p(target)
    per_token_loss: tf.Tensor  # [B, L] float32: -log p(target), unweighted


def copy_mechanism_loss(logits: tf.Tensor, copy_logits: tf.Tensor, input_ids: tf.Tensor,
                        target_ids: tf.Tensor, weights: tf.Tensor) -> CopyMlmOutput:
    """Cross-entropy of the copy-mixture distribution at every weighted position.

    Args:
      logits: [B, L, V] MLM logits at every position.
      copy_logits: [B, L] logit of the copy probability D.
      input_ids: [B, L] the ids the model read (generator-replaced input): the copy candidates.
      target_ids: [B, L] the original ids to predict.
      weights: [B, L] positions that count (input_mask, to skip padding).
    """
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)  # [B, L, V]
    target_log_probs = tf.gather(log_probs, tf.cast(target_ids, tf.int32), axis=-1,
                                 batch_dims=2)  # [B, L]
    copy_logits = tf.cast(copy_logits, tf.float32)
    log_generate = tf.math.log_sigmoid(-copy_logits) + target_log_probs  # log((1-D) p_mlm)
    log_copy = tf.math.log_sigmoid(copy_logits)  # log D, counted only if input == target
    copies = tf.equal(tf.cast(input_ids, tf.int32), tf.cast(target_ids, tf.int32))
    log_p = tf.where(copies, tf.math.reduce_logsumexp(
        tf.stack([log_copy, log_generate], axis=-1), axis=-1), log_generate)  # [B, L]
    per_token_loss = -log_p
    weights = tf.cast(weights, tf.float32)
    loss = tf.reduce_sum(weights * per_token_loss) / (tf.reduce_sum(weights) + 1e-6)
    return CopyMlmOutput(loss=loss, per_token_loss=per_token_loss)
