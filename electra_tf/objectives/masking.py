"""Dynamic in-graph masking: which positions the generator predicts, and what it sees there.

The original (`pretrain/pretrain_helpers.py: mask()`, docs/fidelity.md#masking) masks every batch
afresh inside the graph:

- Candidates are real tokens (`input_mask == 1`) other than [CLS], [SEP] and [MASK].
- Each row predicts `num_to_predict = max(1, min(N, round(sum(input_mask) * mask_prob)))`
  positions, N = max_predictions_per_seq. `sum(input_mask)` counts [CLS] and [SEP] too, and
  `round` is TF's round-half-to-even in float32.
- Each selected slot becomes [MASK] with probability 0.85 and otherwise keeps its original
  token: no random replacement (unlike BERT's 80/10/10).

Choices made here:

- Positions are drawn WITH replacement by default (`with_replacement=True`, as
  `PretrainingConfig.mask_with_replacement`): the original's `tf.random.categorical` draw, so a
  row may draw a position twice and the masked ids are written with the original's
  `scatter_update` rule. `with_replacement=False` is the opt-in fix: random scores + top-k over
  the candidates, so every row gets exactly `num_to_predict` distinct positions.
- `num_to_predict` is also capped by the number of candidates (a row without candidates, e.g.
  an all-padding row, predicts nothing); the original leaves that case undefined.
- Position 0 is never a candidate: it is the "unused slot" sentinel of `masked_lm_positions`
  (and `scatter_update` ignores it). Packed rows always start with [CLS], so this only matters
  for rows that do not, where the original would silently fail to mask position 0.
- `random_token_fraction` (BERT's 10 %) draws uniformly from the whole vocab [0, vocab_size),
  special tokens included, as BERT's `create_pretraining_data` does.
- Given `is_continuation`, whole words are drawn instead of tokens
  (`objectives/whole_word_masking.py`, `PretrainingConfig.whole_word_masking`).

All shapes are static: [B, L] sequences, [B, N] slots; no Python loop over the batch.
"""

from typing import NamedTuple, Optional

import tensorflow as tf
from official.nlp.modeling.models.electra_pretrainer import scatter_update

from electra_tf.errors import InputError
from electra_tf.objectives.random_seeds import split_seed
from electra_tf.objectives.whole_word_masking import draw_whole_words


class MaskedLmInputs(NamedTuple):
    """Generator inputs and targets from `mask_tokens`."""

    masked_input_ids: tf.Tensor  # [B, L] int32: input with the selected tokens replaced
    masked_lm_positions: tf.Tensor  # [B, N] int32: selected positions, 0 in unused slots
    masked_lm_ids: tf.Tensor  # [B, N] int32: original ids at those positions, 0 in unused slots
    masked_lm_weights: tf.Tensor  # [B, N] float32: 1 for used slots, 0 for unused


def num_to_predict(input_mask: tf.Tensor, candidates: tf.Tensor, mask_prob: float,
                   max_predictions_per_seq: int) -> tf.Tensor:
    """[B] int32: max(1, min(N, round(sum(input_mask) * mask_prob))), capped by the candidates."""
    num_tokens = tf.reduce_sum(tf.cast(input_mask, tf.float32), axis=-1)  # [B], incl. CLS/SEP
    count = tf.cast(tf.round(num_tokens * mask_prob), tf.int32)
    count = tf.maximum(1, tf.minimum(max_predictions_per_seq, count))
    return tf.minimum(count, tf.reduce_sum(tf.cast(candidates, tf.int32), axis=-1))


def candidate_mask(input_ids: tf.Tensor, input_mask: tf.Tensor,
                   special_ids: tuple[int, ...]) -> tf.Tensor:
    """[B, L] bool: real tokens that may be masked (not special, not padding, not position 0)."""
    candidates = tf.cast(input_mask, tf.bool)
    for special_id in special_ids:
        candidates &= tf.not_equal(input_ids, special_id)
    not_first = tf.range(tf.shape(input_ids)[1]) > 0  # [L]
    return candidates & not_first[tf.newaxis, :]


def _check_args(max_predictions_per_seq: int, seq_length: Optional[int], mask_prob: float,
                mask_token_fraction: float, random_token_fraction: float,
                vocab_size: Optional[int], with_replacement: bool) -> None:
    """Raise InputError naming the first invalid masking setting."""
    if not 0.0 < mask_prob <= 1.0:
        raise InputError(f"mask_prob must be in (0, 1], got {mask_prob}")
    if max_predictions_per_seq < 1:
        raise InputError(f"max_predictions_per_seq must be >= 1, got {max_predictions_per_seq}")
    if not with_replacement and seq_length is not None and max_predictions_per_seq > seq_length:
        raise InputError(f"max_predictions_per_seq ({max_predictions_per_seq}) must not exceed "
                         f"the sequence length ({seq_length}) when drawing without replacement")
    for name, value in (("mask_token_fraction", mask_token_fraction),
                        ("random_token_fraction", random_token_fraction)):
        if not 0.0 <= value <= 1.0:
            raise InputError(f"{name} must be in [0, 1], got {value}")
    if mask_token_fraction + random_token_fraction > 1.0 + 1e-9:
        raise InputError(f"mask_token_fraction + random_token_fraction must be <= 1, got "
                         f"{mask_token_fraction} + {random_token_fraction}")
    if random_token_fraction > 0 and not vocab_size:
        raise InputError("vocab_size is required when random_token_fraction > 0")


