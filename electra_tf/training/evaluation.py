"""Pretraining evaluation on held-out data: every example, the same masks at every evaluation.

`Evaluator.evaluate` reads the held-out batches (at most `num_eval_steps`, the last one partial)
with dropout off, and returns the metrics of `electra_tf.objectives.metrics` with the loss and
how much was read: `eval_examples`, `eval_batches` and `eval_complete` (1.0 when the whole
held-out set was read). Masks and samples are seeded by batch index, so successive evaluations
of one run (the `eval_every_steps` curve) compare like with like.
"""

from typing import Dict

import tensorflow as tf
import tf_keras

from electra_tf.errors import InputError
from electra_tf.objectives import PretrainingMetrics, slots_showing_mask


def update_metrics(metrics: PretrainingMetrics, features, output, mask_id: int) -> None:
    """Adds one batch's `PretrainingOutput` to `metrics`."""
    rtd = output.rtd
    metrics.update_state(masked_lm_ids=output.masked.masked_lm_ids,
                         masked_lm_weights=output.masked.masked_lm_weights,
                         slots_at_mask=slots_showing_mask(output.masked, mask_id), mlm=output.mlm,
                         sampled_ids=output.sampled_ids, rtd=rtd,
                         rtd_labels=None if rtd is None else output.fake.is_replaced,
                         input_mask=features["input_mask"])


class Evaluator:
    """The held-out evaluation of one run's model under its strategy (create in its scope)."""

    def __init__(self, strategy, model, electra_objective: bool, disc_weight: float, seed: int):
        self.strategy, self.model = strategy, model
        self.metrics = PretrainingMetrics(electra_objective=electra_objective, disc_weight=disc_weight)
        self.loss = tf_keras.metrics.Mean("loss")
        self.examples = tf_keras.metrics.Sum("eval_examples")
        self.base_seed = tf.constant([seed + 1, 1], tf.int64)  # not the training steps' seeds
        self._step = None

    def _eval_step(self):
        """The compiled evaluation step, traced once per batch shape (full and last partial)."""
        if self._step is not None:
            return self._step

        def replica_eval(features, batch):
            seed = tf.random.experimental.stateless_fold_in(self.base_seed, batch)  # fresh masks per batch
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            output = self.model(features, training=False, seed=tf.random.experimental.stateless_fold_in(seed, replica))
            update_metrics(self.metrics, features, output, self.model.special_ids["mask_id"])
            self.loss.update_state(output.loss)
            self.examples.update_state(tf.cast(tf.shape(features["input_ids"])[0], tf.float32))

        @tf.function(autograph=False)
        def eval_step(features, batch):
            self.strategy.run(replica_eval, args=(features, batch))

        self._step = eval_step
        return eval_step

    def evaluate(self, dataset, num_steps: int) -> Dict[str, float]:
        """The metrics and the loss over the held-out batches of a distributed `dataset`."""
        for metric in (self.metrics, self.loss, self.examples):
            metric.reset_state()
        eval_step = self._eval_step()
        batches, iterator = 0, iter(dataset)
        for features in iterator:
            eval_step(features, tf.constant(batches, tf.int64))
            batches += 1
            if batches >= num_steps:
                break
        if batches == 0:
            raise InputError("evaluation data is empty (check eval_tfrecords)")
        complete = batches < num_steps or next(iterator, None) is None
        return {"loss": float(self.loss.result()), **self.metrics.result(),
                "eval_examples": int(self.examples.result()), "eval_batches": batches,
                "eval_complete": float(complete)}


def check_eval_data(eval_dataset_fn) -> None:
    """Refuses, before any training, a held-out set without a single example."""
    for _ in eval_dataset_fn(tf.distribute.InputContext()).take(1):
        return
    raise InputError("evaluation data is empty: the eval_tfrecords files hold no example "
                     "(build the data with a held-out share, or set do_eval to false)")


def eval_summary(metrics: Dict[str, float]) -> str:
    """One line: how much was evaluated, and the headline metrics over real tokens."""
    seen = (f"{metrics['eval_examples']:,} held-out examples in {metrics['eval_batches']} batches"
            + ("" if metrics["eval_complete"] else " (stopped at num_eval_steps: not the whole set)"))
    shown = [f"generator accuracy {metrics['masked_lm_accuracy']:.3f}"
             + (f" (at [MASK] {metrics['masked_lm_accuracy_at_mask']:.3f})"
                if "masked_lm_accuracy_at_mask" in metrics else "")]
    if "disc_auc" in metrics:
        shown += [f"sample = original {metrics['sampled_masked_lm_accuracy']:.3f}",
                  f"real-token AUC {metrics['disc_auc']:.3f}",
                  f"disc_loss {metrics['disc_loss']:.4f} (constant predictor "
                  f"{metrics['disc_loss_constant_predictor']:.4f})"]
    return f"{seen}: " + ", ".join(shown)
