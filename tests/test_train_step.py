"""The training step: it learns, XLA matches the graph step, fp16 loss scaling, tf.distribute
(two replicas: test_train_step_replicas.py)."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from electra_tf.config import PretrainingConfig
from electra_tf.optimization import create_optimizer, create_slots
from electra_tf.pretraining import PretrainingModel
from electra_tf.training import make_train_step
from electra_tf.training.distribution import set_precision
from checkpoint_helpers import matmul_dtypes

BATCH, SEQ, VOCAB = 8, 32, 120
IDS = dict(cls_id=1, sep_id=2, mask_id=3)
ONE_LAYER = dict(num_hidden_layers=1)  # fast to trace and compile
NO_DROPOUT = dict(ONE_LAYER, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
STEPS = 20
# No dropout and distinct masked positions (the original's draw with replacement, the default, varies
# how many positions a row masks): XLA's and graph mode's RNG streams then give close losses.
STEADY = dict(model_hparam_overrides=NO_DROPOUT, mask_with_replacement=False)


def make_batch(index: int) -> dict:
    """Synthetic rows [CLS] w ... w [SEP] pad..., w drawn from a Zipf-like unigram distribution."""
    rng = np.random.RandomState(index)
    weights = 1.0 / np.arange(1, VOCAB - 4 + 1)
    ids = rng.choice(np.arange(4, VOCAB), size=(BATCH, SEQ), p=weights / weights.sum())
    lengths = rng.randint(SEQ // 2, SEQ + 1, size=BATCH)
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
    ids[:, 0] = IDS["cls_id"]
    ids[np.arange(BATCH), lengths - 1] = IDS["sep_id"]
    return dict(input_ids=tf.constant(ids * mask, tf.int32), input_mask=tf.constant(mask),
                segment_ids=tf.zeros([BATCH, SEQ], tf.int32))


BATCHES = [make_batch(i) for i in range(4)]


def build(**hparams):
    """A tiny model and the original's optimizer (AdamW, warmup + linear decay, clip 1.0)."""
    values = dict(model_size="tiny", max_seq_length=SEQ, train_batch_size=BATCH, vocab_size=VOCAB,
                  num_train_steps=500, num_warmup_steps=5, learning_rate=3e-4,
                  model_hparam_overrides=ONE_LAYER)
    values.update(hparams)
    config = PretrainingConfig.from_hparams("test", "/unused", values)
    tf_keras.utils.set_random_seed(0)
    model = PretrainingModel(config, **IDS)
    optimizer = create_optimizer(config.learning_rate, config.num_train_steps, config.weight_decay_rate,
                                 config.num_warmup_steps)
    return model, optimizer


def run(step, num_steps: int) -> np.ndarray:
    """Losses of `num_steps` steps of a tf.function around `step`, seeds (0, i)."""
    compiled = tf.function(step)
    return np.array([float(compiled(BATCHES[i % len(BATCHES)], tf.constant([0, i])))
                     for i in range(num_steps)])


def traced(step):
    """The GraphDef of `step` traced in a tf.function on the first batch (with its functions)."""
    return tf.function(step).get_concrete_function(BATCHES[0], tf.constant([0, 0])).graph.as_graph_def()


def xla_functions(step) -> list:
    """The names of the functions of the traced step that XLA must compile (`jit_compile=True`)."""
    return [f.signature.name for f in traced(step).library.function if f.attr["_XlaMustCompile"].b]


@pytest.fixture(scope="module")
def graph_run():
    """ELECTRA without dropout, STEPS graph-mode steps: (losses, variables before, model, optimizer)."""
    model, optimizer = build(**STEADY)
    before = [v.numpy().copy() for v in model.trainable_variables]
    return run(make_train_step(model, optimizer), STEPS), before, model, optimizer


