"""The original's eight pre-training eval metrics (spec §5.5) as streaming tf_keras metrics.

- masked_lm_accuracy: argmax generator prediction == target, weighted by masked_lm_weights.
- masked_lm_loss: per-slot MLM loss, weighted by masked_lm_weights.
- sampled_masked_lm_accuracy: sampled token == target, weighted by masked_lm_weights.
- disc_loss: mean of the per-example discriminator losses.
- disc_auc: ROC AUC of labels*input_mask vs probs*input_mask over ALL positions (padding counts
  as a negative scored 0, as in the original); 200 thresholds, trapezoidal, as tf.metrics.auc.
- disc_accuracy: preds == labels, weighted by input_mask.
- disc_precision: preds == labels, weighted by preds*input_mask.
- disc_recall: preds == labels, weighted by labels*input_mask.

As in the original, `sampled_masked_lm_accuracy` exists only for the ELECTRA objective and the
disc_* metrics only when disc_weight > 0. Create the object under the strategy's scope; then
`update_state` may run inside a tf.function / `strategy.run`, and `result()` reads the totals.
"""

from typing import Optional

import tensorflow as tf
import tf_keras

from electra_tf.objectives.losses import MlmOutput, RtdOutput

MLM_METRICS = ("masked_lm_accuracy", "masked_lm_loss")
SAMPLED_METRICS = ("sampled_masked_lm_accuracy",)
DISC_METRICS = ("disc_loss", "disc_auc", "disc_accuracy", "disc_precision", "disc_recall")


def _flat(tensor: tf.Tensor) -> tf.Tensor:
    return tf.reshape(tf.cast(tensor, tf.float32), [-1])


def _matches(labels: tf.Tensor, preds: tf.Tensor) -> tf.Tensor:
    return _flat(tf.equal(tf.cast(labels, tf.int32), tf.cast(preds, tf.int32)))


class PretrainingMetrics(tf.Module):
    """Streaming accumulators for the pre-training eval metrics; `result()` -> {name: float}."""

    def __init__(self, electra_objective: bool = True, disc_weight: float = 50.0):
        super().__init__(name="pretraining_metrics")
        self.names = MLM_METRICS
        if electra_objective:
            self.names += SAMPLED_METRICS
            if disc_weight > 0:
                self.names += DISC_METRICS
        self.metrics = {name: (tf_keras.metrics.AUC(num_thresholds=200, curve="ROC", name=name)
                               if name == "disc_auc" else tf_keras.metrics.Mean(name=name))
                        for name in self.names}

    def update_state(self, *, masked_lm_ids: tf.Tensor, masked_lm_weights: tf.Tensor,
                     mlm: MlmOutput, sampled_ids: Optional[tf.Tensor] = None,
                     rtd: Optional[RtdOutput] = None, rtd_labels: Optional[tf.Tensor] = None,
                     input_mask: Optional[tf.Tensor] = None) -> None:
        """Add one batch. [B, N]: masked_lm_ids/weights, sampled_ids; [B, L]: rtd_labels, input_mask.

        `sampled_ids` is needed for the ELECTRA objective; `rtd`, `rtd_labels` and `input_mask`
        when the disc_* metrics are kept.
        """
        m = self.metrics
        lm_weights = _flat(masked_lm_weights)
        m["masked_lm_accuracy"].update_state(_matches(masked_lm_ids, mlm.preds), lm_weights)
        m["masked_lm_loss"].update_state(_flat(mlm.per_slot_loss), lm_weights)
        if "sampled_masked_lm_accuracy" in m and sampled_ids is not None:  # None: generator-only stage
            m["sampled_masked_lm_accuracy"].update_state(
                _matches(masked_lm_ids, sampled_ids), lm_weights)
        if "disc_loss" in m and rtd is not None:
            mask = _flat(input_mask)
            labels = _flat(rtd_labels)
            preds = _flat(rtd.preds)
            correct = _matches(rtd_labels, rtd.preds)
            m["disc_loss"].update_state(_flat(rtd.per_example_loss))
            m["disc_auc"].update_state(labels * mask, _flat(rtd.probs) * mask)
            m["disc_accuracy"].update_state(correct, mask)
            m["disc_precision"].update_state(correct, preds * mask)
            m["disc_recall"].update_state(correct, labels * mask)

    def result(self) -> dict[str, float]:
        """The metrics so far as Python floats (call eagerly)."""
        return {name: float(self.metrics[name].result()) for name in self.names}

    def reset_state(self) -> None:
        for metric in self.metrics.values():
            metric.reset_state()
