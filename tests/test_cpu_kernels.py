"""The fused CPU kernels (attention; bias + GELU; bias + dropout + residual + LayerNorm): they build
here, give TensorFlow's values and gradients (same dropout masks), repeat bit for bit, are used only
where they may be, and a failed build falls back loudly."""

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.modeling import BertConfig, SelfAttention, attention_bias, build_encoder
from electra_tf import cpu_kernels
from electra_tf.modeling.dropout import Dropout
from electra_tf.modeling.layer_utils import LAYER_NORM_EPSILON, build_in_scope, gelu, layer_norm

FUSED_OPS = {"ElectraAttention", "ElectraBiasGelu", "ElectraResidualLayerNorm"}


def test_the_kernels_build_and_load_on_this_machine():
    assert cpu_kernels.library() is not None, (
        "the fused CPU kernels did not build (see the RuntimeWarning above): they need a C++ "
        "compiler ($CXX, c++ or g++) and the installed TensorFlow's headers")
    assert cpu_kernels.library_path().exists()
    assert cpu_kernels.usable(tf.float32)
    assert not cpu_kernels.usable(tf.float16) and not cpu_kernels.usable(tf.bfloat16)


def test_another_checkouts_virtualenv_reuses_the_build_but_other_flags_do_not(monkeypatch):
    flags = tf.sysconfig.get_compile_flags()
    here = cpu_kernels.library_path()
    moved = [("-I/elsewhere/.venv/lib/python3.11/site-packages/tensorflow/include" if flag.startswith("-I") else flag)
             for flag in flags]
    monkeypatch.setattr(tf.sysconfig, "get_compile_flags", lambda: moved)
    assert cpu_kernels.library_path() == here
    monkeypatch.setattr(tf.sysconfig, "get_compile_flags", lambda: moved + ["-DEIGEN_DONT_VECTORIZE"])
    assert cpu_kernels.library_path() != here


def _value_and_grads(fn, inputs, upstream):
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        out = fn(*inputs)
    return out, tape.gradient(out, inputs, output_gradients=upstream)


def _assert_close(got, want, names, rtol=1e-5, atol=1e-5):
    for name, mine, theirs in zip(names, got, want):
        mine, theirs = tf.convert_to_tensor(mine), tf.convert_to_tensor(theirs)  # IndexedSlices too
        assert mine.shape == theirs.shape, name
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=rtol, atol=atol, err_msg=name)


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
def test_attention_values_and_gradients_equal_tensorflows(heads, training):
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
    with cpu_kernels.disabled():
        ref_out, ref_grads = tf.function(run)()
    np.testing.assert_allclose(fused_out.numpy(), ref_out.numpy(), rtol=1e-5, atol=1e-5)
    _assert_close(fused_grads, ref_grads, ["x", *layer.trainable_variables], rtol=1e-4)
    if training:  # dropout really dropped something, identically on both paths
        with cpu_kernels.disabled():
            undropped = layer(x, mask_bias, training=False)
        assert np.abs(fused_out.numpy() - undropped.numpy()).max() > 0.05


def test_bias_gelu_equals_gelu_of_the_sum_with_the_same_gradients():
    x = tf.reshape(tf.constant(np.linspace(-9, 9, 67 * 96), tf.float32), [67, 96])  # [N, F], odd N
    bias = tf.random.stateless_normal([96], [1, 2])
    upstream = tf.random.stateless_normal(x.shape, [3, 4])
    ours, ours_grads = _value_and_grads(cpu_kernels.bias_gelu, [x, bias], upstream)
    ref, ref_grads = _value_and_grads(lambda a, b: gelu(a + b), [x, bias], upstream)
    np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-6, atol=1e-6)
    _assert_close(ours_grads, ref_grads, ["x", "bias"], rtol=1e-5, atol=2e-5)
    # The exact GELU, not the tanh approximation (which differs by up to ~5e-4 around |x| = 2).
    exact = tf.nn.gelu(x + bias, approximate=False)
    np.testing.assert_allclose(ours.numpy(), exact.numpy(), atol=1e-6)


