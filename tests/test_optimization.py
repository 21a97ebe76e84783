"""Optimisation against the original's numbers: LR schedule, AdamWeightDecay vs a NumPy reference
(with and without layer-wise decay), tf.distribute and mixed precision. The multiplier table
itself: test_layerwise_decay.py; the clip's norm: test_gradient_clipping.py; LAMB: test_lamb.py."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from electra_tf.errors import InputError
from electra_tf import cpu_kernels
from electra_tf.optimization import (
    AdamWeightDecay,
    PolynomialDecayWithWarmup,
    create_optimizer,
)
from process_helpers import REPO

# ----------------------------------------------------------------------------- LR schedule


@pytest.mark.parametrize(
    "step, expected",
    [
        (0, 0.0),
        (5_000, 5e-4 * (1 - 0.005) * 0.5),  # mid-warmup: decay already running
        (10_000, 5e-4 * 0.99),  # warmup end
        (500_000, 2.5e-4),  # mid-decay
        (1_000_000, 0.0),  # end
        (1_200_000, 0.0),  # past the end: no cycling
    ],
)
def test_pretraining_schedule_values(step, expected):
    schedule = PolynomialDecayWithWarmup(5e-4, decay_steps=1_000_000, warmup_steps=10_000)
    assert float(schedule(step)) == pytest.approx(expected, rel=1e-6, abs=1e-12)


def test_schedule_power_and_no_warmup():
    schedule = PolynomialDecayWithWarmup(1e-4, decay_steps=1000, warmup_steps=0, power=0.5)
    assert float(schedule(0)) == pytest.approx(1e-4)
    assert float(schedule(750)) == pytest.approx(1e-4 * 0.25**0.5, rel=1e-6)


def test_create_optimizer_warmup_is_max_of_proportion_and_steps():
    by_proportion = create_optimizer(1e-4, 1000, warmup_steps=50, warmup_proportion=0.1)
    by_steps = create_optimizer(1e-4, 1000, warmup_steps=300, warmup_proportion=0.1)
    assert by_proportion.learning_rate.warmup_steps == 100
    assert by_steps.learning_rate.warmup_steps == 300
    # step 50 of a 100-step warmup on a 1000-step linear decay
    assert float(by_proportion.learning_rate(50)) == pytest.approx(1e-4 * 0.95 * 0.5, rel=1e-6)


def test_schedule_and_optimizer_config_round_trip():
    schedule = PolynomialDecayWithWarmup(3e-4, 2000, warmup_steps=200, power=2.0)
    restored = tf_keras.optimizers.schedules.deserialize(
        tf_keras.optimizers.schedules.serialize(schedule)
    )
    assert isinstance(restored, PolynomialDecayWithWarmup)
    assert restored.get_config() == schedule.get_config()

    opt = create_optimizer(3e-4, 2000, 0.01, warmup_steps=200, layerwise_lr_decay_power=0.8,
                           n_transformer_layers=12, bias_correction=True)
    clone = AdamWeightDecay.from_config(opt.get_config())
    assert clone.get_config() == opt.get_config()
    assert clone.global_clipnorm == 1.0 and clone.bias_correction
    assert float(clone.learning_rate(1000)) == pytest.approx(3e-4 * 0.5)  # power 1, past warmup


# ------------------------------------------------------------- AdamWeightDecay vs NumPy

N_LAYERS = 2
# name -> (shape, decayed?, layer-wise multiplier for 2 layers and decay 0.8 (original rule))
VARIABLES = {
    "electra/embeddings/word_embeddings": ((6, 4), True, 0.8**4),  # sparse gradient (gather)
    "electra/embeddings/LayerNorm/gamma": ((4,), False, 0.8**4),
    "electra/encoder/layer_1/attention/self/query/kernel": ((4, 4), True, 0.8**2),
    "electra/encoder/layer_1/attention/self/query/bias": ((4,), False, 0.8**2),
    "task_specific/cola/dense/kernel": ((4, 2), True, 1.0),
}
EMBEDDING = "electra/embeddings/word_embeddings"
TOKEN_IDS = np.array([0, 2, 2, 5])  # row 2 twice: duplicate sparse indices are summed
LR, TRAIN_STEPS, WARMUP, WD, STEPS = 0.05, 10, 3, 0.1, 6


def _problem(seed=0):
    """Initial values and loss coefficients: loss = sum(A * w) + 0.5 * sum(B * w**2) per variable
    (the embedding's terms only on the looked-up rows), so the gradient is known in closed form."""
    rng = np.random.default_rng(seed)
    init = {n: rng.normal(size=s).astype(np.float32) for n, (s, _, _) in VARIABLES.items()}
    a = {n: rng.normal(size=s).astype(np.float32) for n, (s, _, _) in VARIABLES.items()}
    b = {n: rng.uniform(0.5, 1.5, size=s).astype(np.float32) for n, (s, _, _) in VARIABLES.items()}
    a[EMBEDDING] = rng.normal(size=(len(TOKEN_IDS), 4)).astype(np.float32)
    b[EMBEDDING] = rng.uniform(0.5, 1.5, size=(len(TOKEN_IDS), 4)).astype(np.float32)
    return init, a, b


def _tf_loss(variables, a, b):
    loss = 0.0
    for name, var in variables.items():
        w = tf.gather(var, TOKEN_IDS) if name == EMBEDDING else var
        loss += tf.reduce_sum(a[name] * w) + 0.5 * tf.reduce_sum(b[name] * w**2)
    return loss


def _np_grads(params, a, b):
    grads = {}
    for name, w in params.items():
        if name == EMBEDDING:
            grads[name] = np.zeros_like(w)
            np.add.at(grads[name], TOKEN_IDS, a[name] + b[name] * w[TOKEN_IDS])
        else:
            grads[name] = a[name] + b[name] * w
    return grads


def _np_lr(step):
    return LR * (1 - min(step, TRAIN_STEPS) / TRAIN_STEPS) * min(1.0, step / WARMUP)


def _reference(init, a, b, clip_norm, multipliers):
    """The original AdamWeightDecayOptimizer in float64 NumPy, after global-norm clipping."""
    params = {n: v.astype(np.float64) for n, v in init.items()}
    m = {n: np.zeros_like(v) for n, v in params.items()}
    v = {n: np.zeros_like(p) for n, p in params.items()}
    norms = []
    for step in range(STEPS):
        grads = _np_grads(params, a, b)
        norm = np.sqrt(sum(np.sum(g**2) for g in grads.values()))
        norms.append(norm)
        if clip_norm is not None:
            grads = {n: g * clip_norm / max(norm, clip_norm) for n, g in grads.items()}
        for name, g in grads.items():
            m[name] = 0.9 * m[name] + 0.1 * g
            v[name] = 0.999 * v[name] + 0.001 * g**2
            update = m[name] / (np.sqrt(v[name]) + 1e-6)
            if VARIABLES[name][1]:
                update += WD * params[name]
            params[name] = params[name] - _np_lr(step) * multipliers[name] * update
    return params, m, v, norms


def _run_tf(init, a, b, clip_norm, layerwise, strategy=None):
    """STEPS training steps with create_optimizer, inside `strategy` when given."""
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        variables = {n: tf.Variable(init[n], name=n) for n in VARIABLES}
        opt = create_optimizer(
            LR, TRAIN_STEPS, WD, warmup_steps=WARMUP, clip_norm=clip_norm,
            layerwise_lr_decay_power=0.8 if layerwise else -1.0, n_transformer_layers=N_LAYERS,
        )

    def replica_step():
        # With n replicas, replica r sees the linear terms times 2r / (n - 1) (mean 1) and scales its
        # loss by 1 / n, so the replicas' gradients differ but their sum is the one-device gradient.
        context = tf.distribute.get_replica_context()
        n = context.num_replicas_in_sync
        share = 1.0 if n == 1 else 2.0 * tf.cast(context.replica_id_in_sync_group, tf.float32) / (n - 1)
        with tf.GradientTape() as tape:
            loss = _tf_loss(variables, {name: value * share for name, value in a.items()}, b) / n
        grads = tape.gradient(loss, list(variables.values()))
        opt.apply_gradients(zip(grads, variables.values()))

    step_fn = tf.function(lambda: strategy.run(replica_step))
    snapshots = []
    for _ in range(STEPS):
        step_fn()
        snapshots.append({n: v.numpy() for n, v in variables.items()})
    return variables, opt, snapshots


@pytest.mark.parametrize("clip_norm", [None, 1.0])
@pytest.mark.parametrize("layerwise", [False, True])
def test_adamw_matches_numpy_reference(clip_norm, layerwise):
    init, a, b = _problem()
    multipliers = (
        {n: spec[2] for n, spec in VARIABLES.items()} if layerwise
        else dict.fromkeys(VARIABLES, 1.0)
    )
    expected, m_ref, v_ref, norms = _reference(init, a, b, clip_norm, multipliers)
    variables, opt, snapshots = _run_tf(init, a, b, clip_norm, layerwise)

    assert min(norms) > 1.0  # so clipping to 1.0 is active in the clipped case
    for name in VARIABLES:
        np.testing.assert_array_equal(snapshots[0][name], init[name])  # step 0 has lr 0
        np.testing.assert_allclose(variables[name].numpy(), expected[name], rtol=0, atol=1e-6)
        m, v = opt.adam_moments(variables[name])
        assert (m.name, v.name) == (f"{name}/adam_m:0", f"{name}/adam_v:0")
        np.testing.assert_allclose(m.numpy(), m_ref[name], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(v.numpy(), v_ref[name], rtol=1e-5, atol=1e-9)
    assert int(opt.iterations) == STEPS


def test_bias_correction_matches_pytorchs_adamw():
    """`bias_correction=True` is Adam's corrected update with decoupled decay: 30 steps of
    torch.optim.AdamW (eps 1e-6, decay 0.01 on the decayed variable, none on the LayerNorm one)
    from the same start and gradients end at the same weights; the uncorrected optimizer does not
    (its early steps are larger)."""
    import torch  # a test extra: missing, the test fails
    rng = np.random.default_rng(5)
    start = {"dense/kernel": rng.normal(size=(4, 3)), "layer_norm/gamma": rng.normal(size=3)}
    targets = {name: rng.normal(size=value.shape) for name, value in start.items()}

    def run_ours(bias_correction):
        variables = {name: tf.Variable(value, dtype=tf.float32, name=name) for name, value in start.items()}
        opt = AdamWeightDecay(learning_rate=0.01, weight_decay_rate=0.01, bias_correction=bias_correction)
        for _ in range(30):  # gradient of 0.5 * |w - target|^2
            opt.apply_gradients([(var - targets[name], var) for name, var in variables.items()])
        return {name: var.numpy() for name, var in variables.items()}

    params = {name: torch.nn.Parameter(torch.tensor(value, dtype=torch.float64)) for name, value in start.items()}
    theirs = torch.optim.AdamW([{"params": [params["dense/kernel"]], "weight_decay": 0.01},
                                {"params": [params["layer_norm/gamma"]], "weight_decay": 0.0}],
                               lr=0.01, betas=(0.9, 0.999), eps=1e-6)
    for _ in range(30):
        for name, param in params.items():
            param.grad = param.detach() - torch.tensor(targets[name])
        theirs.step()
    corrected, uncorrected = run_ours(True), run_ours(False)
    for name, param in params.items():
        np.testing.assert_allclose(corrected[name], param.detach().numpy(), rtol=0, atol=1e-5, err_msg=name)
        assert np.abs(uncorrected[name] - param.detach().numpy()).max() > 1e-2, name


@pytest.mark.parametrize("clip_norm", [None, 1.0])
@pytest.mark.parametrize("layerwise", [False, True])
def test_the_cpu_kernel_updates_exactly_as_tensorflows_ops(clip_norm, layerwise):
    init, a, b = _problem(seed=3)
    fused_vars, fused_opt, fused_snapshots = _run_tf(init, a, b, clip_norm, layerwise)
    with cpu_kernels.disabled():
        ref_vars, ref_opt, ref_snapshots = _run_tf(init, a, b, clip_norm, layerwise)
    for name in VARIABLES:  # every step's weights, and the final moments, bit for bit
        for step, (mine, theirs) in enumerate(zip(fused_snapshots, ref_snapshots)):
            np.testing.assert_array_equal(mine[name], theirs[name], err_msg=f"{name} after step {step}")
        for mine, theirs in zip(fused_opt.adam_moments(fused_vars[name]), ref_opt.adam_moments(ref_vars[name])):
            np.testing.assert_array_equal(mine.numpy(), theirs.numpy(), err_msg=mine.name)
    assert not np.array_equal(fused_snapshots[-1][EMBEDDING], init[EMBEDDING])  # it did train
    variable = tf.Variable(tf.ones([3]))
    opt = AdamWeightDecay(weight_decay_rate=0.01)

    @tf.function
    def apply():
        opt.apply_gradients([(tf.ones([3]), variable)])

    assert "ElectraAdamWeightDecay" in {op.type for op in apply.get_concrete_function().graph.get_operations()}


def test_weight_decay_exclusions():
    opt = AdamWeightDecay(weight_decay_rate=0.01)
    decayed = {
        "electra/embeddings/word_embeddings:0": True,
        "electra/encoder/layer_0/output/dense/kernel:0": True,
        "electra/embeddings/LayerNorm/gamma:0": False,
        "electra/encoder/layer_0/output/dense/bias:0": False,
        "generator_predictions/output_bias:0": False,
        "some/layer_norm/beta:0": False,
    }
    assert {n: opt.uses_weight_decay(n) for n in decayed} == decayed
    assert not AdamWeightDecay(weight_decay_rate=0.0).uses_weight_decay("x/kernel:0")


# ------------------------------------------------------- distribution and mixed precision


def test_mirrored_strategy_matches_reference():
    init, a, b = _problem(seed=1)
    strategy = tf.distribute.MirroredStrategy()
    variables, _, _ = _run_tf(init, a, b, 1.0, True, strategy=strategy)
    multipliers = {n: spec[2] for n, spec in VARIABLES.items()}
    expected, _, _, _ = _reference(init, a, b, 1.0, multipliers)
    for name in VARIABLES:
        np.testing.assert_allclose(variables[name].numpy(), expected[name], rtol=0, atol=1e-6)


TWO_REPLICAS = """
import sys
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import test_optimization as t
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
init, a, b = t._problem(seed=2)
variables, _, _ = t._run_tf(init, a, b, 1.0, True, strategy=strategy)
expected, _, _, norms = t._reference(init, a, b, 1.0, {n: spec[2] for n, spec in t.VARIABLES.items()})
assert min(norms) > 1.0  # clipping is active
errors = {n: float(np.abs(variables[n].numpy() - expected[n]).max()) for n in t.VARIABLES}
print("replicas", strategy.num_replicas_in_sync, "max error", max(errors.values()))
sys.exit(0 if max(errors.values()) <= 1e-6 else 1)
"""


def test_two_replicas_sum_their_gradients_then_clip_once():
    """MirroredStrategy over 2 logical CPUs (in a subprocess: devices are fixed when TensorFlow
    starts), the replicas' gradients unequal: the optimizer sums them across replicas and clips
    the sum, so the weights are the one-device reference's (clipping each replica's gradient
    would not be)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)]),
           "CUDA_VISIBLE_DEVICES": "-1"}
    result = subprocess.run([sys.executable, "-c", TWO_REPLICAS], env=env, cwd=REPO, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "replicas 2 max error" in result.stdout


def _train_small_model(policy, steps=4):
    """A tiny 2-layer Dense model trained with create_optimizer (+ LossScaleOptimizer when fp16)."""
    tf_keras.mixed_precision.set_global_policy(policy)
    try:
        rng = np.random.default_rng(3)
        x = rng.normal(size=(16, 8)).astype(np.float32)
        y = rng.normal(size=(16, 1)).astype(np.float32) * 3.0  # gradient norm > 1: clipping active
        model = tf_keras.Sequential(
            [tf_keras.layers.Dense(8, activation="tanh", name="hidden"),
             tf_keras.layers.Dense(1, name="out")]
        )
        model.build((None, 8))
        init = [rng.normal(size=w.shape).astype(np.float32) * 0.3 for w in model.get_weights()]
        model.set_weights(init)
        opt = create_optimizer(0.01, 20, 0.01, warmup_steps=2)
        if policy == "mixed_float16":
            opt = tf_keras.mixed_precision.LossScaleOptimizer(opt)

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                pred = tf.cast(model(x), tf.float32)
                loss = tf.reduce_mean((pred - y) ** 2)
                if policy == "mixed_float16":
                    loss = opt.get_scaled_loss(loss)
            grads = tape.gradient(loss, model.trainable_variables)
            if policy == "mixed_float16":
                grads = opt.get_unscaled_gradients(grads)
            opt.apply_gradients(zip(grads, model.trainable_variables))

        for _ in range(steps):
            step()
        return init, [w.numpy() for w in model.trainable_variables], opt
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")


def test_loss_scale_optimizer_mixed_float16_matches_fp32():
    init, fp32_weights, _ = _train_small_model("float32")
    _, fp16_weights, lso = _train_small_model("mixed_float16")
    assert isinstance(lso.inner_optimizer, AdamWeightDecay)
    assert int(lso.inner_optimizer.iterations) == 4
    assert float(lso.loss_scale) == 2.0**15  # the loss was scaled and no step was skipped
    for w0, w32, w16 in zip(init, fp32_weights, fp16_weights):
        assert np.abs(w32 - w0).max() > 0.05  # the steps moved the weights by far more than atol
        np.testing.assert_allclose(w16, w32, rtol=0, atol=5e-3)


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"optimizer": "sgd"}, "optimizer"),
        ({"num_train_steps": 0}, "num_train_steps"),
        ({"layerwise_lr_decay_power": 0.8}, "n_transformer_layers"),
        ({"layerwise_lr_decay_power": 0.8, "n_transformer_layers": 12, "optimizer": "lamb"},
         "layerwise_lr_decay_power"),
    ],
)
def test_create_optimizer_bad_arguments(kwargs, field):
    arguments = {"learning_rate": 1e-4, "num_train_steps": 100, **kwargs}
    with pytest.raises(InputError, match=field):
        create_optimizer(**arguments)
