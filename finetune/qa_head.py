"""The original's SQuAD head (XLNet-style; docs/fidelity.md#fine-tuning-heads-and-loss): start
logits, end logits conditioned on the start, an answerability classifier, and joint start/end
beam search at inference.

With L positions, H hidden units and the answer mask m = input_mask * segment_ids + one_hot(0)
(the context, and `[CLS]` as the null answer):
- start logits s = dense(h) [B, L], + 1000 (m - 1) (joint prediction);
- end logits for a start i: dense_1(gelu(qa_hidden([h_i ; h_j]))) for every position j, + 1000 (m - 1).
  Training conditions on the gold start; inference takes the top `beam_size` starts of
  log_softmax(s) and the top `beam_size` ends of each (log-probabilities [B, k] and [B, k, k]);
- answerability: dense_3(gelu(dense_2([h_[CLS] ; sum_j softmax(s)_j h_j]))) [B], a logit of
  *is_impossible* (the original's "answerable_logit"; its minimum over windows is the null odds);
- loss per example: (CE(s, start) + CE(end, end)) / 2 + answerable_weight * sigmoid_CE(logit, is_impossible).
Variables are the original's: task_specific/<task>/{dense, qa_hidden, dense_1, dense_2, dense_3}
(without the start-weighted feature the answerability logit is dense_2 on `[CLS]`; without joint
prediction the end logits are dense_1(h), both masked, and the candidates are the top `n_best_size`
logits of each, as the original's `qa_metrics.write_predictions` takes them).

At inference the [k, L, 2H] x [2H, 512] product is computed as (h_i W_start)[k] + (h_j W_end)[L]
with qa_hidden's kernel split in two halves: the same numbers without a k-fold copy of h.
"""

import tensorflow as tf
import tf_keras

from electra_tf.modeling.layer_utils import build_in_scope, gelu

QA_HIDDEN = 512  # width of the end and answerability hidden layers (the original's)
MASK_PENALTY = 1000.0


