"""Training-step parity: two full pretraining steps of electra_tf against an independent PyTorch
float64 implementation of the original's math (`electra_reference.py`, written from docs/fidelity.md,
not from electra_tf).

Both start from the same weights (every variable randomised, so no default value such as a zero
bias can hide a mistake), see the same batches and then each follow their own trajectory. The
random choices come from one source, the TF step's stateless seed: the masked positions and each
slot's [MASK]-or-keep choice are read off the TF forward pass, the Gumbel noise's uniform draws are
re-derived from the seed; the reference computes everything else itself (masked input, weights,
samples, fake input, labels, losses, gradients, clipping, update). Dropout is off: its masks are
drawn inside the layers with no way to hand the same masks to another implementation.

The steps run at global steps 3 and 4 with 4 warm-up steps out of 100, so the first update is in
warm-up (lr x 3/4, decayed by 3 %) and the second past it (lr decayed by 4 %), and the second
update uses the first one's Adam moments. Covered: objectives `electra` (positions drawn with
replacement, as the original and the default, so the duplicate-position rule runs) and `bert`
(distinct positions, `mask_with_replacement: false`), each with the fused CPU kernels on and off (`ELECTRA_TF_CPU_KERNELS`, read
when the kernel library is first loaded: the fixture clears the loaded library so each setting
really runs, and the test asserts which ops the traced step contains).

Tolerances (float32 TF against float64) and their reasons: the comment above `LOSS_RTOL`.
"""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
import torch

from checkpoint_helpers import electra_shapes, encoder_shapes, randomize
from electra_reference import Draws, Setup, train_step
from electra_tf import cpu_kernels
from electra_tf.config import PretrainingConfig
from electra_tf.objectives.random_seeds import split_seed
from electra_tf.optimization import create_optimizer
from electra_tf.pretraining import PretrainingModel
from electra_tf.training import make_train_step

BATCH, SEQ, VOCAB = 6, 32, 120
EMB, HIDDEN, LAYERS, HEADS, GEN_HIDDEN = 48, 64, 2, 2, 32  # both encoders get an embeddings_project
IDS = dict(cls_id=1, sep_id=2, mask_id=3)
FIRST_STEP, NUM_STEPS = 3, 2
KERNEL_OPS = {"ElectraAttention", "ElectraAttentionGrad", "ElectraBiasGelu", "ElectraBiasGeluGrad",
              "ElectraResidualLayerNorm", "ElectraResidualLayerNormGrad", "ElectraSparseSoftmaxXent",
              "ElectraAdamWeightDecay"}


