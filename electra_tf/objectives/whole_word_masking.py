"""Whole-word masking: the positions to predict are drawn a word at a time.

A word is a candidate token that does not continue a WordPiece word (its token does not start
with "##"), together with the "##" pieces that follow it. The original draws single tokens
(`pretrain/pretrain_helpers.py: mask()`), so a word's pieces are often masked apart and the
generator reads half a word; BERT's whole-word masking (`create_pretraining_data.py:
create_masked_lm_predictions`, `do_whole_word_mask`) masks all of a word's pieces or none. Its
rule is kept here, in the graph: visit the words in a random order and take each one whose
pieces still fit in the row's `num_to_predict`, skipping (not stopping at) a word that does not
fit. A row's count can therefore end below `num_to_predict`, by less than the length of every
word it did not take, and long words are taken a little less often than their share (on packed
Wikipedia rows of 128 tokens at 15 %: 8.8 % of the masked tokens are "##" pieces, 9.7 % of the
candidates; `tests/test_whole_word_masking.py`). Positions are distinct (there is no
with-replacement variant); which slots show [MASK], a random token or their own token is decided
per slot afterwards, as BERT does.

All shapes are static: [B, L] sequences, [B, N] slots.
"""

from typing import Tuple

import tensorflow as tf


def word_starts(candidates: tf.Tensor, is_continuation: tf.Tensor) -> tf.Tensor:
    """[B, L] bool: candidates that begin a word. A "##" piece begins one only when the token
    before it is not a candidate (a special token, or position 0), so words never span those."""
    before = tf.pad(candidates[:, :-1], [[0, 0], [1, 0]])  # [B, L]: the previous token's candidacy
    return candidates & ~(is_continuation & before)


def draw_whole_words(candidates: tf.Tensor, is_continuation: tf.Tensor, count: tf.Tensor,
                     num_slots: int, seed: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """Positions of whole words, at most `count` tokens a row.

    Args:
      candidates: [B, L] bool, tokens that may be masked.
      is_continuation: [B, L] bool, tokens that continue the word before them ("##" pieces).
      count: [B] int32, tokens to predict per row (`num_to_predict`, at most `num_slots`).
      num_slots: N, the prediction slots per row.
      seed: [2] int seed of the word order.

    Returns:
      positions [B, N] int32 (0 in unused slots) and used [B, N] int32 (1 for the slots taken),
      the taken slots first; a word's pieces sit in adjacent slots, in their order in the row.
    """
    batch, length = tf.shape(candidates)[0], tf.shape(candidates)[1]
    starts = word_starts(candidates, is_continuation)
    word = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1  # [B, L]: the word of each candidate
    word = tf.maximum(word, 0)  # non-candidates before the first word; they are never taken
    rows = tf.range(batch)[:, tf.newaxis] * length  # [B, 1]: each row's own segment ids
    word_length = tf.reshape(tf.math.unsorted_segment_sum(
        tf.cast(candidates, tf.int32), word + rows, batch * length), [batch, length])  # [B, L] by word
    token_word_length = tf.gather(word_length, word, batch_dims=1)  # [B, L]

    # A random order of words: every piece of a word gets its word's score, non-candidates -1; a
    # stable sort keeps a word's pieces together and in order.
    word_score = tf.random.stateless_uniform([batch, length], seed)  # [B, L] by word
    score = tf.where(candidates, tf.gather(word_score, word, batch_dims=1), -1.0)  # [B, L]
    order = tf.argsort(score, axis=1, direction="DESCENDING", stable=True)  # [B, L]
    in_order = [tf.gather(t, order, batch_dims=1) for t in (tf.cast(candidates, tf.int32), word,
                                                            token_word_length)]  # 3 x [B, L]
    first = tf.concat([tf.ones([batch, 1], tf.bool),
                       tf.not_equal(in_order[1][:, 1:], in_order[1][:, :-1])], axis=1)  # [B, L]

    def visit(state, token):
        """One token of the order for every row: a word's first piece decides for the whole word."""
        taken, taking, _ = state  # [B] int32 tokens taken so far; [B] bool: the current word is taken
        is_candidate, is_first, length_of_word = token
        taking = tf.where(is_first, taken + length_of_word <= count, taking)
        took = taking & (is_candidate > 0)  # the non-candidates, sorted last, are never taken
        return taken + tf.cast(took, tf.int32), taking, took

    elements = (tf.transpose(in_order[0]), tf.transpose(first), tf.transpose(in_order[2]))  # [L, B] each
    no = tf.zeros([batch], tf.bool)
    taken_after, _, took = tf.scan(visit, elements, initializer=(tf.zeros([batch], tf.int32), no, no))
    taken_in_order = tf.transpose(took)  # [B, L]: the sorted tokens taken
    # The taken tokens in their sorted order fill the first slots: rank them by earliness.
    rank = tf.where(taken_in_order, length - tf.range(length)[tf.newaxis, :], -1)  # [B, L]
    slots = tf.math.top_k(rank, k=num_slots, sorted=True).indices  # [B, N] into the order
    used = tf.sequence_mask(taken_after[-1], num_slots, dtype=tf.int32)  # [B, N]
    return tf.gather(order, slots, batch_dims=1) * used, used
