"""The transformer encoder (the original's `BertModel`): embeddings → projection → post-LN BERT blocks.

Written here rather than configuring Model Garden's `TransformerEncoderBlock`, so that every variable
carries the original's name and shape 1:1 (Q/K/V kernels [H, H], not EinsumDense [H, heads, H/heads])
and Q/K/V still run as one fused [H, 3H] matmul.

Inside the blocks the hidden states are kept as a `[B*L, H]` matrix (as the original does), so each
dense layer is one plain matmul.

Variable names, relative to the encoder's scope (`electra` or `generator`):
    embeddings/...                                   (only the encoder that owns the embedding block)
    embeddings_project/{kernel [E,H], bias [H]}      (only when E != H; glorot init, no activation)
    encoder/layer_<i>/attention/self/{query,key,value}/{kernel [H,H], bias [H]}
    encoder/layer_<i>/attention/output/dense/{kernel [H,H], bias [H]}
    encoder/layer_<i>/attention/output/LayerNorm/{gamma,beta}
    encoder/layer_<i>/intermediate/dense/{kernel [H,F], bias [F]}
    encoder/layer_<i>/output/dense/{kernel [F,H], bias [H]}
    encoder/layer_<i>/output/LayerNorm/{gamma,beta}
A served encoder (`Encoder.freeze_qkv`) holds, per layer, frozen_qkv_{kernel [H,3H], bias [3H]} instead of
the query, key and value variables.
"""

from typing import List, Optional, Union

import tensorflow as tf
import tf_keras

from electra_tf import cpu_kernels
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.block_ops import attention_core, bias_activation, dropout_residual_layer_norm
from electra_tf.modeling.dropout import Dropout
from electra_tf.modeling.embeddings import Embeddings
from electra_tf.modeling.layer_utils import build_in_scope, layer_norm, matmul_transposed_kernel_grad, truncated_normal

# Added to the attention scores of padding positions, as the original (not -inf: softmax stays finite).
MASK_ADDER = -10000.0


def attention_bias(input_mask: tf.Tensor) -> tf.Tensor:
    """input_mask int/float [B, L] (1 = token, 0 = padding) → additive float32 bias [B, 1, 1, L]."""
    mask = tf.expand_dims(tf.expand_dims(tf.cast(input_mask, tf.float32), 1), 1)  # not a strided slice: TFLite
    return (1.0 - mask) * MASK_ADDER


