"""The pretraining model: one forward pass of the configured objective, from raw batch to loss.

Objectives (`PretrainingConfig.objective`, paper §3.1 and the §3.2 efficiency ablations):
- `electra`: mask → generator MLM → Gumbel sample → replaced token detection on every token;
  loss = gen_weight · MLM + disc_weight · RTD (1 and 50).
- `bert`: MLM only, with the MLM head on the discriminator-sized encoder (the original's
  `electra_objective: false`).
- `electra_15`: as electra, but the RTD loss covers only the positions that were masked.
- `replace_mlm`: the masked positions get generator samples instead of `[MASK]`, and the
  discriminator-sized model is trained with MLM on them (an MLM head on the discriminator).
- `all_tokens_mlm`: like replace_mlm but predicting every token, through the copy mechanism
  p = D·onehot(input) + (1 − D)·softmax, with D the sigmoid of the discriminator head's logit.
Two-stage training (paper §3.2) is a `stage` of the electra objective: "generator" trains the
generator alone with MLM; `init_discriminator_from_generator()` then copies its weights; stage
"discriminator" trains the discriminator with the generator frozen, including the embedding
block the two share (so the frozen generator keeps reading the embeddings it was trained with).
"""

from typing import NamedTuple, Optional, Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from electra_tf import objectives as obj
from electra_tf.objectives.random_seeds import split_seed
from electra_tf.config import PretrainingConfig, has_discriminator_mlm_head, has_rtd_loss
from electra_tf.errors import InputError
from electra_tf.modeling import ElectraModel, MaskedLMHead
from electra_tf.modeling.layer_utils import build_in_scope

STAGES = ("joint", "generator", "discriminator")


class PretrainingOutput(NamedTuple):
    """A step's loss and what the metrics need (fields are None where the objective has none)."""

    loss: tf.Tensor  # [] float32, the weighted total that is minimised
    masked: obj.MaskedLmInputs  # the generator's masked input and targets, [B, L] / [B, N]
    mlm: obj.MlmOutput  # generator (or, for bert, the model's) MLM loss and predictions
    sampled_ids: Optional[tf.Tensor]  # [B, N] generator samples
    fake: Optional[obj.FakeData]  # discriminator input and replaced-token labels, [B, L]
    rtd: Optional[obj.RtdOutput]  # replaced-token-detection loss, probabilities, predictions
    main_loss: Optional[tf.Tensor]  # [] the discriminator-sized model's weighted loss: disc_weight x RTD,
    # or its MLM loss for replace_mlm / all_tokens_mlm


def build_network(config: PretrainingConfig) -> ElectraModel:
    """The generator and discriminator that `config` describes, with their variables."""
    return ElectraModel(config.discriminator_config(), config.generator_config(),
                        untied_generator_embeddings=config.untied_generator_embeddings,
                        untied_generator=config.untied_generator,
                        layout="bert" if config.objective == "bert" else "electra")


