"""The transformer block's work between its matmuls, one function per fused operation.

`transformer.TransformerBlock` is written once and calls these; each one chooses, inside, between
the fused CPU kernel (`electra_tf.cpu_kernels`) and TensorFlow's ops, which compute the same math
with the same dropout masks:
- `attention_core`: softmax(Q K^T / sqrt(D) + mask) · dropout → · V, from the fused Q/K/V projection;
- `bias_activation`: the intermediate dense layer's bias and activation (the kernel: bias + GELU);
- `dropout_residual_layer_norm`: LayerNorm(dropout(y + bias) + residual), after each output dense.
The kernels are used when `training` is a Python bool (the dropout choice is then made while
tracing) and `cpu_kernels.usable` says so for the activations' dtype: float32 on a machine without
GPUs, outside XLA clusters and SavedModel saving, unless `ELECTRA_TF_CPU_KERNELS=0`.
"""

import math

import tensorflow as tf

from electra_tf import cpu_kernels
from electra_tf.modeling.dropout import Dropout
from electra_tf.modeling.layer_utils import LayerNorm, get_activation


def _use_kernels(x: tf.Tensor, training) -> bool:
    return isinstance(training, bool) and cpu_kernels.usable(x.dtype)


def attention_core(qkv: tf.Tensor, mask_bias: tf.Tensor, dropout: Dropout, num_heads: int, training) -> tf.Tensor:
    """Scaled dot-product attention over the padded layout: qkv [B*L, 3H] (queries | keys | values,
    head h at columns h*D of each third), mask_bias float32 [B, 1, 1, L] → context [B*L, H]."""
    batch, seq_length = tf.shape(mask_bias)[0], tf.shape(mask_bias)[3]
    hidden = qkv.shape[-1] // 3
    head_size = hidden // num_heads
    if _use_kernels(qkv, training):
        keep = None
        if training and dropout.rate > 0:  # [B, heads, L, L]
            static = tf.TensorShape([None, num_heads, mask_bias.shape[3], mask_bias.shape[3]])
            keep = dropout.keep_mask(static, tf.stack([batch, num_heads, seq_length, seq_length]))
        context = cpu_kernels.attention(tf.reshape(qkv, [batch, seq_length, 3 * hidden]),
                                        tf.reshape(mask_bias, [batch, seq_length]), keep,
                                        num_heads, dropout.keep_scale)  # [B, L, H]
        return tf.reshape(context, [-1, hidden])
    # The batch size when it is static, and the length as -1: a LiteRT graph of one sentence then has
    # constant reshapes, and XNNPACK runs the whole block (it runs no reshape to a computed shape).
    # Else both as computed: -1 beside a batch of 0 rows (a replica's empty share) would stand for 1.
    static_batch = mask_bias.shape[0]
    heads_shape = [static_batch, -1, num_heads, head_size] if static_batch else [batch, seq_length, num_heads,
                                                                                  head_size]
    query, key, value = (tf.transpose(tf.reshape(part, heads_shape), [0, 2, 1, 3])
                         for part in tf.split(qkv, 3, axis=-1))  # each [B, heads, L, head_size]
    # Scaling the queries equals scaling the scores (the original) on B*L*H values, not B*heads*L*L.
    query *= tf.cast(1.0 / math.sqrt(head_size), query.dtype)
    scores = tf.matmul(query, key, transpose_b=True)  # [B, heads, L, L]
    # Softmax in float32 whatever the compute dtype: the mask bias and exp are unsafe in half precision.
    probs = tf.nn.softmax(tf.cast(scores, tf.float32) + mask_bias)
    probs = dropout(tf.cast(probs, qkv.dtype), training=training)
    context = tf.matmul(probs, value)  # [B, heads, L, head_size]
    context = tf.transpose(context, [0, 2, 1, 3])  # [B, L, heads, head_size]
    return tf.reshape(context, [-1, hidden])


def bias_activation(x: tf.Tensor, bias: tf.Tensor, hidden_act: str, training) -> tf.Tensor:
    """activation(x + bias) for a matmul's output x [N, F] and bias [F] (`BertConfig.hidden_act`)."""
    bias = tf.convert_to_tensor(bias)
    if hidden_act == "gelu" and _use_kernels(x, training):
        return cpu_kernels.bias_gelu(x, bias)
    activation = get_activation(hidden_act)
    x = tf.nn.bias_add(x, bias)
    return x if activation is None else activation(x)


def dropout_residual_layer_norm(y: tf.Tensor, bias: tf.Tensor, residual: tf.Tensor, norm: LayerNorm,
                                dropout: Dropout, training) -> tf.Tensor:
    """norm(dropout(y + bias) + residual): y (a matmul's output) and residual [N, H], bias [H]."""
    if _use_kernels(y, training):
        keep = dropout.keep_mask(y.shape, tf.shape(y)) if training and dropout.rate > 0 else None  # [N, H]
        return cpu_kernels.residual_layer_norm(
            y, tf.convert_to_tensor(bias), keep, residual,
            tf.convert_to_tensor(norm.gamma), tf.convert_to_tensor(norm.beta),
            keep_scale=dropout.keep_scale, epsilon=norm.epsilon)
    return norm(dropout(tf.nn.bias_add(y, bias), training=training) + residual)
