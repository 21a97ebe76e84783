"""The embedding block: word + position + token-type embeddings, LayerNorm, dropout.

One `Embeddings` object is the whole block of the original (three tables AND the LayerNorm,
variables `electra/embeddings/*`), so the generator and the discriminator share all of it by
holding the same object (docs/fidelity.md#tying). Model Garden ties only the word table, hence this layer.
"""

import tensorflow as tf
import tf_keras

from electra_tf.errors import InputError
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.dropout import Dropout
from electra_tf.modeling.layer_utils import build_in_scope, layer_norm, truncated_normal


class Embeddings(tf_keras.layers.Layer):
    """Token ids → `[B, L, E]` embeddings; E = `config.embedding_size`.

    Variables (relative to this layer): `word_embeddings [V,E]`, `token_type_embeddings [T,E]`,
    `position_embeddings [P,E]`, `LayerNorm/{gamma,beta} [E]`.

    Mixed precision: the tables stay float32 and are not auto-cast (gathering rows from a float32
    table is cheaper than casting the whole table), the sum and the LayerNorm run in float32, and
    only the normalised output is cast to the compute dtype.
    """

    def __init__(self, config: BertConfig, name: str = "embeddings", **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = config
        self.embedding_size = config.embedding_size
        self.layer_norm = layer_norm(dtype="float32")
        self.dropout = Dropout(config.hidden_dropout_prob)

    def build(self, input_shape=None):
        cfg, width = self.config, self.embedding_size

        def table(name, rows):
            return self.add_weight(name, shape=[rows, width], initializer=truncated_normal(cfg.initializer_range),
                                   experimental_autocast=False)

        self.word_embeddings = table("word_embeddings", cfg.vocab_size)
        self.token_type_embeddings = table("token_type_embeddings", cfg.type_vocab_size)
        self.position_embeddings = table("position_embeddings", cfg.max_position_embeddings)
        build_in_scope(self.layer_norm, [None, None, width])
        super().build(input_shape)

    def call(self, input_ids, segment_ids=None, training=False):
        """input_ids, segment_ids: int [B, L] (segment_ids None = all 0). Returns [B, L, E] (compute dtype)."""
        seq_length = input_ids.shape[1]
        if seq_length is not None and seq_length > self.config.max_position_embeddings:
            raise InputError(f"sequence length {seq_length} exceeds max_position_embeddings "
                             f"{self.config.max_position_embeddings}")
        if segment_ids is None:
            segment_ids = tf.zeros_like(input_ids)
        x = tf.gather(self.word_embeddings, input_ids)  # [B, L, E] float32
        # Token types by one-hot matmul, as the original: its gradient is a dense matmul instead of
        # a scatter-add onto 2 rows, which is slow on GPUs.
        one_hot = tf.one_hot(tf.reshape(segment_ids, [-1]), self.config.type_vocab_size)  # [B*L, T]
        x += tf.reshape(tf.matmul(one_hot, self.token_type_embeddings), tf.shape(x))
        x += self.position_embeddings[: tf.shape(input_ids)[1]]  # [L, E] broadcast over B
        x = tf.cast(self.layer_norm(x), self.compute_dtype)
        return self.dropout(x, training=training)