@pytest.mark.parametrize("rate", [0.0, 0.3])
@pytest.mark.parametrize("width", [64, 24])
def test_residual_layer_norm_equals_dropout_residual_and_layer_norm(rate, width):
    rows = 75  # not a multiple of the kernel's blocks of rows
    y = 2.0 + 3.0 * tf.random.stateless_normal([rows, width], [1, 2])
    residual = tf.random.stateless_normal([rows, width], [3, 4])
    bias, gamma, beta = (tf.random.stateless_normal([width], [5, i]) for i in range(3))
    upstream = tf.random.stateless_normal([rows, width], [6, 7])
    dropout = Dropout(rate)
    keep = dropout.keep_mask(y.shape, tf.shape(y)) if rate else None
    norm = layer_norm()
    norm.build([None, width])

    norm.gamma.assign(gamma)
    norm.beta.assign(beta)

    def reference(y, bias, residual):  # the TensorFlow path: Dropout's multiply, LayerNorm's layer
        dropped = y + bias if keep is None else (y + bias) * tf.where(keep, dropout.keep_scale, 0.0)
        return norm(dropped + residual)

    def fused(y, bias, residual, gamma, beta):
        return cpu_kernels.residual_layer_norm(y, bias, keep, residual, gamma, beta,
                                               keep_scale=dropout.keep_scale, epsilon=LAYER_NORM_EPSILON)

    ours, ours_grads = _value_and_grads(fused, [y, bias, residual, gamma, beta], upstream)
    with tf.GradientTape() as tape:
        tape.watch([y, bias, residual])
        ref = reference(y, bias, residual)
    ref_grads = tape.gradient(ref, [y, bias, residual, norm.gamma, norm.beta], output_gradients=upstream)
    np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-5, atol=2e-5)
    _assert_close(ours_grads, ref_grads, ["y", "bias", "residual", "gamma", "beta"], rtol=1e-4, atol=2e-5)
    if rate:  # dropped units pass no gradient to y; the residual's gradient is the LayerNorm's
        assert np.all(ours_grads[0].numpy()[~keep.numpy()] == 0)
        assert np.abs(ours_grads[2].numpy()[~keep.numpy()]).max() > 0


def test_sparse_softmax_cross_entropy_equals_tensorflows_with_the_same_gradient():
    logits = 6.0 * tf.random.stateless_normal([3, 7, 30522], [1, 2])  # [B, N, V], as the MLM head's
    logits = tf.tensor_scatter_nd_update(logits, [[0, 0, 5]], [1e4])  # a row dominated by one class
    labels = tf.random.stateless_uniform([3, 7], [3, 4], maxval=30522, dtype=tf.int32)
    labels = tf.tensor_scatter_nd_update(labels, [[0, 0]], [5])
    upstream = tf.random.stateless_normal([3, 7], [5, 6])
    ours, (ours_grad,) = _value_and_grads(lambda x: cpu_kernels.sparse_softmax_cross_entropy(labels, x),
                                          [logits], upstream)
    ref, (ref_grad,) = _value_and_grads(
        lambda x: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=x), [logits], upstream)
    assert ours.shape == (3, 7) and ours.numpy()[0, 0] == 0.0
    np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours_grad.numpy(), ref_grad.numpy(), rtol=1e-5, atol=1e-7)
    from electra_tf.objectives import mlm_loss  # the MLM loss uses it on CPU, TF's op under XLA
    weights = tf.ones([3, 7])
    assert "ElectraSparseSoftmaxXent" in _op_types(tf.function(mlm_loss), logits, labels, weights)
    assert "ElectraSparseSoftmaxXent" not in _op_types(tf.function(mlm_loss, jit_compile=True), logits,
                                                       labels, weights)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"labels\[2\] = 30522 is not a class id"):
        cpu_kernels.sparse_softmax_cross_entropy(tf.constant([0, 1, 30522]), logits[0, :3])


def _encoder(hidden_act: str = "gelu"):
    config = BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=48, max_position_embeddings=16, hidden_act=hidden_act,
                        hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.2)
    encoder = build_encoder(config)
    for i, variable in enumerate(encoder.trainable_variables):  # non-trivial LayerNorms and biases too
        variable.assign(variable + 0.1 * tf.random.stateless_normal(variable.shape, [i, 3]))
    for i, layer in enumerate(layer for layer in encoder._flatten_layers() if isinstance(layer, Dropout)):
        layer._seed = lambda i=i: tf.constant([i, 5])  # both paths draw the same masks
    return encoder