def _cross_entropy(logits, positions):
    """logits [B, L], positions [B] -> [B]."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(positions, tf.int32), logits=logits)


class QAHead(tf_keras.layers.Layer):
    """`call(sequence_output, batch, training)` -> dict of float32 / int32 tensors:

    start_logits [B, L], end_logits [B, L] (for the gold start of `batch["start_positions"]`),
    answerable_logit [B], null_score [B] (answerable_logit; without the classifier s_0, or s_0 + e_0
    without joint prediction either),
    start_top_log_probs / start_top_index [B, k], end_top_log_probs / end_top_index [B, k, k]
    (inference only; k = min(beam_size, L), or min(n_best_size, L) without joint prediction).
    The batch needs input_mask, segment_ids and (training; for the loss) start_positions,
    end_positions, is_impossible.
    """

    def __init__(self, task_name: str, hidden_size: int, beam_size: int = 20, joint_prediction: bool = True,
                 answerable_classifier: bool = True, answerable_uses_start_logits: bool = True,
                 answerable_weight: float = 0.5, n_best_size: int = 20, **kwargs):
        super().__init__(name=task_name, **kwargs)
        self.hidden_size, self.beam_size, self.n_best_size = hidden_size, beam_size, n_best_size
        self.joint_prediction = joint_prediction
        self.answerable_classifier = answerable_classifier
        self.answerable_uses_start_logits = answerable_uses_start_logits
        self.answerable_weight = answerable_weight
        names = iter(["dense_1", "dense_2", "dense_3"])  # TF1 numbers unnamed dense layers in order
        self.start_dense = tf_keras.layers.Dense(1, name="dense")
        self.qa_hidden = None
        if joint_prediction:
            self.qa_hidden = tf_keras.layers.Dense(QA_HIDDEN, activation=gelu, name="qa_hidden")
        self.end_dense = tf_keras.layers.Dense(1, name=next(names))
        self.answerable_hidden = self.answerable_dense = None
        if answerable_classifier:
            if answerable_uses_start_logits:
                self.answerable_hidden = tf_keras.layers.Dense(QA_HIDDEN, activation=gelu, name=next(names))
            self.answerable_dense = tf_keras.layers.Dense(1, name=next(names))

    def build(self, input_shape=None):
        h = self.hidden_size
        build_in_scope(self.start_dense, [None, h])
        if self.joint_prediction:
            build_in_scope(self.qa_hidden, [None, 2 * h])
            build_in_scope(self.end_dense, [None, QA_HIDDEN])
        else:
            build_in_scope(self.end_dense, [None, h])
        if self.answerable_hidden is not None:
            build_in_scope(self.answerable_hidden, [None, 2 * h])
            build_in_scope(self.answerable_dense, [None, QA_HIDDEN])
        elif self.answerable_dense is not None:
            build_in_scope(self.answerable_dense, [None, h])
        super().build(input_shape)

    def _end_logits_for(self, hidden, start_features, penalty):
        """hidden [B, L, H], start_features [B, H] -> end logits [B, L] given that start."""
        length = tf.shape(hidden)[1]
        tiled = tf.tile(start_features[:, None, :], [1, length, 1])  # [B, L, H]
        end_hidden = self.qa_hidden(tf.concat([tiled, hidden], -1))  # [B, L, 512]
        return self.end_dense(end_hidden)[..., 0] + penalty  # [B, L]

    def _beam(self, hidden, start_logits, penalty, outputs):
        """Top-k starts, then the top-k ends of each (the original's joint beam search)."""
        k = tf.minimum(self.beam_size, tf.shape(hidden)[1])
        start_log_probs = tf.nn.log_softmax(start_logits)  # [B, L]
        outputs["start_top_log_probs"], outputs["start_top_index"] = tf.math.top_k(start_log_probs, k)  # [B, k]
        start_features = tf.gather(hidden, outputs["start_top_index"], batch_dims=1)  # [B, k, H]
        kernel = tf.cast(self.qa_hidden.kernel, hidden.dtype)  # [2H, 512]
        from_start = tf.einsum("bkh,hd->bkd", start_features, kernel[:self.hidden_size])  # [B, k, 512]
        from_end = tf.einsum("blh,hd->bld", hidden, kernel[self.hidden_size:])  # [B, L, 512]
        end_hidden = gelu(from_start[:, :, None, :] + from_end[:, None, :, :]
                          + tf.cast(self.qa_hidden.bias, hidden.dtype))  # [B, k, L, 512]
        end_logits = tf.cast(self.end_dense(end_hidden)[..., 0], tf.float32) + penalty[:, None, :]  # [B, k, L]
        outputs["end_top_log_probs"], outputs["end_top_index"] = tf.math.top_k(tf.nn.log_softmax(end_logits), k)

    def call(self, sequence_output, batch, training=False):
        hidden = sequence_output  # [B, L, H]
        mask = tf.cast(batch["input_mask"] * batch["segment_ids"], tf.float32)  # [B, L]
        mask = tf.maximum(mask, tf.one_hot(0, tf.shape(hidden)[1]))  # [CLS] may hold the null answer
        penalty = MASK_PENALTY * (mask - 1.0)  # [B, L]
        start_logits = tf.cast(self.start_dense(hidden)[..., 0], tf.float32)  # [B, L]
        outputs = {}
        if self.joint_prediction:
            start_logits += penalty
            gold_start = tf.cast(batch.get("start_positions", tf.zeros_like(batch["input_mask"][:, 0])), tf.int32)
            start_features = tf.gather(hidden, gold_start, batch_dims=1)  # [B, H]
            end_logits = tf.cast(self._end_logits_for(hidden, start_features, tf.cast(penalty, hidden.dtype)),
                                 tf.float32)
            if not training:
                self._beam(hidden, start_logits, penalty, outputs)
        else:
            start_logits += penalty
            end_logits = tf.cast(self.end_dense(hidden)[..., 0], tf.float32) + penalty
            if not training:
                k = tf.minimum(self.n_best_size, tf.shape(hidden)[1])
                outputs["start_top_log_probs"], outputs["start_top_index"] = tf.math.top_k(start_logits, k)
                top_end, top_end_index = tf.math.top_k(end_logits, k)  # [B, k]
                outputs["end_top_log_probs"] = tf.tile(top_end[:, None, :], [1, k, 1])  # [B, k, k]
                outputs["end_top_index"] = tf.tile(top_end_index[:, None, :], [1, k, 1])
        answerable_logit = tf.zeros_like(start_logits[:, 0])  # [B]
        if self.answerable_classifier:
            features = hidden[:, 0]  # [B, H]
            if self.answerable_uses_start_logits:
                start_probs = tf.cast(tf.nn.softmax(start_logits), hidden.dtype)  # [B, L]
                weighted = tf.reduce_sum(start_probs[..., None] * hidden, axis=1)  # [B, H]
                features = self.answerable_hidden(tf.concat([features, weighted], -1))  # [B, 512]
            answerable_logit = tf.cast(self.answerable_dense(features)[:, 0], tf.float32)
        outputs.update(start_logits=start_logits, end_logits=end_logits, answerable_logit=answerable_logit)
        # The original's null score: the classifier's logit, or the `[CLS]` start + end logits (whose
        # end logits are zeros at joint inference).
        if self.answerable_classifier:
            outputs["null_score"] = answerable_logit
        elif self.joint_prediction:
            outputs["null_score"] = start_logits[:, 0]
        else:
            outputs["null_score"] = start_logits[:, 0] + end_logits[:, 0]
        return outputs

    def per_example_loss(self, outputs, batch):
        """-> [B]: mean of the start and end cross-entropies, plus the weighted answerability loss."""
        loss = (_cross_entropy(outputs["start_logits"], batch["start_positions"])
                + _cross_entropy(outputs["end_logits"], batch["end_positions"])) / 2.0
        if self.answerable_classifier:
            loss += self.answerable_weight * tf.nn.sigmoid_cross_entropy_with_logits(
                labels=tf.cast(batch["is_impossible"], tf.float32), logits=outputs["answerable_logit"])
        return loss

    def predictions(self, outputs):
        """What `finetune.squad_postprocess` reads, per window."""
        keys = ("start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index", "null_score")
        return {key: outputs[key] for key in keys}
