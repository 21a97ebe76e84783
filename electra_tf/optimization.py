"""Optimisation as in the original release (`model/optimization.py`).

- Learning rate: polynomial decay from step 0, multiplied by a linear warmup factor
  `min(1, step / warmup)`; the two run at the same time (decay does not wait for warmup to end).
- `AdamWeightDecay`: BERT's Adam without bias correction, eps 1e-6, with decoupled weight decay
  skipped for LayerNorm and bias variables, and an optional layer-wise LR multiplier; Adam's bias
  correction is opt-in (`bias_correction`), for short warm-ups, which the original's 10,000-step
  warm-up made unnecessary.
- Gradients are clipped to global norm 1.0 over all variables before the update.
- `create_optimizer` mirrors the original's factory; LAMB (Model Garden's) is an alternative.

Both optimizers subclass tf_keras's legacy `OptimizerV2` (`tf_keras.optimizers.legacy.Optimizer`)
rather than the newer `tf_keras.optimizers.Optimizer`, because:
- its `add_slot` names a slot `<var>/<slot>`, so the slots `adam_m` / `adam_v` carry exactly the
  original checkpoint's names;
- Model Garden's LAMB is built on it, so both choices share one code path;
- its `apply_gradients` aggregates gradients across replicas (tf.distribute) and only then applies
  `global_clipnorm`, and `tf_keras.mixed_precision.LossScaleOptimizer` wraps it by aggregating,
  checking for non-finite values and calling the inner optimizer, whose clipping then sees the
  aggregated gradient, unscaled by the loop's `get_unscaled_gradients` (as the original: clip the
  global norm of all gradients, then update).
"""

import re

import tensorflow as tf
import tf_keras
from official.modeling.optimization import lamb

from electra_tf import cpu_kernels, layerwise_decay
from electra_tf.errors import InputError

CLIP_NORM = 1.0
EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")
OPTIMIZERS = ("adamw", "lamb")


@tf_keras.utils.register_keras_serializable(package="electra_tf")
class PolynomialDecayWithWarmup(tf_keras.optimizers.schedules.LearningRateSchedule):
    """`lr_t = polynomial_decay(lr, step, decay_steps, end, power) * min(1, step / warmup_steps)`.

    Decay counts from step 0, also during warmup. Model Garden's `PolynomialWarmUp` instead warms up
    to the decayed value at the end of warmup, which gives different rates during warmup, hence this
    class. `warmup_steps = 0` means no warmup (the original's formula would divide by zero).
    """

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: float,
        warmup_steps: float = 0.0,
        end_learning_rate: float = 0.0,
        power: float = 1.0,
        name: str = "PolynomialDecayWithWarmup",
    ):
        super().__init__()
        self.initial_learning_rate = float(initial_learning_rate)
        self.decay_steps = float(decay_steps)
        self.warmup_steps = float(warmup_steps)
        self.end_learning_rate = float(end_learning_rate)
        self.power = float(power)
        self.name = name

    def __call__(self, step):
        with tf.name_scope(self.name):
            step = tf.cast(step, tf.float32)
            progress = tf.minimum(step, self.decay_steps) / self.decay_steps  # cycle=False
            span = self.initial_learning_rate - self.end_learning_rate
            lr = span * tf.pow(1.0 - progress, self.power) + self.end_learning_rate
            if self.warmup_steps > 0:
                lr *= tf.minimum(1.0, step / self.warmup_steps)
            return lr

    def get_config(self):
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "decay_steps": self.decay_steps,
            "warmup_steps": self.warmup_steps,
            "end_learning_rate": self.end_learning_rate,
            "power": self.power,
            "name": self.name,
        }


def sum_duplicate_indices(grads_and_vars):
    """Sums the rows of IndexedSlices gradients that share an index (a token looked up twice).

    `tf.clip_by_global_norm` squares the slices as given, so with repeated indices it measures
    sum(|g_a|^2 + |g_b|^2) instead of |g_a + g_b|^2: not the norm of the gradient. The original
    clipped dense gradients (one-hot embedding matmul on TPU), so this runs before clipping.
    """
    summed = []
    for grad, var in grads_and_vars:
        if isinstance(grad, tf.IndexedSlices):
            rows, positions = tf.unique(grad.indices)  # rows: [n_unique], positions: [n]
            values = tf.math.unsorted_segment_sum(grad.values, positions, tf.shape(rows)[0])
            grad = tf.IndexedSlices(values, rows, grad.dense_shape)
        summed.append((grad, var))
    return summed