@pytest.mark.parametrize("hidden_act", ["gelu", "relu"])
def test_a_whole_encoder_trains_the_same_with_and_without_the_kernels(hidden_act):
    encoder = _encoder(hidden_act)
    ids = tf.constant([[2, 5, 7, 9, 11, 3], [2, 8, 6, 3, 0, 0]])
    mask = tf.cast(ids > 0, tf.int32)
    upstream = tf.random.stateless_normal([2, 6, 32], [8, 9])

    def run():
        with tf.GradientTape() as tape:
            out = encoder(ids, mask, training=True)
        return out, tape.gradient(out, encoder.trainable_variables, output_gradients=upstream)

    fused = tf.function(run)
    ops = _op_types(fused)
    assert FUSED_OPS <= ops if hidden_act == "gelu" else FUSED_OPS - {"ElectraBiasGelu"} <= ops
    ours, ours_grads = fused()
    with cpu_kernels.disabled():
        ref, ref_grads = tf.function(run)()
    np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)
    _assert_close(ours_grads, ref_grads, [v.name for v in encoder.trainable_variables], rtol=1e-3, atol=1e-4)
    again, again_grads = fused()  # the column sums are taken in a fixed order: bit-identical
    np.testing.assert_array_equal(again.numpy(), ours.numpy())
    for mine, before in zip(again_grads, ours_grads):
        np.testing.assert_array_equal(tf.convert_to_tensor(mine).numpy(), tf.convert_to_tensor(before).numpy())


def _op_types(fn, *args) -> set:
    return {op.type for op in fn.get_concrete_function(*args).graph.get_operations()}


def test_used_only_where_they_may_be(tmp_path):
    encoder = build_encoder(BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=16, max_position_embeddings=16))
    ids = tf.constant([[2, 3, 4, 0]])
    assert FUSED_OPS <= _op_types(tf.function(lambda i: encoder(i, training=True)), ids)
    assert not FUSED_OPS & _op_types(tf.function(lambda i: encoder(i), jit_compile=True), ids)
    with cpu_kernels.disabled():
        assert not FUSED_OPS & _op_types(tf.function(lambda i: encoder(i)), ids)
    module = tf.Module()
    module.encoder = encoder
    module.serve = tf.function(lambda i: encoder(i), input_signature=[tf.TensorSpec([None, None], tf.int32)])
    tf.saved_model.save(module, str(tmp_path))  # traced while saving: TF ops only, loadable without the kernels
    assert b"Electra" not in (tmp_path / "saved_model.pb").read_bytes()


def test_bad_shapes_name_the_input():
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"bias must be \[B, L\]"):
        cpu_kernels.attention(tf.zeros([2, 5, 24]), tf.zeros([2, 4]), None, num_heads=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"keep must be \[B, heads, L, L\]"):
        cpu_kernels.attention(tf.zeros([2, 5, 24]), tf.zeros([2, 5]), tf.ones([2, 2, 5, 4], tf.bool),
                              num_heads=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"bias must be \[W\] with W = 6"):
        cpu_kernels.bias_gelu(tf.zeros([4, 6]), tf.zeros([5]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"residual must have shape \[4,6\]"):
        cpu_kernels.residual_layer_norm(tf.zeros([4, 6]), tf.zeros([6]), None, tf.zeros([4, 5]), tf.ones([6]),
                                        tf.zeros([6]), keep_scale=1.0, epsilon=1e-12)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"keep must have shape \[4,6\]"):
        cpu_kernels.residual_layer_norm(tf.zeros([4, 6]), tf.zeros([6]), tf.ones([4, 5], tf.bool), tf.zeros([4, 6]),
                                        tf.ones([6]), tf.zeros([6]), keep_scale=1.0, epsilon=1e-12)


