"""The training step: forward, gradients, optional dynamic loss scaling, optimizer update.

`make_train_step` returns the per-replica step that a runner calls inside `strategy.run` and loops
in a `tf.function`. It is the original's `tf.gradients` + `apply_gradients`
(docs/fidelity.md#optimizer-and-schedule) and nothing else: gradient clipping is done once, inside
the optimizer's `apply_gradients` (`global_clipnorm`, after cross-replica aggregation and after a
LossScaleOptimizer unscales), so by default the step does not clip. With `clip_norm` it clips each
replica's own gradient before the optimizer aggregates them: the original's TPU runs, where every
shard clipped and `CrossShardOptimizer` summed the clipped gradients (`per_replica_clipping`; the
optimizer must then not clip again).

With `jit_compile=True` the forward and backward pass (loss → gradients) are one XLA cluster
(`tf.function(jit_compile=True)`); `apply_gradients` stays outside it, since under a
MirroredStrategy it holds the cross-replica all-reduce, which XLA cannot compile.
"""

from typing import Any, Callable, List, Optional, Tuple

import tensorflow as tf
import tf_keras

from electra_tf.optimization import clip_by_exact_global_norm

# loss_fn(model, features, seed) -> (loss [] float32, output: whatever on_output wants to see)
LossFn = Callable[[tf_keras.Model, dict, Optional[tf.Tensor]], Tuple[tf.Tensor, Any]]


def _pretraining_loss(stage: str) -> LossFn:
    """The loss of a `PretrainingModel` (or any model whose call returns an object with `.loss`)."""

    def loss_fn(model, features, seed):
        output = model(features, training=True, seed=seed, stage=stage)
        return output.loss, output

    return loss_fn


