"""The ELECTRA losses (docs/fidelity.md#losses): generator MLM, replaced token detection, and their sum.

Everything is computed in float32 whatever the logits' dtype (mixed precision casts here).

- MLM: sum(w * -log p(target)) / (sum(w) + 1e-6) over the N slots, w = masked_lm_weights.
  A position drawn twice (with-replacement masking) counts twice, as in the original.
- Replaced token detection (RTD): sigmoid cross-entropy on every non-pad position, [CLS] and
  [SEP] included, divided by (1e-6 + number of non-pad tokens in the batch): a token-level mean.
  `weights` restricts it further; the paper's "ELECTRA 15%" ablation passes the positions that
  were selected for masking (`FakeData.selected`), so the discriminator learns only there.
- Total: gen_weight * MLM + disc_weight * RTD, 1 x MLM + 50 x RTD by default.

The paper's "Replace MLM" ablation needs no loss of its own: it is `mlm_loss` on the
discriminator-sized model reading `FakeData.fake_input_ids` (generator samples at the masked
positions instead of [MASK]), at the masked positions.
"""

from typing import NamedTuple, Optional

import tensorflow as tf

from electra_tf import cpu_kernels


class MlmOutput(NamedTuple):
    """`mlm_loss` results."""

    loss: tf.Tensor  # [] float32: weighted mean over the slots
    per_slot_loss: tf.Tensor  # [B, N] float32: -log p(target), unweighted
    preds: tf.Tensor  # [B, N] int32: argmax predictions


class RtdOutput(NamedTuple):
    """`rtd_loss` results."""

    loss: tf.Tensor  # [] float32: token-level mean over the batch
    per_example_loss: tf.Tensor  # [B] float32: each row's token-level mean
    probs: tf.Tensor  # [B, L] float32: sigmoid(logits)
    preds: tf.Tensor  # [B, L] int32: 1 where logit > 0


def mlm_loss(logits: tf.Tensor, masked_lm_ids: tf.Tensor,
             masked_lm_weights: tf.Tensor) -> MlmOutput:
    """Generator cross-entropy over the prediction slots.

    Args:
      logits: [B, N, V] generator logits at masked_lm_positions.
      masked_lm_ids: [B, N] target ids.
      masked_lm_weights: [B, N] 1 for used slots, 0 for unused.
    """
    logits = tf.cast(logits, tf.float32)  # [B, N, V]
    labels = tf.cast(masked_lm_ids, tf.int32)
    # -log softmax(logits)[target] by a fused op: its gradient (softmax - one_hot) comes out of
    # the forward pass, where a gather from log_softmax scatters into a new dense [B, N, V] tensor.
    # On CPU the same op as a kernel that works through the logits row by row inside the cache.
    if cpu_kernels.usable(logits.dtype):
        per_slot_loss = cpu_kernels.sparse_softmax_cross_entropy(labels, logits)  # [B, N]
    else:
        per_slot_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    weights = tf.cast(masked_lm_weights, tf.float32)
    loss = tf.reduce_sum(weights * per_slot_loss) / (tf.reduce_sum(weights) + 1e-6)
    preds = tf.argmax(logits, axis=-1, output_type=tf.int32)  # = argmax of the log-probabilities
    return MlmOutput(loss=loss, per_slot_loss=per_slot_loss, preds=preds)


def rtd_loss(logits: tf.Tensor, labels: tf.Tensor, input_mask: tf.Tensor,
             weights: Optional[tf.Tensor] = None) -> RtdOutput:
    """Discriminator (replaced token detection) sigmoid cross-entropy.

    Args:
      logits: [B, L] discriminator logits.
      labels: [B, L] 1 = replaced, 0 = original (`FakeData.is_replaced`).
      input_mask: [B, L] 1 for real tokens, 0 for padding.
      weights: optional [B, L] extra 0/1 mask ("ELECTRA 15%": `FakeData.selected`).
    """
    logits = tf.cast(logits, tf.float32)
    mask = tf.cast(input_mask, tf.float32)
    if weights is not None:
        mask *= tf.cast(weights, tf.float32)
    losses = tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.float32), logits=logits) * mask  # [B, L]
    per_example_loss = tf.reduce_sum(losses, axis=-1) / (1e-6 + tf.reduce_sum(mask, axis=-1))
    loss = tf.reduce_sum(losses) / (1e-6 + tf.reduce_sum(mask))
    preds = tf.cast(logits > 0, tf.int32)  # = round((sign(logit) + 1) / 2), logit 0 -> 0
    return RtdOutput(loss=loss, per_example_loss=per_example_loss, probs=tf.sigmoid(logits),
                     preds=preds)


def total_loss(mlm: tf.Tensor, disc: tf.Tensor, gen_weight: float = 1.0,
               disc_weight: float = 50.0) -> tf.Tensor:
    """gen_weight * MLM loss + disc_weight * discriminator loss (float32 scalar)."""
    return gen_weight * tf.cast(mlm, tf.float32) + disc_weight * tf.cast(disc, tf.float32)