def test_step_reduces_loss_and_updates_every_trained_variable(graph_run):
    losses, before, model, optimizer = graph_run
    assert np.isfinite(losses).all()
    assert losses[-4:].mean() < 0.8 * losses[:4].mean(), losses
    assert int(optimizer.iterations) == STEPS
    unchanged = [v.name for v, b in zip(model.trainable_variables, before) if np.array_equal(v.numpy(), b)]
    assert not unchanged


def test_the_gradient_hook_sees_the_gradient_the_optimizer_clips():
    """on_gradients gets each step's gradients before clipping: their norm (duplicate embedding
    rows summed, as the optimizer does) equals one computed by hand on the same weights, batch and
    seed. A fresh ELECTRA's is far above the clip threshold of 1 (the 50-weighted RTD loss)."""
    from electra_tf.optimization import gradient_norm
    model, optimizer = build(**STEADY)
    recorded = tf.Variable(0.0)
    step = tf.function(make_train_step(model, optimizer,
                                       on_gradients=lambda grads: recorded.assign(gradient_norm(grads))))
    for i in range(3):
        features, seed = BATCHES[i], tf.constant([0, i])
        with tf.GradientTape() as tape:
            loss = model(features, training=True, seed=seed, stage="joint").loss
        expected = float(gradient_norm(tape.gradient(loss, model.trainable_variables_for("joint"))))
        step(features, seed)
        assert float(recorded) == pytest.approx(expected, rel=1e-5)
        assert expected > 1.0


def test_discriminator_stage_leaves_the_generator_frozen():
    """The discriminator stage trains the discriminator's own variables and none of the generator's:
    its encoder, its head and the embedding block it shares."""
    model, optimizer = build(generator_hidden_size=1.0, two_stage_generator_steps=10)
    network = model.network
    frozen = network.generator.trainable_variables + network.generator_head.trainable_variables
    own = network.discriminator.blocks[0].trainable_variables + network.discriminator_head.trainable_variables
    trained = [v for v in own if v.name.endswith("kernel:0")]  # (the key bias gets no gradient: softmax ignores it)
    before = [v.numpy().copy() for v in frozen + trained]
    losses = run(make_train_step(model, optimizer, stage="discriminator",
                                 variables=model.trainable_variables_for("discriminator")), 3)
    assert np.isfinite(losses).all()
    assert any(v.name.startswith("electra/embeddings/") for v in frozen)  # the shared block is frozen too
    for value, variable in zip(before, frozen):
        np.testing.assert_array_equal(value, variable.numpy(), err_msg=variable.name)
    for value, variable in zip(before[len(frozen):], trained):
        assert not np.array_equal(value, variable.numpy()), variable.name


def test_custom_loss_fn_and_model_without_stages():
    """A plain Keras model: all its trainable variables train; a variable the loss skips is left alone."""
    tf_keras.utils.set_random_seed(1)
    inputs = tf_keras.Input([4])
    model = tf_keras.Model(inputs, tf_keras.layers.Dense(1)(inputs))
    unused = model.add_weight("unused", shape=[2], initializer="ones")
    x = tf.random.stateless_normal([64, 4], [1, 2])
    y = tf.reduce_sum(x, axis=1, keepdims=True)

    def loss_fn(m, features, seed):
        del seed
        return tf.reduce_mean(tf.square(m(features["x"]) - features["y"])), None

    step = tf.function(make_train_step(model, tf_keras.optimizers.legacy.SGD(0.1), loss_fn=loss_fn))
    losses = [float(step({"x": x, "y": y}, None)) for _ in range(30)]
    assert losses[-1] < 0.01 * losses[0]
    np.testing.assert_array_equal(unused.numpy(), [1.0, 1.0])


