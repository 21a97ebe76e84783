"""The fine-tuning model: the discriminator encoder (`electra/...`) shared by one head per task.

As the original, a batch may mix tasks: every head runs on every example, and each example's loss
is its own task's (`task_id`); the batch loss is their sum (the original's `reduce_sum`, so the
global-norm clip acts on the summed gradient; with `loss_reduction: "mean"` the runner divides it
by the global batch's rows, which under a strategy a replica does not see alone).
"""

from typing import Dict, Sequence

import tensorflow as tf
import tf_keras

from electra_tf.modeling import BertConfig, build_encoder
from electra_tf.modeling.layer_utils import build_in_scope

TASK_SCOPE = "task_specific"  # the layer-wise LR decay gives this scope the full learning rate


class FinetuningModel(tf_keras.Model):
    """`call(batch)` -> {task name: head output}; see `finetune.inputs` for the batch's keys."""

    def __init__(self, encoder_config: BertConfig, tasks: Sequence, config=None, **kwargs):
        """`tasks` are `finetune.task.Task`s; `config` (a FinetuningConfig) sets the SQuAD head's options."""
        super().__init__(name="finetuning_model", **kwargs)
        self.encoder_config = encoder_config
        self.tasks = list(tasks)
        self.encoder = build_encoder(encoder_config, name="electra")
        hidden = encoder_config.hidden_size
        self.heads = [task.make_head(config, hidden) for task in self.tasks]
        for head in self.heads:
            build_in_scope(head, None, TASK_SCOPE)
        self.cls_only = all(task.reads_cls_only for task in self.tasks)

    def call(self, batch, training: bool = False) -> Dict[str, tf.Tensor]:
        # When every head reads [CLS] alone, the last block computes only that row: [B, H] -> [B, 1, H].
        sequence = self.encoder(batch["input_ids"], batch["input_mask"], batch["segment_ids"],
                                training=training, cls_only=self.cls_only)  # [B, L, H]
        if self.cls_only:
            sequence = sequence[:, tf.newaxis]
        return {task.name: head(sequence, batch, training=training) for task, head in zip(self.tasks, self.heads)}

    def loss(self, batch, outputs) -> tf.Tensor:
        """Each example's loss under its own task's head, summed over the batch; []."""
        total = tf.constant(0.0)
        for task_id, (task, head) in enumerate(zip(self.tasks, self.heads)):
            own = tf.cast(tf.equal(batch["task_id"], task_id), tf.float32)  # [B]
            total += tf.reduce_sum(head.per_example_loss(outputs[task.name], batch) * own)
        return total

    def head_of(self, task_name: str):
        """The head of the task named `task_name`."""
        return self.heads[[task.name for task in self.tasks].index(task_name)]

    def predictions(self, outputs) -> Dict[str, tf.Tensor]:
        return {task.name: head.predictions(outputs[task.name]) for task, head in zip(self.tasks, self.heads)}

    @property
    def encoder_variables(self):
        return self.encoder.variables
