"""Pre-training heads: the generator's masked-LM head and the discriminator's replaced-token head.

Both return float32 logits whatever the compute dtype, so losses and sampling are computed safely.
Activations follow `hidden_act` of the config they are given (gelu by default), as the original.
"""

from typing import Optional

import tensorflow as tf
import tf_keras

from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.embeddings import Embeddings
from electra_tf.modeling.layer_utils import build_in_scope, get_activation, layer_norm, truncated_normal


class MaskedLMHead(tf_keras.layers.Layer):
    """MLM logits over the vocabulary, tied to the input word-embedding table (scope `generator_predictions`).

    gather(positions) → dense(E, hidden_act) → LayerNorm → `h @ word_embeddings^T + output_bias`.
    Variables: `dense/{kernel [Hs,E], bias [E]}`, `LayerNorm/{gamma,beta} [E]`, `output_bias [V]`,
    where Hs is the width of the encoder output it reads and E the width of `embeddings`' table.
    """

    def __init__(self, config: BertConfig, embeddings: Embeddings, name: str = "generator_predictions", **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = config
        self.embeddings = embeddings
        self.dense = tf_keras.layers.Dense(embeddings.embedding_size, activation=get_activation(config.hidden_act),
                                           kernel_initializer=truncated_normal(config.initializer_range), name="dense")
        self.layer_norm = layer_norm()

    def build(self, input_shape):
        """input_shape: that of the encoder output, [B, L, Hs]."""
        build_in_scope(self.dense, [None, input_shape[-1]])
        build_in_scope(self.layer_norm, [None, self.embeddings.embedding_size])
        self.output_bias = self.add_weight("output_bias", shape=[self.config.vocab_size], initializer="zeros",
                                           experimental_autocast=False)
        super().build(input_shape)

    def call(self, sequence_output, positions: Optional[tf.Tensor] = None):
        """sequence_output [B, L, Hs]; positions int [B, N], or None for every position (N = L).

        Returns float32 logits [B, N, V]. Only the N gathered positions go through the head, which
        saves a [B, L, V] matmul when N << L.
        """
        if positions is not None:
            sequence_output = tf.gather(sequence_output, positions, batch_dims=1)  # [B, N, Hs]
        rows = tf.shape(sequence_output)[:2]
        h = tf.reshape(sequence_output, [-1, sequence_output.shape[-1]])  # [B*N, Hs]
        h = self.layer_norm(self.dense(h))  # [B*N, E]
        table = tf.cast(self.embeddings.word_embeddings, h.dtype)  # [V, E]
        logits = tf.cast(tf.matmul(h, table, transpose_b=True), tf.float32) + self.output_bias  # [B*N, V]
        return tf.reshape(logits, tf.concat([rows, [self.config.vocab_size]], axis=0))


class DiscriminatorHead(tf_keras.layers.Layer):
    """Replaced-token-detection logits, one per token (scope `discriminator_predictions`).

    dense(H, hidden_act, truncated normal) → dense_1(1, glorot uniform, zero bias) → squeeze.
    """

    def __init__(self, config: BertConfig, name: str = "discriminator_predictions", **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = config
        self.dense = tf_keras.layers.Dense(config.hidden_size, activation=get_activation(config.hidden_act),
                                           kernel_initializer=truncated_normal(config.initializer_range), name="dense")
        self.dense_1 = tf_keras.layers.Dense(1, name="dense_1")

    def build(self, input_shape=None):
        build_in_scope(self.dense, [None, self.config.hidden_size])
        build_in_scope(self.dense_1, [None, self.config.hidden_size])
        super().build(input_shape)

    def call(self, sequence_output):
        """sequence_output [B, L, H] (or the real tokens [N, H]) → float32 logits [B, L] (or [N])."""
        h = tf.reshape(sequence_output, [-1, self.config.hidden_size])  # [B*L, H]
        logits = self.dense_1(self.dense(h))  # [B*L, 1]
        return tf.reshape(tf.cast(logits, tf.float32), tf.shape(sequence_output)[:-1])
