"""The pre-training network: generator + discriminator with the original's weight tying (docs/fidelity.md#tying).

This module only builds the networks and computes logits. Masking, sampling and losses belong to
the objectives, which call `generator_logits` and `discriminator_logits`.
"""

import dataclasses
from typing import Optional

import tensorflow as tf
import tf_keras

from electra_tf.errors import InputError
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.heads import DiscriminatorHead, MaskedLMHead
from electra_tf.modeling.layer_utils import build_in_scope
from electra_tf.modeling.transformer import build_encoder

# What `ElectraModel` builds: "electra", a generator and a discriminator (with the replaced-token
# head); "bert", one encoder with the MLM head and no discriminator.
NETWORK_LAYOUTS = ("electra", "bert")


class ElectraModel(tf_keras.Model):
    """Generator and discriminator, all variables created at construction with the original's names.

    - `layout="electra"`, `untied_generator=True` (the normal case): the discriminator encoder
      `electra/*` owns the embedding block; the generator encoder `generator/*` (sized by
      `gen_config`) shares the whole block (word, position and token-type tables and the LayerNorm)
      and has its own `generator/embeddings_project` when E != Hg.
      `untied_generator_embeddings=True` gives the generator its own `generator/embeddings` of
      width Hg (then no projection).
    - `untied_generator=False`: the generator IS the discriminator encoder (same object).
    - `layout="bert"`: MLM only; the `generator_predictions` head sits on the `electra` encoder
      and there is no discriminator head.

    Heads: `generator_predictions` (MLM, tied to the generator's word table) and
    `discriminator_predictions`. Attributes: `discriminator`, `generator` (Encoders),
    `generator_head`, `discriminator_head` (None for BERT), `embeddings` (the discriminator's).
    """

    def __init__(self, disc_config: BertConfig, gen_config: Optional[BertConfig] = None,
                 untied_generator_embeddings: bool = False, untied_generator: bool = True,
                 layout: str = "electra", name: str = "electra_model", **kwargs):
        super().__init__(name=name, **kwargs)
        if layout not in NETWORK_LAYOUTS:
            raise InputError(f"layout {layout!r}: expected one of {list(NETWORK_LAYOUTS)}")
        separate_generator = layout == "electra" and untied_generator
        if separate_generator:
            gen_config = _checked_generator_config(disc_config, gen_config, untied_generator_embeddings)
        self.layout = layout
        self.disc_config = disc_config

        # Discriminator first: it owns the shared embeddings, which must be named `electra/embeddings/*`.
        self.discriminator = build_encoder(disc_config, name="electra")
        self.embeddings = self.discriminator.embeddings
        if separate_generator:
            shared = None if untied_generator_embeddings else self.embeddings
            self.generator = build_encoder(gen_config, embeddings=shared, name="generator")
        else:
            self.generator = self.discriminator
        # Heads use the discriminator config's hidden_act, as the original (`self._bert_config`).
        self.generator_head = MaskedLMHead(disc_config, self.generator.embeddings)
        build_in_scope(self.generator_head, [None, None, self.generator.config.hidden_size])
        self.discriminator_head = None
        if layout == "electra":
            self.discriminator_head = DiscriminatorHead(disc_config)
            build_in_scope(self.discriminator_head, None)
        self.built = True

    def generator_logits(self, input_ids, input_mask, segment_ids, positions=None, training=False) -> tf.Tensor:
        """MLM logits of the generator on (masked) input ids [B, L].

        positions: int [B, N] (`masked_lm_positions`) → float32 [B, N, V]; None → [B, L, V].
        """
        sequence_output = self.generator(input_ids, input_mask, segment_ids, training=training)
        return self.generator_head(sequence_output, positions)

    def discriminator_logits(self, input_ids, input_mask, segment_ids, training=False) -> tf.Tensor:
        """Replaced-token logits of the discriminator on input ids [B, L] → float32 [B, L]."""
        if self.discriminator_head is None:
            raise ValueError("the BERT layout has no discriminator head")
        sequence_output = self.discriminator(input_ids, input_mask, segment_ids, training=training)
        return self.discriminator_head(sequence_output)


def _checked_generator_config(disc_config: BertConfig, gen_config: Optional[BertConfig],
                              untied_embeddings: bool) -> BertConfig:
    """The generator's config with its embedding width fixed: Hg if untied, else the shared E."""
    if gen_config is None:
        raise InputError("gen_config is required for the ELECTRA layout with an untied generator "
                         "(see bert_config.generator_config)")
    if gen_config.vocab_size != disc_config.vocab_size:
        raise InputError(f"generator vocab_size {gen_config.vocab_size} != discriminator vocab_size "
                         f"{disc_config.vocab_size}")
    if untied_embeddings:
        return dataclasses.replace(gen_config, embedding_size=gen_config.hidden_size)
    if gen_config.embedding_size != disc_config.embedding_size:
        raise InputError(f"generator embedding_size {gen_config.embedding_size} != discriminator embedding_size "
                         f"{disc_config.embedding_size}: shared embeddings need one width")
    return gen_config