class PretrainingModel(tf_keras.Model):
    """Generator + discriminator (`ElectraModel`) with the objective of a `PretrainingConfig`."""

    def __init__(self, config: PretrainingConfig, cls_id: int, sep_id: int, mask_id: int,
                 continuation_ids: Sequence[int] = (), **kwargs):
        """continuation_ids: the vocab's "##" pieces (`tokenization.continuation_ids`), which
        `whole_word_masking` needs."""
        super().__init__(name="pretraining_model", **kwargs)
        self.config = config
        self.special_ids = dict(cls_id=cls_id, sep_id=sep_id, mask_id=mask_id)
        self.continuation_table = None  # [V] bool: the token continues a word
        if config.whole_word_masking:
            if not continuation_ids:
                raise InputError(f"whole_word_masking: the vocab {config.vocab_file} has no WordPiece "
                                 "continuations (tokens starting with ##), so no word has two pieces")
            table = np.zeros([config.vocab_size], bool)
            table[list(continuation_ids)] = True
            self.continuation_table = tf.constant(table)
        disc_config = config.discriminator_config()
        self.network = build_network(config)
        self.discriminator_mlm_head = None
        if has_discriminator_mlm_head(config.objective):
            self.discriminator_mlm_head = MaskedLMHead(disc_config, self.network.embeddings,
                                                       name="discriminator_mlm_predictions")
            build_in_scope(self.discriminator_mlm_head, [None, None, disc_config.hidden_size])

    def call(self, features, training: bool = False, seed: Optional[tf.Tensor] = None,
             stage: str = "joint") -> PretrainingOutput:
        """features: {input_ids, input_mask, segment_ids} int [B, L]; seed: optional [2] ints."""
        config = self.config
        input_ids, input_mask, segment_ids = (features["input_ids"], features["input_mask"],
                                              features["segment_ids"])
        mask_seed, sample_seed = tf.unstack(split_seed(seed, 2))
        masked = obj.mask_tokens(
            input_ids, input_mask, max_predictions_per_seq=config.max_predictions_per_seq,
            mask_prob=config.mask_prob, mask_token_fraction=config.mask_token_fraction,
            random_token_fraction=config.random_token_fraction, vocab_size=config.vocab_size,
            with_replacement=config.mask_with_replacement, seed=mask_seed,
            is_continuation=None if self.continuation_table is None else tf.gather(
                self.continuation_table, tf.cast(input_ids, tf.int32)),  # [B, L]
            **self.special_ids)
        gen_logits = self._generator_logits(masked, input_mask, segment_ids, training)  # [B, N, V]
        mlm = obj.mlm_loss(gen_logits, masked.masked_lm_ids, masked.masked_lm_weights)
        if config.objective == "bert" or stage == "generator":
            return PretrainingOutput(config.gen_weight * mlm.loss, masked, mlm, None, None, None, None)

        sampled = obj.sample_tokens(
            gen_logits, temperature=config.temperature, seed=sample_seed,
            disallow_ids=masked.masked_lm_ids if config.disallow_correct else None)  # [B, N]
        fake = obj.fake_data(input_ids, masked.masked_lm_positions, sampled)
        sequence = self.network.discriminator(fake.fake_input_ids, input_mask, segment_ids,
                                              training=training)  # [B, L, H]
        rtd, disc_weight = None, 1.0  # the MLM-style ablations weigh their loss 1, as the paper
        if has_rtd_loss(config.objective):
            weights = fake.selected if config.objective == "electra_15" else None
            rtd = obj.rtd_loss(self.network.discriminator_head(sequence), fake.is_replaced,
                               input_mask, weights=weights)
            disc_loss, disc_weight = rtd.loss, config.disc_weight
        elif config.objective == "replace_mlm":
            logits = self.discriminator_mlm_head(sequence, masked.masked_lm_positions)  # [B, N, V]
            disc_loss = obj.mlm_loss(logits, masked.masked_lm_ids, masked.masked_lm_weights).loss
        else:  # all_tokens_mlm
            logits = self.discriminator_mlm_head(sequence, None)  # [B, L, V]
            copy_logits = self.network.discriminator_head(sequence)  # [B, L]
            disc_loss = obj.copy_mechanism_loss(logits, copy_logits, fake.fake_input_ids, input_ids,
                                                input_mask).loss
        gen_weight = 0.0 if stage == "discriminator" else config.gen_weight  # a frozen generator
        loss = obj.total_loss(mlm.loss, disc_loss, gen_weight=gen_weight, disc_weight=disc_weight)
        return PretrainingOutput(loss, masked, mlm, sampled, fake, rtd, disc_weight * disc_loss)

    def _generator_logits(self, masked, input_mask, segment_ids, training) -> tf.Tensor:
        """Generator MLM logits at the masked positions, [B, N, V] float32."""
        if self.config.uniform_generator:  # no network: every token equally likely
            shape = tf.concat([tf.shape(masked.masked_lm_positions), [self.config.vocab_size]], 0)
            return tf.zeros(shape, tf.float32)
        return self.network.generator_logits(masked.masked_input_ids, input_mask, segment_ids,
                                             positions=masked.masked_lm_positions, training=training)

    def trainable_variables_for(self, stage: str = "joint"):
        """The variables a stage trains: all but the generator's once it is frozen."""
        if stage != "discriminator":
            return self.trainable_variables
        frozen = {v.ref() for v in self.network.generator.trainable_variables}
        frozen |= {v.ref() for v in self.network.generator_head.trainable_variables}
        return [v for v in self.trainable_variables if v.ref() not in frozen]

    def init_discriminator_from_generator(self) -> None:
        """Two-stage training: the discriminator encoder starts from the trained generator."""
        source = {v.name.split("/", 1)[1]: v for v in self.network.generator.variables}
        for variable in self.network.discriminator.variables:
            variable.assign(source[variable.name.split("/", 1)[1]])