def test_jit_compile_matches_graph_step_on_a_deterministic_objective():
    """BERT objective with every candidate masked by [MASK] (distinct positions): the loss does not
    depend on the random draws (XLA's stateless RNG differs from TF's), so XLA and graph mode must
    agree numerically."""
    hparams = dict(STEADY, objective="bert", mask_prob=0.99, mask_token_fraction=1.0)
    losses, compiled = {}, {}
    for jit in (False, True):
        model, optimizer = build(**hparams)
        step = make_train_step(model, optimizer, jit_compile=jit)
        losses[jit] = run(step, 8)
        compiled[jit] = xla_functions(step)
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-4)
    assert losses[True][-1] < losses[True][0]
    # the setting takes effect: forward and backward are one function XLA must compile, and only with it
    assert not compiled[False] and compiled[True] and all("loss_and_gradients" in name for name in compiled[True])


def test_jit_compile_tracks_graph_step_on_electra(graph_run):
    """ELECTRA objective, same seeds, no dropout: masks and samples come from different RNG streams
    under XLA, so the losses agree only statistically (a loose tolerance)."""
    model, optimizer = build(**STEADY)
    step = make_train_step(model, optimizer, jit_compile=True)
    losses = run(step, STEPS)
    assert xla_functions(step)  # compiled by XLA, not graph mode under another name
    np.testing.assert_allclose(losses, graph_run[0], rtol=0.15)
    np.testing.assert_allclose(losses.mean(), graph_run[0].mean(), rtol=0.03)


@pytest.fixture
def mixed_float16():
    """The policy as run_pretraining.py sets it (on CPU, without grappler's remapper), float32 after."""
    set_precision("mixed_float16")
    yield
    tf_keras.mixed_precision.set_global_policy("float32")
    tf.config.optimizer.set_experimental_options({"remapping": None})  # TensorFlow's default


def test_mixed_float16_with_dynamic_loss_scaling(mixed_float16):
    model, optimizer = build()
    optimizer = tf_keras.mixed_precision.LossScaleOptimizer(optimizer, initial_scale=2.0 ** 15)
    step = make_train_step(model, optimizer)
    losses = run(step, 10)
    # the policy takes effect: every matmul of the traced step, forward and backward, in float16 but the
    # embeddings' token-type one-hot products and their gradients (the embedding sum stays float32)
    matmuls = matmul_dtypes(traced(step))
    assert len(matmuls) > 20 and {name for name, dtype in matmuls.items() if dtype != "float16"} == {
        f"{prefix}pretraining_model/{net}/embeddings/MatMul{suffix}" for net in ("electra", "generator")
        for prefix, suffix in (("", ""), ("gradient_tape/", "/MatMul"))}
    assert np.isfinite(losses).all()
    assert losses[-3:].mean() < losses[:3].mean()
    assert float(optimizer.loss_scale) > 1.0
    assert all(v.dtype == tf.float32 and np.isfinite(v.numpy()).all() for v in model.trainable_variables)


def test_runs_inside_strategy_run():
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model, optimizer = build()
    step = make_train_step(model, optimizer)

    @tf.function
    def loop(features, seed):
        per_replica = strategy.run(step, args=(features, seed))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)

    losses = [float(loop(BATCHES[i % 4], tf.constant([0, i]))) for i in range(12)]
    assert np.isfinite(losses).all() and np.mean(losses[-3:]) < np.mean(losses[:3])
    assert int(optimizer.iterations) == 12


