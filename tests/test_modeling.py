"""The model package: parameter counts, variable names, weight tying, numerics against NumPy, precision."""

import math

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from electra_tf.errors import InputError
# the original's names (docs/fidelity.md#checkpoint-names), written out once
from checkpoint_helpers import encoder_shapes
from electra_tf.modeling import BertConfig, ElectraModel, build_encoder, generator_config

SMALL = dict(hidden_size=256, num_hidden_layers=12, num_attention_heads=4, intermediate_size=1024, embedding_size=128)
BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
LARGE = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
# Two layers, E != H so both encoders get embeddings_project; generator = half width, one layer.
TINY = BertConfig(vocab_size=13, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16,
                  max_position_embeddings=16, embedding_size=6)


def _zeros_creator(next_creator, **kwargs):
    """Variables filled with zeros: enough to count parameters, without 334M random draws."""
    kwargs["initial_value"] = tf.zeros(kwargs["shape"], kwargs["dtype"])
    return next_creator(**kwargs)


@pytest.mark.parametrize("size, expected", [(SMALL, 13_483_008), (BASE, 108_891_648), (LARGE, 334_092_288)],
                         ids=["small", "base", "large"])
def test_discriminator_parameter_count_matches_released_models(size, expected):
    with tf.variable_creator_scope(_zeros_creator):
        encoder = build_encoder(BertConfig(vocab_size=30522, **size))
    assert sum(v.shape.num_elements() for v in encoder.trainable_variables) == expected


# ---------------------------------------------------------------------------------------------
# Names and tying


def _mlm_head_names(hidden, emb_width, vocab):
    return {"generator_predictions/dense/kernel": (hidden, emb_width),
            "generator_predictions/dense/bias": (emb_width,),
            "generator_predictions/LayerNorm/gamma": (emb_width,),
            "generator_predictions/LayerNorm/beta": (emb_width,),
            "generator_predictions/output_bias": (vocab,)}


def _names(model):
    names = {v.name.removesuffix(":0"): tuple(v.shape) for v in model.variables}
    assert len(names) == len(model.variables), "duplicate variable names"
    return names


@pytest.fixture(scope="module")
def small_electra():
    """The released Small layout (generator 0.25 width, all layers) with a tiny vocab to stay fast."""
    disc = BertConfig(vocab_size=50, **SMALL)
    return ElectraModel(disc, generator_config(disc, 0.25, 1.0))


def test_small_model_variable_names_follow_the_original(small_electra):
    vocab = 50
    expected = encoder_shapes("electra", 256, 1024, 12, 128, vocab, own_embeddings=True)
    expected.update(encoder_shapes("generator", 64, 256, 12, 128, vocab, own_embeddings=False))
    expected.update(_mlm_head_names(64, 128, vocab))
    expected.update({"discriminator_predictions/dense/kernel": (256, 256),
                     "discriminator_predictions/dense/bias": (256,),
                     "discriminator_predictions/dense_1/kernel": (256, 1),
                     "discriminator_predictions/dense_1/bias": (1,)})
    assert _names(small_electra) == expected


def test_small_generator_sizing_end_to_end(small_electra):
    gen, disc = small_electra.generator.config, small_electra.discriminator.config
    assert (gen.hidden_size, gen.num_attention_heads, gen.num_hidden_layers, gen.intermediate_size) == (64, 1, 12, 256)
    assert small_electra.generator.embeddings_project.kernel.shape == (128, 64)
    assert small_electra.discriminator.embeddings_project.kernel.shape == (128, 256)
    assert disc.hidden_size == 256
    ids = tf.constant([[1, 7, 8, 4, 2, 0], [1, 9, 3, 2, 0, 0]])
    mask = tf.cast(ids > 0, tf.int32)
    gen_logits = small_electra.generator_logits(ids, mask, tf.zeros_like(ids), positions=tf.constant([[1, 2], [3, 0]]))
    assert gen_logits.shape == (2, 2, 50) and gen_logits.dtype == tf.float32
    assert small_electra.generator_logits(ids, mask, tf.zeros_like(ids)).shape == (2, 6, 50)
    disc_logits = small_electra.discriminator_logits(ids, mask, tf.zeros_like(ids))
    assert disc_logits.shape == (2, 6) and disc_logits.dtype == tf.float32
    assert small_electra.generator(ids, mask).shape == (2, 6, 64)
    all_layers = small_electra.discriminator(ids, mask, return_all_layers=True)
    assert len(all_layers) == 12 and all_layers[-1].shape == (2, 6, 256)


