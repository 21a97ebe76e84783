"""The `[CLS]` heads on the shared encoder, one per task, under `task_specific/<task>/` (the original's names).

A head reads the whole sequence output [B, L, H] and the batch, as the tagging and QA heads do:
`call` gives the head's output, `per_example_loss` a loss per example [B] (the model keeps the
rows of the head's own task), `predictions` what scorers and test files use. They are the
original's: the `[CLS]` vector -> dropout 0.1 (training only) ->
dense (glorot init, TF1's `tf.layers.dense` default). HF's two-layer `ElectraClassificationHead`
is deliberately not used.
"""

import tensorflow as tf
import tf_keras

from electra_tf.modeling.dropout import Dropout
from electra_tf.modeling.layer_utils import build_in_scope

HEAD_DROPOUT = 0.1


class ClsHead(tf_keras.layers.Layer):
    """dropout + dense(units) on `[CLS]`; variables `task_specific/<task>/dense/{kernel,bias}`."""

    def __init__(self, task_name: str, units: int, hidden_size: int, **kwargs):
        super().__init__(name=task_name, **kwargs)
        self.hidden_size = hidden_size
        self.dropout = Dropout(HEAD_DROPOUT)
        self.dense = tf_keras.layers.Dense(units, name="dense")

    def build(self, input_shape=None):
        build_in_scope(self.dense, [None, self.hidden_size])
        super().build(input_shape)

    def call(self, sequence_output, batch=None, training=False):
        """sequence_output [B, L, H] -> float32 [B, units] (the batch is not needed)."""
        cls = self.dropout(sequence_output[:, 0], training=training)  # [B, H]
        return tf.cast(self.dense(cls), tf.float32)


class ClassificationHead(ClsHead):
    """Softmax classifier; loss: cross-entropy with `label_ids`."""

    def __init__(self, task_name: str, num_labels: int, hidden_size: int, **kwargs):
        super().__init__(task_name, num_labels, hidden_size, **kwargs)

    def per_example_loss(self, logits, batch):
        """logits [B, C] -> [B]. Rows of another task (a multi-task batch) may hold labels past C:
        clipped into range, their loss is masked out by the model (`task_id`)."""
        labels = tf.clip_by_value(batch["label_ids"], 0, tf.shape(logits)[-1] - 1)
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)

    def predictions(self, logits):
        return tf.argmax(logits, axis=-1, output_type=tf.int32)  # [B]


class RegressionHead(ClsHead):
    """One score per example (STS-B, normalised to [0, 1]); loss: squared error with `targets`."""

    def __init__(self, task_name: str, hidden_size: int, **kwargs):
        super().__init__(task_name, 1, hidden_size, **kwargs)

    def per_example_loss(self, output, batch):
        """output [B, 1] -> [B]."""
        return tf.square(output[:, 0] - batch["targets"])

    def predictions(self, output):
        return output[:, 0]  # [B]