def gradient_norm(grads) -> tf.Tensor:
    """The global norm that `global_clipnorm` compares with its threshold (duplicate rows summed
    first, as the optimizer does); [] float32. Logged as the training's `grad_norm`."""
    return tf.linalg.global_norm([g for g, _ in sum_duplicate_indices([(g, None) for g in grads if g is not None])])


def current_learning_rate(optimizer) -> tf.Tensor:
    """The rate of the optimizer's next step (its schedule at its step count; the inner optimizer's
    under a LossScaleOptimizer); [] float32."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    rate = inner.learning_rate
    return rate(inner.iterations) if callable(rate) else rate


def clip_by_exact_global_norm(grads, clip_norm: float) -> list:
    """`grads` (None allowed) scaled by min(1, clip_norm / norm), with the norm `global_clipnorm`
    would measure: for a step that clips each replica's own gradient before aggregation."""
    return tf.clip_by_global_norm(grads, clip_norm, use_norm=gradient_norm(grads))[0]


class _ExactGlobalNormClipping:
    """Mixin for legacy tf_keras optimizers: `global_clipnorm` measures the true gradient norm."""

    def _transform_gradients(self, grads_and_vars):
        # Called after cross-replica aggregation, before the base class's clipping.
        return super()._transform_gradients(sum_duplicate_indices(grads_and_vars))