def test_generator_and_discriminator_share_the_whole_embedding_block(small_electra):
    gen, disc = small_electra.generator.embeddings, small_electra.discriminator.embeddings
    assert gen is disc
    for name in ("word_embeddings", "token_type_embeddings", "position_embeddings"):
        assert getattr(gen, name).ref() == getattr(disc, name).ref()
    assert gen.layer_norm.gamma.ref() == disc.layer_norm.gamma.ref()
    assert gen.layer_norm.beta.ref() == disc.layer_norm.beta.ref()
    assert small_electra.generator_head.embeddings.word_embeddings is small_electra.discriminator.get_embedding_table()
    # Shared variables are counted once.
    assert len({v.ref() for v in small_electra.trainable_variables}) == len(small_electra.trainable_variables)


def test_untied_generator_embeddings_get_their_own_table_of_generator_width():
    model = ElectraModel(TINY, generator_config(TINY, 0.5, 0.5), untied_generator_embeddings=True)
    names = _names(model)
    gen_tables = {n: s for n, s in names.items() if n.startswith("generator/embeddings/")}
    assert gen_tables["generator/embeddings/word_embeddings"] == (13, 4)
    assert len(gen_tables) == 5 and "generator/embeddings_project/kernel" not in names
    assert model.generator.get_embedding_table().ref() != model.discriminator.get_embedding_table().ref()
    assert model.generator_head.embeddings is model.generator.embeddings
    assert names["generator_predictions/dense/kernel"] == (4, 4)


def test_tied_generator_is_the_discriminator_encoder():
    model = ElectraModel(TINY, untied_generator=False)
    assert model.generator is model.discriminator
    assert {n.split("/")[0] for n in _names(model)} == {"electra", "generator_predictions",
                                                        "discriminator_predictions"}


def test_bert_layout_has_only_the_encoder_and_the_mlm_head():
    model = ElectraModel(TINY, layout="bert")
    expected = encoder_shapes("electra", 8, 16, 2, 6, 13, own_embeddings=True, positions=16)
    expected.update(_mlm_head_names(8, 6, 13))
    assert _names(model) == expected
    with pytest.raises(ValueError, match="no discriminator"):
        model.discriminator_logits(tf.constant([[1, 2]]), None, None)


@pytest.mark.parametrize("kwargs, match", [
    (dict(layout="electric"), "layout"),
    (dict(gen_config=None), "gen_config"),
    (dict(gen_config=generator_config(BertConfig(vocab_size=14, hidden_size=8, num_attention_heads=2,
                                                 embedding_size=6), 0.5, 0.5)), "vocab_size"),
    (dict(gen_config=BertConfig(vocab_size=13, hidden_size=4, num_attention_heads=1)), "embedding_size"),
])
def test_bad_model_arguments_raise_input_error(kwargs, match):
    with pytest.raises(InputError, match=match):
        ElectraModel(TINY, **kwargs)


def test_sequence_longer_than_position_table_raises_input_error():
    encoder = build_encoder(TINY)
    with pytest.raises(InputError, match="max_position_embeddings"):
        encoder(tf.ones([1, 17], tf.int32))


# ---------------------------------------------------------------------------------------------
# Numerics


def _randomize(model, seed=0):
    """Random weights of unit-ish scale (zero biases and unit gammas would hide mistakes)."""
    rng = np.random.default_rng(seed)
    for v in sorted(model.variables, key=lambda v: v.name):
        v.assign(rng.normal(0.0, 0.5, v.shape).astype(np.float32))


def _np_layer_norm(x, gamma, beta):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * gamma + beta