@pytest.mark.parametrize("k", [2, 4])
def test_gradient_accumulation_equals_one_large_batch(k):
    """k micro-batches of b rows give the update of one batch of k*b rows: a per-row mean loss has
    the mean of the micro-batch gradients as its gradient. Tolerance 1e-6 (float32 summation order)."""
    def run_steps(accumulation):
        tf_keras.utils.set_random_seed(3)
        inputs = tf_keras.Input([6])
        hidden = tf_keras.layers.Dense(8, activation="tanh")(inputs)
        model = tf_keras.Model(inputs, tf_keras.layers.Dense(1)(hidden))
        optimizer = create_optimizer(1e-2, 100, 0.01, 2)  # AdamW + clipping: the real update rule
        seen = []

        def loss_fn(m, features, seed):
            del seed
            return tf.reduce_mean(tf.square(m(features["x"]) - features["y"])), features["x"]

        step = tf.function(make_train_step(model, optimizer, loss_fn=loss_fn,
                                           gradient_accumulation_steps=accumulation,
                                           on_output=lambda features, output: seen.append(output)))
        x = tf.random.stateless_normal([16, 6], [4, 5])
        losses = [float(step({"x": x, "y": tf.reduce_sum(x, 1, keepdims=True)}, tf.constant([0, i])))
                  for i in range(5)]
        return losses, [v.numpy() for v in model.trainable_variables], seen

    big_losses, big_weights, _ = run_steps(1)
    losses, weights, seen = run_steps(k)
    np.testing.assert_allclose(losses, big_losses, rtol=1e-6)
    for a, b in zip(weights, big_weights):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    assert seen[0].shape == (16 // k, 6)  # on_output sees each micro-batch


@pytest.mark.parametrize("rows", [7, 2])
def test_summed_micro_batches_take_the_whole_batchs_float16_step(mixed_float16, rows):
    """A summed loss (fine-tuning's) in 3 micro-batches with `sum_micro_batches`: under dynamic loss
    scaling each row's float16 gradient is the whole batch's, so a scale the whole batch takes (2^15:
    d loss / d output = 32768 per row; no bias, whose gradient would sum the rows) is taken, and the
    step is the whole batch's (7 rows: 2, 2 and 3; 2 rows: one micro-batch empty, skipped). Scaling
    the loss by k and averaging instead overflows there (98304 > float16's 65504): the step is
    skipped and the scale halved."""
    x = tf.random.stateless_uniform([rows, 4], [1, 2], maxval=0.1)

    def one_step(accumulation, sum_micro_batches=True, scale_loss_by=1):
        tf_keras.utils.set_random_seed(5)
        model = tf_keras.Sequential([tf_keras.Input([4]), tf_keras.layers.Dense(1, use_bias=False)])  # float16
        optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.legacy.SGD(0.1),
                                                                initial_scale=2.0 ** 15)
        start = [v.numpy() for v in model.trainable_variables]

        def loss_fn(m, features, seed):
            return tf.reduce_sum(tf.cast(m(features["x"]), tf.float32)) * scale_loss_by, None

        step = tf.function(make_train_step(model, optimizer, loss_fn=loss_fn, gradient_accumulation_steps=accumulation,
                                           sum_micro_batches=sum_micro_batches))
        loss = float(step({"x": x}, tf.constant([0, 1])))
        moved = max(float(np.abs(v.numpy() - s).max()) for v, s in zip(model.trainable_variables, start))
        return loss, [v.numpy() for v in model.trainable_variables], float(optimizer.loss_scale), moved

    whole_loss, whole, whole_scale, moved = one_step(1)
    loss, weights, scale, _ = one_step(3)
    assert whole_scale == scale == 2.0 ** 15 and moved > 0.01  # applied, nothing overflowed
    assert loss == pytest.approx(whole_loss, rel=1e-3)
    for a, b in zip(weights, whole):
        np.testing.assert_allclose(a, b, atol=1e-3)  # float16 rounding of the per-row gradients
    _, _, scale, moved = one_step(3, sum_micro_batches=False, scale_loss_by=3)
    assert scale == 2.0 ** 14 and moved == 0.0


def test_slots_created_up_front_mean_one_trace_and_the_same_losses():
    """create_slots before the first call: the step is traced once, not twice (TensorFlow traces
    again once the first call has created the optimizer's variables), with the same losses."""
    traces, losses = {}, {}
    for slots_first in (False, True):
        model, optimizer = build()
        if slots_first:
            create_slots(optimizer, model.trainable_variables)
        compiled = tf.function(make_train_step(model, optimizer))
        losses[slots_first] = [float(compiled(BATCHES[i], tf.constant([0, i]))) for i in range(3)]
        traces[slots_first] = compiled.experimental_get_tracing_count()
    assert traces == {False: 2, True: 1}
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-6)
