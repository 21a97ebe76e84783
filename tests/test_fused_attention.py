"""The fused CPU attention kernel: it builds here, gives TensorFlow's attention values and gradients
(same dropout mask), is used only where it may be, and a failed build falls back loudly."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.modeling import BertConfig, SelfAttention, attention_bias, build_encoder
from electra_tf.modeling import fused_attention
from electra_tf.modeling.layer_utils import build_in_scope


def test_the_kernel_builds_and_loads_on_this_machine():
    assert fused_attention.library() is not None, (
        "the fused attention kernel did not build (see the RuntimeWarning above): it needs a C++ "
        "compiler ($CXX, c++ or g++) and the installed TensorFlow's headers")
    assert fused_attention.library_path().exists()
    assert fused_attention.usable(tf.float32)
    assert not fused_attention.usable(tf.float16) and not fused_attention.usable(tf.bfloat16)


def _attention_layer(heads: int, dropout: float) -> SelfAttention:
    config = BertConfig(vocab_size=10, hidden_size=8 * heads, num_attention_heads=heads, intermediate_size=16,
                        max_position_embeddings=16, attention_probs_dropout_prob=dropout)
    layer = SelfAttention(config)
    build_in_scope(layer, [None, config.hidden_size])
    for i, variable in enumerate(layer.variables):  # non-zero biases too
        variable.assign(tf.random.stateless_normal(variable.shape, [i, 7]) * 0.5)
    layer.dropout._seed = lambda: tf.constant([11, 12])  # both paths draw the same mask
    return layer


@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("training", [False, True])
def test_values_and_gradients_equal_tensorflows_attention(heads, training):
    layer = _attention_layer(heads, dropout=0.3)
    batch, length = 3, 7
    x = tf.random.stateless_normal([batch * length, layer.config.hidden_size], [1, 2])  # [B*L, H]
    mask_bias = attention_bias(tf.constant([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5]))
    upstream = tf.random.stateless_normal(x.shape, [3, 4])

    def run():
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = layer(x, mask_bias, training=training)
        return out, tape.gradient(out, [x, *layer.trainable_variables], output_gradients=upstream)

    fused_out, fused_grads = tf.function(run)()
    with fused_attention.disabled():
        ref_out, ref_grads = tf.function(run)()
    np.testing.assert_allclose(fused_out.numpy(), ref_out.numpy(), rtol=1e-5, atol=1e-5)
    for variable, mine, theirs in zip(["x", *layer.trainable_variables], fused_grads, ref_grads):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-5, err_msg=str(variable))
    if training:  # dropout really dropped something, identically on both paths
        with fused_attention.disabled():
            undropped = layer(x, mask_bias, training=False)
        assert np.abs(fused_out.numpy() - undropped.numpy()).max() > 0.05


def _op_types(fn, *args) -> set:
    return {op.type for op in fn.get_concrete_function(*args).graph.get_operations()}


def test_used_only_where_it_may_be(tmp_path):
    encoder = build_encoder(BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=16, max_position_embeddings=16))
    ids = tf.constant([[2, 3, 4, 0]])
    assert "ElectraAttention" in _op_types(tf.function(lambda i: encoder(i, training=True)), ids)
    assert "ElectraAttention" not in _op_types(tf.function(lambda i: encoder(i), jit_compile=True), ids)
    with fused_attention.disabled():
        assert "ElectraAttention" not in _op_types(tf.function(lambda i: encoder(i)), ids)
    module = tf.Module()
    module.encoder = encoder
    module.serve = tf.function(lambda i: encoder(i), input_signature=[tf.TensorSpec([None, None], tf.int32)])
    tf.saved_model.save(module, str(tmp_path))  # traced while saving: TF ops only, loadable without the kernel
    assert b"ElectraAttention" not in (tmp_path / "saved_model.pb").read_bytes()


def test_bad_shapes_name_the_input():
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"bias must be \[B, L\]"):
        fused_attention.attention(tf.zeros([2, 5, 24]), tf.zeros([2, 4]), None, num_heads=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"keep must be \[B, heads, L, L\]"):
        fused_attention.attention(tf.zeros([2, 5, 24]), tf.zeros([2, 5]), tf.ones([2, 2, 5, 4], tf.bool),
                                  num_heads=2)


def test_a_failed_build_warns_once_and_the_model_uses_tensorflows_ops(tmp_path):
    script = textwrap.dedent("""
        import warnings
        import tensorflow as tf
        from electra_tf.modeling import BertConfig, build_encoder, fused_attention
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            encoder = build_encoder(BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1,
                                               num_attention_heads=2, intermediate_size=16,
                                               max_position_embeddings=16))
            out = encoder(tf.constant([[2, 3, 4]]), training=False)
            encoder(tf.constant([[2, 3]]), training=False)
        messages = [str(w.message) for w in caught if "fused attention" in str(w.message)]
        assert len(messages) == 1 and "compiling" in messages[0] and "failed" in messages[0], messages
        assert fused_attention.library() is None and out.shape == (1, 3, 8)
        print("fallback ok")
    """)
    env = dict(os.environ, CXX="/bin/false", ELECTRA_TF_BUILD_DIR=str(tmp_path / "build"))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "fallback ok" in done.stdout, done.stderr[-3000:]
    assert not list((tmp_path / "build").glob("*.so"))  # nothing half-written