@tf_keras.utils.register_keras_serializable(package="electra_tf")
class AdamWeightDecay(_ExactGlobalNormClipping, tf_keras.optimizers.legacy.Optimizer):
    """The original's `AdamWeightDecayOptimizer`, per variable `p` with gradient `g`:

        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g**2
        update = m / (sqrt(v) + eps)            # no bias correction
        update += wd * p                        # only if decay applies to p
        p -= lr_t * multiplier(p) * update

    With `bias_correction=True` (not the original's) the first line is Adam's corrected one,
    `update = (m / (1 - b1**t)) / (sqrt(v / (1 - b2**t)) + eps)` at step t = 1, 2, ..., as
    PyTorch's AdamW: without it an update is about 1 / sqrt(1 - b2**t) times larger early on (3.2x
    at step 100, 1.4x at step 1,000), which a 10,000-step warm-up hides and a short one does not.

    Weight decay applies unless the variable name matches one of `exclude_from_weight_decay`
    (regexes searched in the name; by default LayerNorm, layer_norm and bias, so `output_bias` is
    excluded and embeddings are decayed). `multiplier(p)` is 1 unless `layerwise_lr_decay > 0`, in
    which case it is `electra_tf.layerwise_decay.lr_multiplier` (the whole update is scaled,
    weight decay included). Model Garden's `legacy_adamw.AdamWeightDecay` bias-corrects, so it does
    not match the original.

    On CPU (float32, outside XLA) each variable's uncorrected update runs as one fused kernel
    (`cpu_kernels.adam_weight_decay_update`) that equals these ops bit for bit.

    Sparse gradients (IndexedSlices from embedding lookups) are made dense, as TF1 did in the
    original: the moments of rows absent from the batch still decay and their weights still move.
    Pass `global_clipnorm=1.0` (a base-class option) for the original's clipping.
    """

    _HAS_AGGREGATE_GRAD = True

    def __init__(
        self,
        learning_rate=1e-3,
        weight_decay_rate: float = 0.0,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-6,
        exclude_from_weight_decay=EXCLUDE_FROM_WEIGHT_DECAY,
        layerwise_lr_decay: float = -1.0,
        n_transformer_layers: int | None = None,
        fixed_layerwise_decay: bool = False,
        bias_correction: bool = False,
        name: str = "AdamWeightDecay",
        **kwargs,
    ):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.weight_decay_rate = float(weight_decay_rate)
        self.epsilon = float(epsilon)
        self.exclude_from_weight_decay = tuple(exclude_from_weight_decay or ())
        self.layerwise_lr_decay = float(layerwise_lr_decay)
        self.n_transformer_layers = n_transformer_layers
        self.fixed_layerwise_decay = bool(fixed_layerwise_decay)
        self.bias_correction = bool(bias_correction)
        if self.layerwise_lr_decay > 0 and not n_transformer_layers:
            raise ValueError("layerwise_lr_decay > 0 needs n_transformer_layers")

    def uses_weight_decay(self, variable_name: str) -> bool:
        """Whether decoupled weight decay applies to this variable (the original's rule)."""
        if not self.weight_decay_rate:
            return False
        name = layerwise_decay.base_name(variable_name)
        return not any(re.search(pattern, name) for pattern in self.exclude_from_weight_decay)

    def lr_multiplier(self, variable_name: str) -> float:
        """The layer-wise factor on the learning rate for this variable (1.0 when not enabled)."""
        if self.layerwise_lr_decay <= 0:
            return 1.0
        return layerwise_decay.lr_multiplier(
            variable_name,
            self.n_transformer_layers,
            self.layerwise_lr_decay,
            self.fixed_layerwise_decay,
        )

    def adam_moments(self, var) -> tuple[tf.Variable, tf.Variable]:
        """(m, v) slots of `var`: the original checkpoint's `<var>/adam_m`, `<var>/adam_v`."""
        return self.get_slot(var, "adam_m"), self.get_slot(var, "adam_v")

    def _create_slots(self, var_list):
        # Outside the optimizer's name scope, so a slot is named `<var>/adam_m`, not
        # `AdamWeightDecay/<var>/adam_m`.
        with tf.name_scope(""):
            for var in var_list:
                self.add_slot(var, "adam_m")
            for var in var_list:
                self.add_slot(var, "adam_v")

    def _prepare_local(self, var_device, var_dtype, apply_state):
        # `1 - beta` is computed in Python (float64) as the original did: in float32,
        # 1 - float32(0.999) is 1.3e-5 off 0.001.
        super()._prepare_local(var_device, var_dtype, apply_state)
        corrections = {"m_correction": 1.0, "v_correction": 1.0}  # what divides m and v
        if self.bias_correction:  # 1 - b**t at the step t of the update being computed
            step = tf.cast(self.iterations + 1, var_dtype)
            corrections = {name: 1.0 - tf.pow(tf.constant(beta, var_dtype), step)
                           for name, beta in (("m_correction", self.beta_1), ("v_correction", self.beta_2))}
        apply_state[(var_device, var_dtype)].update(
            **corrections,
            beta_1=tf.constant(self.beta_1, var_dtype),
            one_minus_beta_1=tf.constant(1.0 - self.beta_1, var_dtype),
            beta_2=tf.constant(self.beta_2, var_dtype),
            one_minus_beta_2=tf.constant(1.0 - self.beta_2, var_dtype),
            epsilon=tf.constant(self.epsilon, var_dtype),
        )

    def _resource_apply_dense(self, grad, var, apply_state=None):
        var_device, var_dtype = var.device, var.dtype.base_dtype
        c = (apply_state or {}).get((var_device, var_dtype)) or self._fallback_apply_state(
            var_device, var_dtype
        )
        m, v = self.adam_moments(var)
        lr = c["lr_t"] * tf.cast(self.lr_multiplier(var.name), var_dtype)
        weight_decay = self.weight_decay_rate if self.uses_weight_decay(var.name) else 0.0
        if cpu_kernels.usable(var_dtype) and not self.bias_correction:  # the same update, bit for bit
            return cpu_kernels.adam_weight_decay_update(var, m, v, grad, lr, beta_1=self.beta_1, beta_2=self.beta_2,
                                                        epsilon=self.epsilon, weight_decay=weight_decay)
        lock = self._use_locking

        m_t = m.assign(c["beta_1"] * m + c["one_minus_beta_1"] * grad, use_locking=lock)
        v_t = v.assign(c["beta_2"] * v + c["one_minus_beta_2"] * tf.square(grad), use_locking=lock)
        update = (m_t / c["m_correction"]) / (tf.sqrt(v_t / c["v_correction"]) + c["epsilon"])
        if weight_decay:
            update += tf.cast(weight_decay, var_dtype) * var
        return var.assign_sub(lr * update, use_locking=lock).op

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        # grad: [n_unique_indices, ...row shape]; scattered into a dense [rows, ...] gradient.
        shape = tf.shape(var, out_type=indices.dtype)
        dense_grad = tf.scatter_nd(tf.expand_dims(indices, -1), grad, shape)
        return self._resource_apply_dense(dense_grad, var, apply_state)

    def get_config(self):
        config = super().get_config()
        config.update(
            learning_rate=self._serialize_hyperparameter("learning_rate"),
            weight_decay_rate=self.weight_decay_rate,
            beta_1=self.beta_1,
            beta_2=self.beta_2,
            epsilon=self.epsilon,
            exclude_from_weight_decay=list(self.exclude_from_weight_decay),
            layerwise_lr_decay=self.layerwise_lr_decay,
            n_transformer_layers=self.n_transformer_layers,
            fixed_layerwise_decay=self.fixed_layerwise_decay,
            bias_correction=self.bias_correction,
        )
        return config