def make_train_step(model: tf_keras.Model, optimizer: tf_keras.optimizers.legacy.Optimizer, *,
                    loss_fn: Optional[LossFn] = None, stage: str = "joint", variables: Optional[list] = None,
                    jit_compile: bool = False,
                    gradient_accumulation_steps: int = 1, sum_micro_batches: bool = False,
                    clip_norm: Optional[float] = None,
                    on_output: Optional[Callable[[dict, Any], None]] = None,
                    on_gradients: Optional[Callable[[List[Any]], None]] = None
                    ) -> Callable[[dict, Optional[tf.Tensor]], tf.Tensor]:
    """The per-replica training step `step(features, seed) -> loss` (float32 scalar).

    Args:
      model: a built model.
      optimizer: a legacy tf_keras optimizer (e.g. `create_optimizer`'s), or a
        `tf_keras.mixed_precision.LossScaleOptimizer` around one, which turns on dynamic loss
        scaling (the loss is scaled before differentiation and the gradients unscaled after).
      loss_fn: `loss_fn(model, features, seed) -> (loss, output)`; default: the `.loss` of
        `model(features, training=True, seed=seed, stage=stage)` and that model output.
      stage: the pretraining stage ("joint", "generator" or "discriminator").
      variables: the variables trained; default all of the model's trainable ones (a
        PretrainingModel's `trainable_variables_for(stage)` leaves a frozen generator out).
      jit_compile: compile forward + backward with XLA.
      gradient_accumulation_steps: k > 1 splits the batch of B rows into k micro-batches (rows
        [j*B//k, (j+1)*B//k): equal when k divides B, else differing by a row; an empty one, when
        B < k, is skipped), averages their gradients in per-replica accumulators and applies them
        once, with the memory of one micro-batch. This is the update of the k-times larger batch
        when the loss is a mean over equally weighted rows; ELECTRA's token-normalised losses make
        it a mean of micro-batch means, equal when the micro-batches hold as many tokens and masked
        slots. Micro-batch j draws its randomness from `fold_in(seed, j)`.
      sum_micro_batches: add the micro-batches' gradients and losses up instead of averaging them:
        the batch's update when `loss_fn` gives each micro-batch its rows' share of the batch's
        loss (a sum over rows, or their part of its mean). Scaling such a loss by k instead would
        make each row's float16 gradient k times larger under loss scaling, overflowing where the
        whole batch does not.
      clip_norm: clip each replica's (accumulated) gradient to this global norm before the
        optimizer aggregates it; None (default) leaves clipping to the optimizer.
      on_output: called as `on_output(micro_batch_features, output)` after each forward pass (for
        metrics), outside XLA.
      on_gradients: called with the gradients the optimizer is given (unscaled, averaged over the
        micro-batches; a replica's own under a strategy), before it aggregates and clips them.

    Variables without a gradient (None: unused by this loss) are skipped, not updated.
    """
    loss_fn = loss_fn or _pretraining_loss(stage)
    variables = model.trainable_variables if variables is None else variables
    scales_loss = isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer)
    inner = optimizer.inner_optimizer if scales_loss else optimizer
    if clip_norm is not None and getattr(inner, "global_clipnorm", None) is not None:
        raise ValueError("clip_norm: the optimizer clips too (global_clipnorm); each gradient would be clipped "
                         "twice: create it with clip_norm=None")

    def loss_and_gradients(features, seed):
        with tf.GradientTape() as tape:
            loss, output = loss_fn(model, features, seed)
            loss = tf.cast(loss, tf.float32)  # []
            target = optimizer.get_scaled_loss(loss) if scales_loss else loss
        grads = tape.gradient(target, variables)
        if scales_loss:
            grads = optimizer.get_unscaled_gradients(grads)
        return loss, grads, output

    if jit_compile:
        loss_and_gradients = tf.function(loss_and_gradients, jit_compile=True, autograph=False)

    def forward_backward(features, seed):
        loss, grads, output = loss_and_gradients(features, seed)
        if on_output is not None:
            on_output(features, output)
        return loss, grads

    def apply(grads):
        if on_gradients is not None:
            on_gradients([g for g in grads if g is not None])
        if clip_norm is not None:
            grads = clip_by_exact_global_norm(grads, clip_norm)
        optimizer.apply_gradients([(g, v) for g, v in zip(grads, variables) if g is not None])

    if gradient_accumulation_steps == 1:
        def step(features, seed=None):
            loss, grads = forward_backward(features, seed)
            apply(grads)
            return loss

        return step

    k = gradient_accumulation_steps
    # Per-replica sums of the micro-batch gradients (ON_READ: each replica keeps its own).
    accumulators = [tf.Variable(tf.zeros_like(v), trainable=False, name="grad_accumulator",
                                synchronization=tf.VariableSynchronization.ON_READ,
                                aggregation=tf.VariableAggregation.SUM) for v in variables]

    def step(features, seed=None):
        seed = tf.random.uniform([2], maxval=2 ** 30, dtype=tf.int32) if seed is None else seed
        rows = tf.shape(next(iter(features.values())))[0]
        fixed = next(iter(features.values())).shape[0]  # a static batch that k divides keeps static micro-batches
        size = fixed // k if fixed is not None and fixed % k == 0 else None
        used = []  # which variables get gradients: fixed when the loop body is traced

        def accumulate(micro, micro_seed):
            loss, grads = forward_backward(micro, micro_seed)
            used[:] = [g is not None for g in grads]
            with tf.control_dependencies([accumulator.assign_add(tf.convert_to_tensor(grad))
                                          for accumulator, grad in zip(accumulators, grads) if grad is not None]):
                return tf.identity(loss)

        def micro_step(j, total):
            micro_seed = tf.random.experimental.stateless_fold_in(tf.cast(seed, tf.int64), tf.cast(j, tf.int64))
            first, end = j * rows // k, (j + 1) * rows // k
            micro = {name: tf.ensure_shape(t[first:end], [size, *t.shape[1:]]) for name, t in features.items()}
            if size:  # static and equal micro-batches, none of them empty
                return j + 1, total + accumulate(micro, micro_seed)
            loss = tf.cond(end > first, lambda: accumulate(micro, micro_seed), lambda: tf.constant(0.0))
            return j + 1, total + loss

        _, total = tf.while_loop(lambda j, _: j < k, micro_step, (tf.constant(0), tf.constant(0.0)))
        divisor = 1 if sum_micro_batches else k
        apply([a.read_value() / divisor if use else None for a, use in zip(accumulators, used)])
        for accumulator in accumulators:
            accumulator.assign(tf.zeros_like(accumulator))
        return total / divisor

    return step