def _draw_positions(candidates: tf.Tensor, num_slots: int, with_replacement: bool,
                    seed: tf.Tensor) -> tf.Tensor:
    """[B, N] int32 candidate positions, uniform over each row's candidates.

    Without replacement: the N best of i.i.d. uniform scores (non-candidates score -1), i.e. the
    first N of a random permutation of the candidates. With replacement: N categorical draws.
    """
    if with_replacement:
        # A large negative logit instead of log(0) keeps candidate-free rows finite.
        logits = tf.where(candidates, 0.0, -1e9)  # [B, L]
        return tf.random.stateless_categorical(logits, num_slots, seed, dtype=tf.int32)
    scores = tf.random.stateless_uniform(tf.shape(candidates), seed)  # [B, L] in [0, 1)
    scores = tf.where(candidates, scores, -1.0)
    return tf.math.top_k(scores, k=num_slots, sorted=True).indices  # [B, N]


def mask_tokens(input_ids: tf.Tensor, input_mask: tf.Tensor, *, max_predictions_per_seq: int,
                mask_id: int, cls_id: int, sep_id: int, mask_prob: float = 0.15,
                mask_token_fraction: float = 0.85, random_token_fraction: float = 0.0,
                vocab_size: Optional[int] = None, with_replacement: bool = True,
                is_continuation: Optional[tf.Tensor] = None, seed: Optional[tf.Tensor] = None) -> MaskedLmInputs:
    """Select positions to predict and replace them: the generator's inputs and targets.

    Args:
      input_ids: [B, L] int token ids (unmasked).
      input_mask: [B, L] 1 for real tokens, 0 for padding.
      max_predictions_per_seq: N, the number of prediction slots per row.
      mask_id, cls_id, sep_id: ids of [MASK], [CLS] and [SEP] (never selected).
      mask_prob: share of a row's tokens (incl. [CLS]/[SEP]) to predict.
      mask_token_fraction: share of selected slots replaced by [MASK] (original: 0.85).
      random_token_fraction: share replaced by a uniformly random id in [0, vocab_size)
        (original: 0; BERT: 0.1). The rest keep their original token.
      vocab_size: required when random_token_fraction > 0.
      with_replacement: draw positions with replacement like the original (duplicates possible);
        False draws distinct positions.
      is_continuation: optional [B, L] bool, the tokens that continue a word ("##" pieces):
        draw whole words (distinct positions, `with_replacement` aside) instead of tokens.
      seed: optional [2] int seed for the stateless draws; the same seed gives the same masks.

    Returns:
      MaskedLmInputs with static shapes [B, L] / [B, N].
    """
    input_ids = tf.cast(input_ids, tf.int32)
    _check_args(max_predictions_per_seq, input_ids.shape[1], mask_prob, mask_token_fraction,
                random_token_fraction, vocab_size, with_replacement and is_continuation is None)
    position_seed, choice_seed, token_seed = tf.unstack(split_seed(seed, 3))

    candidates = candidate_mask(input_ids, input_mask, (cls_id, sep_id, mask_id))  # [B, L]
    count = num_to_predict(input_mask, candidates, mask_prob, max_predictions_per_seq)  # [B]
    if is_continuation is None:
        used = tf.sequence_mask(count, max_predictions_per_seq, dtype=tf.int32)  # [B, N]
        positions = _draw_positions(candidates, max_predictions_per_seq, with_replacement,
                                    position_seed) * used  # [B, N], unused slots -> 0
    else:
        positions, used = draw_whole_words(candidates, tf.cast(is_continuation, tf.bool), count,
                                           max_predictions_per_seq, position_seed)  # [B, N] each
    lm_ids = tf.gather(input_ids, positions, batch_dims=1) * used  # [B, N]

    # One uniform draw per slot decides [MASK] / random token / keep.
    choice = tf.random.stateless_uniform(tf.shape(positions), choice_seed)  # [B, N]
    to_mask = choice < mask_token_fraction
    to_random = (~to_mask) & (choice < mask_token_fraction + random_token_fraction)
    if random_token_fraction > 0:
        random_ids = tf.random.stateless_uniform(tf.shape(positions), token_seed, minval=0,
                                                 maxval=vocab_size, dtype=tf.int32)
    else:
        random_ids = tf.zeros_like(positions)
    updates = tf.where(to_mask, mask_id, random_ids)  # [B, N]
    # Slots that keep their token point at 0, which scatter_update ignores (as the original).
    replaced_positions = positions * tf.cast(to_mask | to_random, tf.int32)
    masked_input_ids, _ = scatter_update(input_ids, updates, replaced_positions)  # [B, L]

    return MaskedLmInputs(masked_input_ids=masked_input_ids, masked_lm_positions=positions,
                          masked_lm_ids=lm_ids, masked_lm_weights=tf.cast(used, tf.float32))


def slots_showing_mask(masked: MaskedLmInputs, mask_id: int) -> tf.Tensor:
    """[B, N] float32: 1 for the used slots whose position reads [MASK] in the generator's input
    (a kept slot too, when another slot masked the same position); 0 otherwise: kept and
    random-token slots, and unused ones."""
    shown = tf.gather(masked.masked_input_ids, masked.masked_lm_positions, batch_dims=1)  # [B, N]
    return tf.cast(tf.equal(shown, mask_id), tf.float32) * masked.masked_lm_weights