def hparams(objective: str) -> dict:
    return dict(model_size="tiny", objective=objective, vocab_size=VOCAB, max_seq_length=SEQ,
                train_batch_size=BATCH, embedding_size=EMB, generator_hidden_size=GEN_HIDDEN / HIDDEN,
                mask_prob=0.25, mask_with_replacement=objective == "electra", learning_rate=1e-2,
                weight_decay_rate=0.01, num_train_steps=100, num_warmup_steps=4,
                model_hparam_overrides=dict(hidden_size=HIDDEN, num_attention_heads=HEADS,
                                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def make_batch(index: int) -> dict:
    """[CLS] A [SEP] B [SEP] + padding (lengths 16..32), two segments, ids in [4, VOCAB)."""
    rng = np.random.RandomState(100 + index)
    lengths = rng.randint(SEQ // 2, SEQ + 1, size=BATCH)
    ids = rng.randint(4, VOCAB, size=(BATCH, SEQ))
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
    segments = np.zeros_like(mask)
    for row, length in enumerate(lengths):
        first_sep = length // 2
        ids[row, [0, first_sep, length - 1]] = IDS["cls_id"], IDS["sep_id"], IDS["sep_id"]
        segments[row, first_sep + 1:length] = 1
    return dict(input_ids=ids * mask, input_mask=mask, segment_ids=segments)


@tf.function(jit_compile=True)
def _threefry_uniform(shape, seed):
    return tf.random.stateless_uniform(shape, seed, alg="threefry")


def gumbel_uniform(seed, shape) -> np.ndarray:
    """The U(0, 1) draws behind the step's Gumbel noise, from the step seed as the library derives
    them (`PretrainingModel.call` splits it into mask and sample seeds, `sample_tokens` splits the
    latter once, `_gumbel_perturbed` draws ThreeFry uniforms under XLA). The test checks that they
    are the step's draws: the reference's own samples must equal the step's samples."""
    sample_seed = split_seed(seed, 2)[1]
    return _threefry_uniform(shape, split_seed(sample_seed, 1)[0]).numpy()


@pytest.fixture(params=[True, False], ids=["kernels_on", "kernels_off"])
def kernels_on(request, monkeypatch):
    """ELECTRA_TF_CPU_KERNELS=1 / 0, with the kernel library reloaded so the setting is read."""
    monkeypatch.setenv("ELECTRA_TF_CPU_KERNELS", "1" if request.param else "0")
    monkeypatch.delitem(cpu_kernels._loaded, "library", raising=False)
    assert (cpu_kernels.library() is not None) == request.param, "the CPU kernels failed to load"
    return request.param


def op_types(concrete_function) -> set:
    return {op.type for op in concrete_function.graph.get_operations()}


def variable_values(model) -> dict:
    return {v.name.split(":")[0]: v.numpy() for v in model.trainable_variables}


def run_tf(objective: str, kernels: bool):
    """Two TF steps: the initial weights; per step the forward outputs, gradients, Gumbel uniforms
    and the weights after it; the Adam moments at the end."""
    config = PretrainingConfig.from_hparams("parity", "/unused", hparams(objective))
    tf_keras.utils.set_random_seed(0)
    model = PretrainingModel(config, **IDS)
    randomize(model.trainable_variables, seed=1)
    optimizer = create_optimizer(config.learning_rate, config.num_train_steps, config.weight_decay_rate,
                                 config.num_warmup_steps)
    optimizer.iterations.assign(FIRST_STEP)  # as if resumed at global step 3
    step = tf.function(make_train_step(model, optimizer))

    @tf.function
    def forward(features, seed):
        with tf.GradientTape() as tape:
            output = model(features, training=True, seed=seed)
        grads = tape.gradient(output.loss, model.trainable_variables)
        return output, [tf.convert_to_tensor(g) for g in grads]

    records, initial = [], variable_values(model)
    for index in range(NUM_STEPS):
        batch, seed = make_batch(index), tf.constant([7, index])
        features = {name: tf.constant(value) for name, value in batch.items()}
        output, grads = forward(features, seed)
        loss = step(features, seed)
        assert float(loss) == pytest.approx(float(output.loss), rel=1e-6)  # same draws as `forward`
        uniform = gumbel_uniform(seed, (BATCH, config.max_predictions_per_seq, VOCAB))
        grads = {v.name.split(":")[0]: g.numpy() for v, g in zip(model.trainable_variables, grads)}
        records.append(dict(batch=batch, output=output, uniform=uniform, grads=grads,
                            weights=variable_values(model)))
    path = op_types(step.get_concrete_function(features, seed))
    path |= op_types(forward.get_concrete_function(features, seed))
    assert (path & KERNEL_OPS) == (KERNEL_OPS if kernels else set()), sorted(path & KERNEL_OPS)
    assert int(optimizer.iterations) == FIRST_STEP + NUM_STEPS
    moments = {v.name.split(":")[0]: tuple(slot.numpy() for slot in optimizer.adam_moments(v))
               for v in model.trainable_variables}
    return config, initial, records, moments


def expected_shapes(config) -> dict:
    """The original's variables (docs/fidelity.md#checkpoint-names) of this model, by name."""
    if config.objective == "electra":
        return electra_shapes(VOCAB, EMB, HIDDEN, LAYERS, GEN_HIDDEN, LAYERS)
    shapes = encoder_shapes("electra", HIDDEN, 4 * HIDDEN, LAYERS, EMB, VOCAB, True)
    shapes.update({"generator_predictions/dense/kernel": (HIDDEN, EMB), "generator_predictions/dense/bias": (EMB,),
                   "generator_predictions/LayerNorm/gamma": (EMB,), "generator_predictions/LayerNorm/beta": (EMB,),
                   "generator_predictions/output_bias": (VOCAB,)})
    return shapes


def to_torch(values: dict) -> dict:
    return {name: torch.from_numpy(np.asarray(value, np.float64)) for name, value in values.items()}


def tf_draws(output, uniform) -> Draws:
    """The step's random choices as the reference takes them: positions, [MASK]-or-keep per slot
    (read off the masked input; a position drawn twice reads as [MASK] if either slot masked it,
    which is what the original's scatter rule makes of it too) and the Gumbel uniforms."""
    positions = output.masked.masked_lm_positions.numpy()
    to_mask = np.take_along_axis(output.masked.masked_input_ids.numpy(), positions, 1) == IDS["mask_id"]
    return Draws(torch.from_numpy(positions.astype(np.int64)), torch.from_numpy(to_mask),
                 torch.from_numpy(uniform.astype(np.float64)))


def check_forward(output, ref, objective: str, where: str) -> float:
    """Same discrete draws and labels (exactly), same losses; returns the largest relative loss error."""
    discrete = dict(masked_lm_weights=output.masked.masked_lm_weights, masked_lm_ids=output.masked.masked_lm_ids,
                    masked_input_ids=output.masked.masked_input_ids)
    losses = dict(loss=output.loss, mlm_loss=output.mlm.loss)
    if objective == "electra":
        discrete.update(sampled_ids=output.sampled_ids, fake_input_ids=output.fake.fake_input_ids,
                        is_replaced=output.fake.is_replaced)
        losses.update(disc_loss=output.rtd.loss)
    for name, value in discrete.items():
        np.testing.assert_array_equal(value.numpy(), ref[name].numpy(), err_msg=f"{where}: {name}")
    for name, value in losses.items():
        assert float(value) == pytest.approx(float(ref[name]), rel=LOSS_RTOL), f"{where}: {name}"
    return max(abs(float(value) / float(ref[name]) - 1) for name, value in losses.items())


def check_close(actual: dict, expected: dict, what: str) -> float:
    """|actual - expected| <= TENSOR_RTOL * max|expected| + TENSOR_ATOL per tensor; returns the largest
    normalized difference (over tensors that are not zero in exact arithmetic)."""
    worst = 0.0
    for name, value in actual.items():
        reference = np.asarray(expected[name], np.float64)
        scale = float(np.max(np.abs(reference)))
        np.testing.assert_allclose(value, reference, rtol=0, atol=TENSOR_RTOL * scale + TENSOR_ATOL,
                                   err_msg=f"{what} of {name}")
        if scale > 1e-12:
            worst = max(worst, float(np.max(np.abs(value - reference))) / scale)
    return worst


# Tolerances, float32 (TF) against float64 (reference), same weights, same draws:
# - discrete results (masked input, weights, samples, fake input, labels): exactly equal;
# - losses: relative 1e-6 (observed < 1e-7; an LN epsilon of 1e-5 instead of 1e-12 or a tanh GELU
#   moves them by ~1e-4);
# - gradients and Adam moments: |diff| <= 3e-5 * the tensor's largest value + 1e-8 (observed
#   <= 5e-6 of the scale); the absolute term covers gradients that are 0 in exact arithmetic (the
#   key biases: softmax ignores a shift shared by a query's scores), which float32 gives as ~1e-10;
# - updated weights: 1e-5 absolute, on updates of ~4e-2 and weights of 0.05-1 (observed <= 3e-6).
#   Adam magnifies gradient rounding where an element's gradient is small against the tensor's:
#   m / (sqrt(v) + eps) changes by up to 0.1 / eps per unit of gradient as g -> 0.
LOSS_RTOL, TENSOR_RTOL, TENSOR_ATOL, WEIGHT_ATOL = 1e-6, 3e-5, 1e-8, 1e-5


@pytest.mark.parametrize("objective", ["electra", "bert"])
def test_two_steps_match_the_reference(objective, kernels_on):
    config, initial, records, tf_moments = run_tf(objective, kernels_on)
    assert {name: value.shape for name, value in initial.items()} == expected_shapes(config)
    setup = Setup(objective=objective, disc_heads=HEADS, gen_heads=max(1, GEN_HIDDEN // 64),  # fidelity.md#model-sizes
                  mask_id=IDS["mask_id"],
                  mask_prob=config.mask_prob, max_predictions_per_seq=config.max_predictions_per_seq,
                  learning_rate=config.learning_rate, num_train_steps=config.num_train_steps,
                  num_warmup_steps=config.num_warmup_steps, weight_decay_rate=config.weight_decay_rate)
    params, moments = to_torch(initial), {}
    seen = dict(loss=0.0, grad=0.0, moment=0.0, weight=0.0, update=0.0)
    keep_slots = duplicates = correct_samples = 0
    for index, record in enumerate(records):
        where = f"{objective}, step {index + 1}"
        output, draws = record["output"], tf_draws(record["output"], record["uniform"])
        batch = {name: torch.from_numpy(value.astype(np.int64)) for name, value in record["batch"].items()}
        previous = {name: value.numpy() for name, value in params.items()}
        params, moments, ref, ref_grads = train_step(params, moments, batch, draws, FIRST_STEP + index, setup)
        assert ref["global_norm"] > setup.clip_norm, "the gradients should be clipped"
        used = ref["masked_lm_weights"].numpy() > 0
        keep_slots += int((used & ~draws.to_mask.numpy()).sum())
        duplicates += sum(int(u.sum()) - len(set(row[u])) for row, u in zip(draws.positions.numpy(), used))
        if objective == "electra":  # selected positions whose sample is the original token
            selected = np.zeros(record["batch"]["input_ids"].shape, bool)
            np.put_along_axis(selected, draws.positions.numpy() * used, True, 1)
            selected[:, 0] = False  # unused slots point at [CLS]
            correct_samples += int((selected & (ref["is_replaced"].numpy() == 0)).sum())

        seen["loss"] = max(seen["loss"], check_forward(output, ref, objective, where))
        seen["grad"] = max(seen["grad"], check_close(record["grads"], ref_grads, f"{where}: gradient"))
        expected = {name: value.numpy() for name, value in params.items()}
        for name, value in record["weights"].items():
            np.testing.assert_allclose(value, expected[name], rtol=0, atol=WEIGHT_ATOL,
                                       err_msg=f"{where}: {name}")
            seen["weight"] = max(seen["weight"], float(np.max(np.abs(value - expected[name]))))
            seen["update"] = max(seen["update"], float(np.max(np.abs(expected[name] - previous[name]))))
    for slot in (0, 1):  # m, v after both steps: the clipped gradients' running moments
        actual = {name: pair[slot] for name, pair in tf_moments.items()}
        reference = {name: pair[slot].numpy() for name, pair in moments.items()}
        seen["moment"] = max(seen["moment"], check_close(actual, reference, f"{objective}: slot {'mv'[slot]}"))
    assert keep_slots > 0, "no slot kept its token: the 15 % keep branch went untested"
    if objective == "electra":  # the duplicate-position rule and "a correct sample is real" ran
        assert duplicates > 0 and correct_samples > 0, (duplicates, correct_samples)
    else:
        assert duplicates == 0  # drawn without replacement
    observed = ", ".join(f"{k} {v:.2g}" for k, v in seen.items())
    print(f"\n{objective}, kernels {'on' if kernels_on else 'off'}: {observed}")