class SelfAttention(tf_keras.layers.Layer):
    """Multi-head scaled dot-product self-attention (scope `attention/self`).

    Variables `{query,key,value}/{kernel [H,H], bias [H]}`, exactly the original's (three Dense
    layers); they are concatenated on the fly into one [H, 3H] projection (one matmul, not three),
    or once for a served graph (`freeze_qkv`). The core after the projection is
    `block_ops.attention_core` (a fused CPU kernel where it can be).
    """

    def __init__(self, config: BertConfig, name: str = "self", **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = config
        self.num_heads = config.num_attention_heads
        # Never called: they hold the variables, and `call` runs the three as one matmul.
        self.query, self.key, self.value = (
            tf_keras.layers.Dense(config.hidden_size, kernel_initializer=truncated_normal(config.initializer_range),
                                  name=name)
            for name in ("query", "key", "value"))
        self.dropout = Dropout(config.attention_probs_dropout_prob)
        self.frozen_qkv = None

    def build(self, input_shape=None):
        for projection in (self.query, self.key, self.value):
            build_in_scope(projection, [None, self.config.hidden_size])
        super().build(input_shape)

    def call(self, x, mask_bias, training=False, token_rows=None):
        """x: [B*L, H] (compute dtype); mask_bias: float32 [B, 1, 1, L] (`attention_bias`). Returns [B*L, H].

        With `token_rows` (int32 [N], `unpadded_rows`), x holds only the N real tokens [N, H], and so
        does the result: the projections skip the padding, which the scores need only as masked keys.
        """
        if self.frozen_qkv is not None and (training is True or tf.is_tensor(training)):
            raise ValueError(f"{self.name}: its Q/K/V kernels were frozen for serving; it cannot train")
        kernel, qkv_bias = self.qkv_weights()  # [H, 3H], [3H]
        qkv = tf.nn.bias_add(tf.matmul(x, kernel), qkv_bias)  # [B*L or N, 3H]
        if token_rows is not None:  # back to the padded layout, zeros on padding: [B*L, 3H]
            padded_rows = tf.shape(mask_bias)[0] * tf.shape(mask_bias)[3]
            qkv = tf.scatter_nd(token_rows[:, tf.newaxis], qkv, [padded_rows, tf.shape(qkv)[1]])
        context = attention_core(qkv, mask_bias, self.dropout, self.num_heads, training)  # [B*L, H]
        return context if token_rows is None else tf.gather(context, token_rows)  # [N, H]

    def qkv_weights(self):
        """The Q/K/V projection as one kernel [H, 3H] and bias [3H]: concatenated per call, or the copy
        `freeze_qkv` made."""
        if self.frozen_qkv is not None:  # plain variables: cast like the autocast ones (mixed precision)
            return (tf.cast(self.frozen_qkv.kernel, self.compute_dtype),
                    tf.cast(self.frozen_qkv.bias, self.compute_dtype))
        return (tf.concat([self.query.kernel, self.key.kernel, self.value.kernel], axis=1),
                tf.concat([self.query.bias, self.key.bias, self.value.bias], axis=0))

    def freeze_qkv(self):
        """Concatenates the Q/K/V kernels once, into variables, for a served graph (saves the concat on
        every call, about 8 % of a batch-1 request), and drops the three Dense layers, so that a
        SavedModel stores the projection once. Call it last, once the weights are loaded: the layer
        can then neither train (`call` refuses) nor take other Q/K/V weights."""
        if self.frozen_qkv is not None:  # frozen already
            return
        kernel, bias = self.qkv_weights()
        self.frozen_qkv = tf.Module(name="frozen_qkv")
        self.frozen_qkv.kernel = tf.Variable(kernel, trainable=False, name="frozen_qkv_kernel")
        self.frozen_qkv.bias = tf.Variable(bias, trainable=False, name="frozen_qkv_bias")
        del self.query, self.key, self.value  # no longer among the layer's variables

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        """What a checkpoint or SavedModel saves; after `freeze_qkv`, not the dropped Q/K/V layers,
        which attribute deletion leaves among the dependencies it records."""
        children = super()._trackable_children(save_type, **kwargs)
        if self.frozen_qkv is not None:
            for name in ("query", "key", "value"):
                children.pop(name, None)
        return children


class TransformerBlock(tf_keras.layers.Layer):
    """One post-LN BERT layer (scope `encoder/layer_<i>`).

    attention → attention/output/dense → dropout → LayerNorm(· + x)
    → intermediate/dense (hidden_act) → output/dense → dropout → LayerNorm(· + ·).
    The dense layers hold the variables; the block runs their matmuls itself (output/dense as
    `matmul_transposed_kernel_grad`, a faster kernel gradient) and hands what follows each to a
    `block_ops` function, which runs a fused CPU kernel where it can (same math, same dropout masks).
    """

    def __init__(self, config: BertConfig, name: str, **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = config
        init = config.initializer_range

        def dense(units):
            return tf_keras.layers.Dense(units, kernel_initializer=truncated_normal(init), name="dense")

        self.attention = SelfAttention(config)
        self.attention_dense = dense(config.hidden_size)
        self.attention_layer_norm = layer_norm()
        self.intermediate_dense = dense(config.intermediate_size)
        self.output_dense = dense(config.hidden_size)
        self.output_layer_norm = layer_norm()
        self.dropout = Dropout(config.hidden_dropout_prob)

    def build(self, input_shape=None):
        hidden = [None, self.config.hidden_size]
        build_in_scope(self.attention, hidden, "attention")
        build_in_scope(self.attention_dense, hidden, "attention", "output")
        build_in_scope(self.attention_layer_norm, hidden, "attention", "output")
        build_in_scope(self.intermediate_dense, hidden, "intermediate")
        build_in_scope(self.output_dense, [None, self.config.intermediate_size], "output")
        build_in_scope(self.output_layer_norm, hidden, "output")
        super().build(input_shape)

    def call(self, x, mask_bias, training=False, token_rows=None, output_rows=None):
        """x: [B*L, H]; mask_bias: float32 [B, 1, 1, L]. Returns [B*L, H].

        Options: `token_rows` (int32 [N], inference) when x holds only the real tokens [N, H]
        (`SelfAttention.call`); `output_rows` (int32 [M], rows of x) to compute only those rows'
        outputs [M, H] after the attention, which still reads every token.
        """
        context = self.attention(x, mask_bias, training=training, token_rows=token_rows)  # [rows of x, H]
        if output_rows is not None:
            context, x = tf.gather(context, output_rows), tf.gather(x, output_rows)  # [M, H] each
        attended = tf.matmul(context, self.attention_dense.kernel)
        x = dropout_residual_layer_norm(attended, self.attention_dense.bias, x, self.attention_layer_norm,
                                        self.dropout, training)
        intermediate = bias_activation(tf.matmul(x, self.intermediate_dense.kernel), self.intermediate_dense.bias,
                                       self.config.hidden_act, training)  # [rows, F]
        out = matmul_transposed_kernel_grad(intermediate, tf.convert_to_tensor(self.output_dense.kernel))  # [rows, H]
        return dropout_residual_layer_norm(out, self.output_dense.bias, x, self.output_layer_norm, self.dropout,
                                           training)


class Encoder(tf_keras.layers.Layer):
    """A whole encoder network: `electra` (discriminator / fine-tuning) or `generator`.

    Pass `embeddings` to share another encoder's embedding block (generator and discriminator);
    otherwise the encoder owns an `Embeddings` of width `config.embedding_size`. An
    `embeddings_project` dense (E → H) is added when the embedding width differs from H.
    There is no pooler: the `[CLS]` vector is `sequence_output[:, 0]`.
    """

    def __init__(self, config: BertConfig, embeddings: Optional[Embeddings] = None, name: str = "electra",
                 **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = config
        self.owns_embeddings = embeddings is None
        self.embeddings = Embeddings(config) if embeddings is None else embeddings
        self.embeddings_project = None
        if self.embeddings.embedding_size != config.hidden_size:
            self.embeddings_project = tf_keras.layers.Dense(config.hidden_size, name="embeddings_project")
        self.blocks = [TransformerBlock(config, name=f"layer_{i}") for i in range(config.num_hidden_layers)]
        cpu_kernels.prepare(self.compute_dtype)  # the one-time kernel build, outside any traced function

    def build(self, input_shape=None):
        if self.owns_embeddings:
            build_in_scope(self.embeddings, None)
        elif not self.embeddings.built:
            raise ValueError(f"encoder {self.name!r}: build the encoder that owns the shared embeddings first, "
                             "so that their variables are named after it")
        if self.embeddings_project is not None:
            build_in_scope(self.embeddings_project, [None, self.embeddings.embedding_size])
        for block in self.blocks:
            build_in_scope(block, [None, self.config.hidden_size], "encoder")
        super().build(input_shape)

    def get_embedding_table(self) -> tf.Variable:
        """The word-embedding table [V, E] (shared with the MLM output layer)."""
        return self.embeddings.word_embeddings

    def call(self, input_ids, input_mask=None, segment_ids=None, training=False,
             return_all_layers=False, cls_only=False) -> Union[tf.Tensor, List[tf.Tensor]]:
        """input_ids, input_mask, segment_ids: int [B, L] (mask None = all tokens, segments None = all 0).

        Returns sequence_output [B, L, H] (compute dtype), or with `return_all_layers` the list of
        every block's output [B, L, H] (the last one is sequence_output), or with `cls_only` the first
        token's output [B, H], the only row the last block then computes (for heads that read `[CLS]`
        alone: the same values and gradients, about 1/12 less work for a 12-layer encoder).
        """
        if cls_only and return_all_layers:
            raise ValueError("cls_only and return_all_layers exclude each other")
        if input_mask is None:
            input_mask = tf.ones_like(input_ids)
        embedded = self.embeddings(input_ids, segment_ids, training=training)  # [B, L, E]
        out_shape = tf.concat([tf.shape(input_ids), [self.config.hidden_size]], axis=0)
        x = tf.reshape(embedded, [-1, self.embeddings.embedding_size])  # [B*L, E]
        if self.embeddings_project is not None:
            x = self.embeddings_project(x)  # [B*L, H]
        mask_bias = attention_bias(input_mask)  # [B, 1, 1, L]
        first_rows = tf.range(tf.shape(input_ids)[0]) * tf.shape(input_ids)[1] if cls_only else None  # [B]
        layer_outputs = []
        for i, block in enumerate(self.blocks):
            last = i == len(self.blocks) - 1
            x = block(x, mask_bias, training=training, output_rows=first_rows if last else None)
            if return_all_layers:
                layer_outputs.append(tf.reshape(x, out_shape))
        if cls_only:
            return x  # [B, H]
        return layer_outputs if return_all_layers else tf.reshape(x, out_shape)

    def call_unpadded(self, input_ids, input_mask, segment_ids=None, cls_only: bool = False) -> tf.Tensor:
        """Inference (no dropout) on the real tokens only: what the served SavedModels run.

        The dense layers, nearly all of the work, see the N = sum(input_mask) real tokens instead of
        B*L rows; only the attention scores use the padded layout. A batch of 32 SST-2 dev sentences
        is about half padding. input_ids, input_mask, segment_ids: int [B, L]; each mask row is 1s then
        0s, with at least one 1 (as the tokenizers make them). Returns the real tokens' outputs [N, H] in (example, position) order
        (`unpadded_rows` says where each sat), or with `cls_only` each example's first token [B, H],
        the only rows the last block then computes.
        """
        token_rows = unpadded_rows(input_mask)  # [N]
        embedded = self.embeddings(input_ids, segment_ids, training=False)  # [B, L, E]
        x = tf.gather(tf.reshape(embedded, [-1, self.embeddings.embedding_size]), token_rows)  # [N, E]
        if self.embeddings_project is not None:
            x = self.embeddings_project(x)  # [N, H]
        mask_bias = attention_bias(input_mask)  # [B, 1, 1, L]
        first_rows = None
        if cls_only:  # each example's first token, as a row of x: the running count of tokens before it
            first_rows = tf.cumsum(tf.reduce_sum(tf.cast(input_mask, tf.int32), axis=1), exclusive=True)  # [B]
        for i, block in enumerate(self.blocks):
            last = i == len(self.blocks) - 1
            x = block(x, mask_bias, training=False, token_rows=token_rows, output_rows=first_rows if last else None)
        return x

    def infer(self, input_ids, input_mask, segment_ids=None, cls_only: bool = False) -> tf.Tensor:
        """`call`'s inference output, computed on the real tokens only (`call_unpadded`): the sequence
        output [B, L, H] with zeros at padding, or with `cls_only` the first token's [B, H]."""
        if cls_only:
            return self.call_unpadded(input_ids, input_mask, segment_ids, cls_only=True)  # [B, H]
        tokens = self.call_unpadded(input_ids, input_mask, segment_ids)  # [N, H]
        shape = tf.shape(input_ids)
        rows = unpadded_rows(input_mask)[:, tf.newaxis]  # [N, 1]
        sequence = tf.scatter_nd(rows, tokens, [shape[0] * shape[1], self.config.hidden_size])  # [B*L, H]
        return tf.reshape(sequence, [shape[0], shape[1], self.config.hidden_size])

    def freeze_qkv(self):
        """Each block's Q/K/V kernels concatenated once (`SelfAttention.freeze_qkv`), for serving."""
        for block in self.blocks:
            block.attention.freeze_qkv()


def unpadded_rows(input_mask: tf.Tensor) -> tf.Tensor:
    """input_mask int [B, L] → int32 [N]: where the real tokens sit in the flattened [B*L] layout."""
    return tf.cast(tf.where(tf.reshape(input_mask, [-1]) > 0)[:, 0], tf.int32)


def build_encoder(config: BertConfig, embeddings: Optional[Embeddings] = None, name: str = "electra") -> Encoder:
    """An `Encoder` with all variables created now, named `<name>/...`.

    E.g. a fine-tuning model builds just the discriminator: `build_encoder(config)` → `electra/*`,
    and adds its `task_specific/<task>/...` heads beside it.
    """
    encoder = Encoder(config, embeddings=embeddings, name=name)
    build_in_scope(encoder, None)
    return encoder