def test_a_failed_build_warns_once_and_the_model_uses_tensorflows_ops(tmp_path):
    script = textwrap.dedent("""
        import warnings
        import tensorflow as tf
        from electra_tf import cpu_kernels
        from electra_tf.modeling import BertConfig, build_encoder
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            encoder = build_encoder(BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1,
                                               num_attention_heads=2, intermediate_size=16,
                                               max_position_embeddings=16))
            out = encoder(tf.constant([[2, 3, 4]]), training=False)
            encoder(tf.constant([[2, 3]]), training=False)
        messages = [str(w.message) for w in caught if "fused CPU kernels" in str(w.message)]
        assert len(messages) == 1 and "compiling" in messages[0] and "failed" in messages[0], messages
        assert cpu_kernels.library() is None and out.shape == (1, 3, 8)
        print("fallback ok")
    """)
    env = dict(os.environ, CXX="/bin/false", ELECTRA_TF_BUILD_DIR=str(tmp_path / "build"))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "fallback ok" in done.stdout, done.stderr[-3000:]
    assert not list((tmp_path / "build").glob("*.so"))  # nothing half-written


def test_processes_that_start_together_compile_once_and_a_stuck_or_killed_builder_blocks_nobody(
        tmp_path, monkeypatch, capfd):
    """On a new machine a run's workers (or a test suite's processes) start together: one compiles
    and the others wait for its library rather than spend the 40 s again. A lock holder that never
    lets go is waited for BUILD_WAIT_SECONDS, then built around; one killed frees the lock. Threads
    stand for the processes: each opens the lock file itself."""
    compiles = tmp_path / "compiles"
    compiler = tmp_path / "fake_cxx"  # records its call, takes a second, writes the file after -o
    compiler.write_text(f'#!/bin/sh\necho call >> {compiles}\nsleep 1\n'
                        'while [ "$1" != -o ]; do shift; done\necho built > "$2"\n')
    compiler.chmod(0o755)
    monkeypatch.setenv("CXX", str(compiler))
    path = tmp_path / "build" / "cpu_kernels_test.so"
    path.parent.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time\nlock = open(sys.argv[1], 'w')\n"
                               "fcntl.flock(lock, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(600)",
                               str(path.with_suffix(".lock"))], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    monkeypatch.setattr(cpu_kernels, "BUILD_WAIT_SECONDS", 1)
    cpu_kernels.build(path)  # the holder never lets go: built without the lock after a second
    assert compiles.read_text() == "call\n" and path.read_text() == "built\n"
    holder.kill()
    holder.wait()
    path.unlink()
    monkeypatch.setattr(cpu_kernels, "BUILD_WAIT_SECONDS", 300)
    capfd.readouterr()
    builders = [threading.Thread(target=cpu_kernels.build, args=(path,)) for _ in range(3)]
    for builder in builders:
        builder.start()
    for builder in builders:
        builder.join()
    assert compiles.read_text() == "call\n" * 2 and path.read_text() == "built\n"  # once more, not three times
    assert 1 <= capfd.readouterr().err.count("waiting for another process's build") <= 2
    assert sorted(p.name for p in path.parent.iterdir()) == ["cpu_kernels_test.lock", "cpu_kernels_test.so"]


def test_the_build_runs_when_the_model_is_made_not_while_it_is_traced(tmp_path, monkeypatch):
    """The one-time compile (a subprocess) runs eagerly, when the encoder is constructed: traced by
    AutoGraph it printed four 'Please report this to the TensorFlow team' warnings on a first run."""
    calls = []

    def build(path):
        calls.append(tf.inside_function())
        raise RuntimeError("no compiler in this test")

    monkeypatch.setattr(cpu_kernels, "_loaded", {})
    monkeypatch.setattr(cpu_kernels, "build", build)
    monkeypatch.setenv("ELECTRA_TF_BUILD_DIR", str(tmp_path))
    with pytest.warns(RuntimeWarning, match="fused CPU kernels unavailable"):
        encoder = build_encoder(BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                           intermediate_size=16, max_position_embeddings=16))
    assert calls == [False]  # built (here: tried) once, eagerly
    tf.function(lambda ids: encoder(ids, training=True))(tf.constant([[2, 3, 4, 0]]))
    assert calls == [False]  # tracing the model did not build again