def _np_gelu(x, exact=True):
    if exact:
        return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _np_encoder(w, prefix, cfg, ids, mask, segments, exact_gelu=True):
    """Post-LN BERT forward pass in float64 from the variables' names (the original's graph)."""
    emb = "electra/embeddings"
    seq = ids.shape[1]
    x = w[f"{emb}/word_embeddings"][ids] + w[f"{emb}/token_type_embeddings"][segments] \
        + w[f"{emb}/position_embeddings"][:seq]
    x = _np_layer_norm(x, w[f"{emb}/LayerNorm/gamma"], w[f"{emb}/LayerNorm/beta"])
    if f"{prefix}/embeddings_project/kernel" in w:
        x = x @ w[f"{prefix}/embeddings_project/kernel"] + w[f"{prefix}/embeddings_project/bias"]
    heads, size = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
    adder = (1.0 - mask[:, None, None, :]) * -10000.0
    for i in range(cfg.num_hidden_layers):
        p = f"{prefix}/encoder/layer_{i}"

        def dense(h, name):
            return h @ w[f"{p}/{name}/kernel"] + w[f"{p}/{name}/bias"]

        def split(h):  # [B, L, H] -> [B, heads, L, size]
            return h.reshape(h.shape[0], seq, heads, size).transpose(0, 2, 1, 3)

        q, k, v = (split(dense(x, f"attention/self/{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + adder
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape[0], seq, -1)
        x = _np_layer_norm(dense(context, "attention/output/dense") + x,
                           w[f"{p}/attention/output/LayerNorm/gamma"], w[f"{p}/attention/output/LayerNorm/beta"])
        out = dense(_np_gelu(dense(x, "intermediate/dense"), exact_gelu), "output/dense")
        x = _np_layer_norm(out + x, w[f"{p}/output/LayerNorm/gamma"], w[f"{p}/output/LayerNorm/beta"])
    return x


@pytest.fixture(scope="module")
def tiny_model():
    model = ElectraModel(TINY, generator_config(TINY, 0.5, 0.5))
    _randomize(model)
    return model


@pytest.fixture(scope="module")
def tiny_batch():
    ids = np.array([[1, 5, 6, 7, 2, 9, 3, 2], [1, 4, 11, 2, 0, 0, 0, 0]], np.int32)
    mask = (ids > 0).astype(np.int32)
    segments = np.array([[0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0]], np.int32)
    return ids, mask, segments


def test_forward_pass_matches_numpy_post_ln_bert_with_exact_gelu(tiny_model, tiny_batch):
    ids, mask, segments = tiny_batch
    w = {v.name.removesuffix(":0"): v.numpy().astype(np.float64) for v in tiny_model.variables}
    positions = np.array([[1, 3], [2, 0]])
    for encoder, prefix in ((tiny_model.discriminator, "electra"), (tiny_model.generator, "generator")):
        got = encoder(ids, mask, segments).numpy()
        want = _np_encoder(w, prefix, encoder.config, ids, mask, segments)
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
        # The check can tell exact GELU from Model Garden's tanh approximation.
        approx = _np_encoder(w, prefix, encoder.config, ids, mask, segments, exact_gelu=False)
        assert np.abs(approx - want).max() > 1e-4

    gen_out = _np_encoder(w, "generator", tiny_model.generator.config, ids, mask, segments)
    h = _np_gelu(gen_out[np.arange(2)[:, None], positions] @ w["generator_predictions/dense/kernel"]
                 + w["generator_predictions/dense/bias"])
    h = _np_layer_norm(h, w["generator_predictions/LayerNorm/gamma"], w["generator_predictions/LayerNorm/beta"])
    want_mlm = h @ w["electra/embeddings/word_embeddings"].T + w["generator_predictions/output_bias"]
    got_mlm = tiny_model.generator_logits(ids, mask, segments, positions=positions).numpy()
    np.testing.assert_allclose(got_mlm, want_mlm, atol=1e-4, rtol=1e-5)

    disc_out = _np_encoder(w, "electra", TINY, ids, mask, segments)
    h = _np_gelu(disc_out @ w["discriminator_predictions/dense/kernel"] + w["discriminator_predictions/dense/bias"])
    want_disc = (h @ w["discriminator_predictions/dense_1/kernel"] + w["discriminator_predictions/dense_1/bias"])[..., 0]
    got_disc = tiny_model.discriminator_logits(ids, mask, segments).numpy()
    np.testing.assert_allclose(got_disc, want_disc, atol=1e-4, rtol=1e-5)


def test_every_variable_gets_a_gradient(tiny_model, tiny_batch):
    ids, mask, segments = tiny_batch
    with tf.GradientTape() as tape:
        loss = (tf.reduce_sum(tiny_model.generator_logits(ids, mask, segments, np.array([[1, 3], [2, 0]])))
                + tf.reduce_sum(tiny_model.discriminator_logits(ids, mask, segments)))
    grads = tape.gradient(loss, tiny_model.trainable_variables)
    missing = [v.name for v, g in zip(tiny_model.trainable_variables, grads) if g is None]
    assert not missing


def test_attention_mask_blocks_padding(tiny_model, tiny_batch):
    ids, mask, segments = tiny_batch
    base = tiny_model.discriminator(ids, mask, segments).numpy()
    changed_ids, changed_segments = ids.copy(), segments.copy()
    changed_ids[1, 4:] = [5, 6, 7, 8]
    changed_segments[1, 4:] = 1
    changed = tiny_model.discriminator(changed_ids, mask, changed_segments).numpy()
    np.testing.assert_allclose(changed[1, :4], base[1, :4], atol=1e-6, rtol=0)
    np.testing.assert_array_equal(changed[0], base[0])
    # ... while a real token does change its neighbours.
    changed_ids[1, 2] = 12
    assert np.abs(tiny_model.discriminator(changed_ids, mask, segments).numpy()[1, :2] - base[1, :2]).max() > 1e-3


def test_dropout_only_in_training_and_tf_function_matches_eager(tiny_model, tiny_batch):
    ids, mask, segments = tiny_batch
    eval_1 = tiny_model.discriminator_logits(ids, mask, segments, training=False).numpy()
    eval_2 = tiny_model.discriminator_logits(ids, mask, segments, training=False).numpy()
    np.testing.assert_array_equal(eval_1, eval_2)
    train_1 = tiny_model.discriminator_logits(ids, mask, segments, training=True).numpy()
    train_2 = tiny_model.discriminator_logits(ids, mask, segments, training=True).numpy()
    assert np.abs(train_1 - eval_1).max() > 1e-3 and np.abs(train_1 - train_2).max() > 1e-3

    @tf.function
    def both(ids, mask, segments, positions):
        return (tiny_model.generator_logits(ids, mask, segments, positions),
                tiny_model.discriminator_logits(ids, mask, segments))

    positions = np.array([[1, 3], [2, 0]])
    gen_fn, disc_fn = both(ids, mask, segments, positions)
    np.testing.assert_allclose(disc_fn.numpy(), eval_1, atol=1e-5)
    np.testing.assert_allclose(gen_fn.numpy(), tiny_model.generator_logits(ids, mask, segments, positions).numpy(),
                               atol=1e-5)


# Relative to the largest logit; measured 0.5-0.7 % (bfloat16, 8 mantissa bits) and 0.07-0.12 % (float16, 11),
# on an AVX2 EPYC; the bounds are about 3 times that (they were 5 % for both, loose enough to hide a lost bit).
@pytest.mark.parametrize("policy, half, tolerance", [("mixed_bfloat16", tf.bfloat16, 0.02),
                                                     ("mixed_float16", tf.float16, 0.004)])
def test_mixed_precision_gives_float32_logits_close_to_float32(tiny_model, tiny_batch, policy, half, tolerance):
    ids, mask, segments = tiny_batch
    tf_keras.mixed_precision.set_global_policy(policy)
    try:
        model = ElectraModel(TINY, generator_config(TINY, 0.5, 0.5))
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")
    reference = {v.name: v for v in tiny_model.variables}
    for v in model.variables:
        assert v.dtype == tf.float32
        v.assign(reference[v.name])
    assert model.discriminator(ids, mask, segments).dtype == half
    positions = np.array([[1, 3], [2, 0]])
    for got, want in ((model.generator_logits(ids, mask, segments, positions),
                       tiny_model.generator_logits(ids, mask, segments, positions)),
                      (model.discriminator_logits(ids, mask, segments),
                       tiny_model.discriminator_logits(ids, mask, segments))):
        assert got.dtype == tf.float32
        assert np.abs(got.numpy() - want.numpy()).max() <= tolerance * np.abs(want.numpy()).max()


@pytest.mark.parametrize("kernels", ["on", "off"])
def test_a_batch_of_no_rows_encodes_to_no_rows(kernels):
    """A replica's empty share of a short last batch: [0, L] ids give [0, L, H] in training too, with
    TensorFlow's ops as with the CPU kernels (a reshape to [0, -1, heads, size] read -1 as 1: eagerly,
    where the batch of 0 is static)."""
    import contextlib
    from electra_tf import cpu_kernels
    encoder = build_encoder(TINY)
    ids = tf.zeros([0, 5], tf.int32)
    with cpu_kernels.disabled() if kernels == "off" else contextlib.nullcontext():
        assert encoder(ids, tf.ones_like(ids), tf.zeros_like(ids), training=True).shape == (0, 5, TINY.hidden_size)