@tf_keras.utils.register_keras_serializable(package="electra_tf")
class Lamb(_ExactGlobalNormClipping, lamb.LAMB):
    """Model Garden's LAMB (not in the original release), clipping the true global norm."""


def create_optimizer(
    learning_rate: float,
    num_train_steps: int,
    weight_decay_rate: float = 0.0,
    warmup_steps: int = 0,
    warmup_proportion: float = 0.0,
    lr_decay_power: float = 1.0,
    layerwise_lr_decay_power: float = -1.0,
    n_transformer_layers: int | None = None,
    optimizer: str = "adamw",
    fixed_layerwise_decay: bool = False,
    clip_norm: float | None = CLIP_NORM,
    bias_correction: bool = False,
) -> tf_keras.optimizers.legacy.Optimizer:
    """The original's `create_optimizer`, minus the training op: a tf_keras optimizer to call
    `apply_gradients` on once per step (its `iterations` is the original's `global_step`).

    `warmup = max(num_train_steps * warmup_proportion, warmup_steps)` (pre-training passes
    warmup_steps=10000, fine-tuning warmup_proportion=0.1). Gradients are clipped to global norm
    `clip_norm` over all variables inside `apply_gradients`, after cross-replica aggregation and
    after a LossScaleOptimizer's unscaling; the training loop must not clip again (None disables).
    `layerwise_lr_decay_power > 0` enables layer-wise LR decay (AdamW only; see
    `electra_tf.layerwise_decay`). `optimizer="lamb"` uses Model Garden's LAMB with the same
    schedule, betas, eps, weight-decay exclusions and clipping. `bias_correction` adds Adam's bias
    correction to AdamW (not the original's; LAMB has its own).
    """
    if optimizer not in OPTIMIZERS:
        raise InputError(f"optimizer: expected one of {list(OPTIMIZERS)}, got {optimizer!r}")
    if not num_train_steps or num_train_steps <= 0:
        raise InputError(f"num_train_steps: must be > 0, got {num_train_steps!r}")
    layerwise = layerwise_lr_decay_power is not None and layerwise_lr_decay_power > 0
    if layerwise and optimizer != "adamw":
        raise InputError(
            f"layerwise_lr_decay_power: supported with optimizer 'adamw' only, got {optimizer!r}"
        )
    if layerwise and (n_transformer_layers is None or n_transformer_layers < 1):
        raise InputError(
            "n_transformer_layers: must be >= 1 when layerwise_lr_decay_power > 0, "
            f"got {n_transformer_layers!r}"
        )

    schedule = PolynomialDecayWithWarmup(
        initial_learning_rate=learning_rate,
        decay_steps=num_train_steps,
        warmup_steps=max(num_train_steps * warmup_proportion, warmup_steps),
        end_learning_rate=0.0,
        power=lr_decay_power,
    )
    if optimizer == "lamb":
        return Lamb(
            learning_rate=schedule,
            weight_decay_rate=weight_decay_rate,
            beta_1=0.9,
            beta_2=0.999,
            epsilon=1e-6,
            exclude_from_weight_decay=list(EXCLUDE_FROM_WEIGHT_DECAY),
            global_clipnorm=clip_norm,
        )
    return AdamWeightDecay(
        learning_rate=schedule,
        weight_decay_rate=weight_decay_rate,
        layerwise_lr_decay=layerwise_lr_decay_power if layerwise else -1.0,
        n_transformer_layers=n_transformer_layers,
        fixed_layerwise_decay=fixed_layerwise_decay,
        bias_correction=bias_correction,
        global_clipnorm=clip_norm,
    )


def create_slots(optimizer, variables) -> None:
    """Creates the optimizer's step counter, hyperparameters and slots for `variables` now, in
    eager mode: a training tf.function whose first call creates them is traced twice (once more
    after they exist), which costs seconds at every start.

    Call it after any checkpoint read that asserts that every existing object matched: such a read
    creates the slots the checkpoint holds, with their saved values, and the rest start at zero here,
    as training would create them. Called before it, a slot the checkpoint lacks (of a variable that
    had no gradient when it was written) would fail the assert. A LossScaleOptimizer passes this on
    to the optimizer it wraps."""
    optimizer._create_all_weights(variables)
