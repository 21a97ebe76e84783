"""Padding-free inference (`Encoder.call_unpadded` and `Encoder.infer`, what the served SavedModels
and predict.py run): the real tokens' outputs equal the padded forward pass's, with TensorFlow's ops
and with the CPU kernels; the [CLS]-only last block, in serving and in fine-tuning (same values and
gradients); the Q/K/V kernels frozen for serving."""

import contextlib
import re

import numpy as np
import pytest
import tensorflow as tf

from electra_tf import cpu_kernels
from electra_tf.modeling import BertConfig, build_encoder, unpadded_rows
from finetune.config import FinetuningConfig
from finetune.model import FinetuningModel
from finetune.tasks import get_task

# E != H (embeddings_project runs on the real tokens only), three blocks, two heads.
CONFIG = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=16, embedding_size=12)
LENGTHS = [9, 3, 12, 1]  # one example fills the batch's length, one is a lone [CLS]


@pytest.fixture(scope="module")
def encoder():
    encoder = build_encoder(CONFIG, name="electra")
    rng = np.random.default_rng(5)
    for v in encoder.variables:
        v.assign(rng.normal(0.0, 0.5, v.shape).astype(np.float32))
    return encoder


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(6)
    mask = (np.arange(12)[None, :] < np.array(LENGTHS)[:, None]).astype(np.int32)  # [4, 12]
    # Padding positions hold real-looking ids and segments: only the mask may keep them out.
    ids = rng.integers(1, CONFIG.vocab_size, mask.shape).astype(np.int32)
    segments = (np.arange(12)[None, :] >= 5).astype(np.int32).repeat(4, axis=0)
    return ids, mask, segments


@pytest.mark.parametrize("kernels", [True, False], ids=["cpu_kernels", "tf_ops"])
def test_real_tokens_match_the_padded_forward_pass(encoder, batch, kernels):
    ids, mask, segments = batch
    if kernels and not cpu_kernels.usable(tf.float32):
        pytest.fail("the CPU kernels did not build; this parametrisation exists to test them")
    with contextlib.nullcontext() if kernels else cpu_kernels.disabled():
        padded = encoder(ids, mask, segments, training=False).numpy()  # [B, L, H]
        tokens = encoder.call_unpadded(ids, mask, segments).numpy()  # [N, H]
        cls = encoder.call_unpadded(ids, mask, segments, cls_only=True).numpy()  # [B, H]
    assert tokens.shape == (sum(LENGTHS), CONFIG.hidden_size)
    np.testing.assert_allclose(tokens, padded[mask == 1], atol=2e-5, rtol=0)
    np.testing.assert_allclose(cls, padded[:, 0], atol=2e-5, rtol=0)
    rows = unpadded_rows(mask).numpy()
    np.testing.assert_array_equal(rows, np.flatnonzero(mask.reshape(-1)))
    # `infer`, what predict.py and the token-level servers run: the padded layout back, 0 on padding
    with contextlib.nullcontext() if kernels else cpu_kernels.disabled():
        sequence = encoder.infer(ids, mask, segments).numpy()  # [B, L, H]
        np.testing.assert_array_equal(encoder.infer(ids, mask, segments, cls_only=True).numpy(), cls)
    np.testing.assert_array_equal(sequence[mask == 1], tokens)
    assert not sequence[mask == 0].any()


@pytest.mark.parametrize("kernels", [True, False], ids=["cpu_kernels", "tf_ops"])
def test_cls_only_last_block_gives_the_same_values_and_gradients(encoder, batch, kernels):
    ids, mask, segments = batch
    weights = tf.constant(np.random.default_rng(7).normal(size=[len(LENGTHS), CONFIG.hidden_size]), tf.float32)
    with contextlib.nullcontext() if kernels else cpu_kernels.disabled():
        with tf.GradientTape(persistent=True) as tape:
            full = encoder(ids, mask, segments, training=False)[:, 0]  # [B, H]
            cls = encoder(ids, mask, segments, training=False, cls_only=True)  # [B, H]
            full_loss, cls_loss = tf.reduce_sum(full * weights), tf.reduce_sum(cls * weights)
        np.testing.assert_allclose(cls.numpy(), full.numpy(), atol=2e-5, rtol=0)
        for v, g_full, g_cls in zip(encoder.trainable_variables, tape.gradient(full_loss, encoder.trainable_variables),
                                    tape.gradient(cls_loss, encoder.trainable_variables)):
            g_full, g_cls = tf.convert_to_tensor(g_full).numpy(), tf.convert_to_tensor(g_cls).numpy()
            np.testing.assert_allclose(g_cls, g_full, atol=1e-4 * max(1.0, np.abs(g_full).max()), rtol=0,
                                       err_msg=v.name)


def test_fine_tuning_uses_the_cls_only_block_for_cls_heads_only():
    assert FinetuningModel(CONFIG, [get_task("sst"), get_task("mrpc")]).cls_only
    squad = FinetuningModel(CONFIG, [get_task("squad")], FinetuningConfig(model_name="m", data_dir="unused"))
    assert not squad.cls_only  # its head reads every token


def test_inside_a_tf_function_with_unknown_shapes(encoder, batch):
    ids, mask, segments = batch
    spec = tf.TensorSpec([None, None], tf.int32)

    @tf.function(input_signature=[spec, spec, spec])
    def cls_of(ids, mask, segments):
        return encoder.call_unpadded(ids, mask, segments, cls_only=True)

    padded = encoder(ids, mask, segments, training=False).numpy()
    np.testing.assert_allclose(cls_of(ids, mask, segments).numpy(), padded[:, 0], atol=2e-5, rtol=0)
    # A batch without padding goes the same way (N = B*L).
    full = np.ones_like(mask)
    np.testing.assert_allclose(cls_of(ids, full, segments).numpy(),
                               encoder(ids, full, segments, training=False).numpy()[:, 0], atol=2e-5, rtol=0)


def test_frozen_qkv_gives_the_same_outputs_and_refuses_training(batch):
    ids, mask, segments = batch
    encoder = build_encoder(CONFIG, name="electra")
    before = encoder.call_unpadded(ids, mask, segments).numpy()
    variables = len(encoder.variables)
    encoder.freeze_qkv()
    np.testing.assert_array_equal(encoder.call_unpadded(ids, mask, segments).numpy(), before)
    frozen = [v for v in encoder.variables if "frozen_qkv" in v.name]  # tracked, so a SavedModel holds them
    assert len(frozen) == 2 * CONFIG.num_hidden_layers and not any(v.trainable for v in frozen)
    # and the Q/K/V variables are gone from it, so that a SavedModel stores them once
    assert not [v.name for v in encoder.variables if re.search(r"/(query|key|value)/", v.name)]
    assert len(encoder.variables) == variables - 6 * CONFIG.num_hidden_layers + 2 * CONFIG.num_hidden_layers
    with pytest.raises(ValueError, match="frozen for serving"):
        encoder(ids, mask, segments, training=True)
