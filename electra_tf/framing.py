"""The layout of every served text, in the graph: `[CLS] a [SEP]`, or `[CLS] a [SEP] b [SEP]` for a
pair, cut as the fine-tuning featurizer cuts it, padded to the batch's longest row.

A row is built by dense gathers from its texts' tokens (ids, or character offsets), not by ragged
slicing and concatenation: the same rows, traced in a tenth of the time, and an export traces the
layout once per output (ids, start, end) of each signature.
"""

import tensorflow as tf


def framed(tokens: tf.RaggedTensor, max_seq_length: int, cls, sep, pad) -> tf.Tensor:
    """tokens [B, (T)] -> [B, L]: cls t1 .. tn sep, cut to max_seq_length, padded with `pad`."""
    kept = tf.minimum(tokens.row_lengths(), max_seq_length - 2)  # [B]
    return framed_pair(tokens, tokens, kept, tf.zeros_like(kept), cls, sep, pad)  # (a second text of which none is kept)


def framed_ids(tokenizer, ids: tf.RaggedTensor, max_seq_length: int):
    """ids [B, (T)] -> (input_ids, input_mask) int32 [B, L]: `framed` with the tokenizer's
    [CLS], [SEP] and padding, and the mask of those positions that are not padding."""
    kept = tf.minimum(ids.row_lengths(), max_seq_length - 2)  # [B]
    return (framed(ids, max_seq_length, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id),
            pair_mask_and_segments(kept, tf.zeros_like(kept))[0])


def kept_lengths(length_a, length_b, max_seq_length: int):
    """Token counts int64 [B] -> how many of each text the fine-tuning featurizer's `truncate_pair`
    keeps, [B]. Its rule (the longer text loses its last token until both fit, text_b on a tie) in
    closed form: the shorter text stays whole if that leaves the longer no shorter, else text_b
    keeps half the budget, rounded down. Without text_b, text_a is cut to max_seq_length - 2."""
    budget = max_seq_length - 3  # [CLS] a [SEP] b [SEP]
    kept_b = tf.minimum(length_b, tf.maximum(budget - length_a, budget // 2))
    kept_a = tf.minimum(length_a, tf.where(length_b > 0, budget - kept_b, budget + 1))
    return kept_a, kept_b


def framed_pair(a, b, kept_a, kept_b, cls, sep, pad) -> tf.Tensor:
    """a [B, (Ta)], b [B, (Tb)] -> `cls a[:kept_a] sep b[:kept_b] sep`, padded with `pad`: [B, L], L the
    longest row; no second sep where kept_b is 0."""
    kept_a, kept_b = kept_a[:, tf.newaxis], kept_b[:, tf.newaxis]  # [B, 1]
    length = _row_length(kept_a, kept_b)  # [B, 1]
    position = tf.range(tf.reduce_max(length))[tf.newaxis]  # [1, L]
    in_a = (position >= 1) & (position <= kept_a)  # [B, L]
    in_b = (position >= kept_a + 2) & (position < kept_a + 2 + kept_b)
    value = lambda constant: tf.cast(constant, a.dtype)  # noqa: E731
    token = tf.where(in_a, _gather(a, position - 1), _gather(b, position - kept_a - 2))
    rows = tf.where(in_a | in_b, token, tf.where(position < length, value(sep), value(pad)))
    return tf.where(position == 0, value(cls), rows)


def pair_mask_and_segments(kept_a, kept_b):
    """`framed_pair`'s input_mask and segment_ids (0 up to the first sep, 1 after it), int32 [B, L]."""
    kept_a, kept_b = kept_a[:, tf.newaxis], kept_b[:, tf.newaxis]  # [B, 1]
    length = _row_length(kept_a, kept_b)
    position = tf.range(tf.reduce_max(length))[tf.newaxis]  # [1, L]
    return tf.cast(position < length, tf.int32), tf.cast((position >= kept_a + 2) & (position < length), tf.int32)


def _row_length(kept_a, kept_b):
    """The length of a framed row: cls a sep, and b sep where b kept a token."""
    return kept_a + 2 + kept_b + tf.minimum(kept_b, 1)


def _gather(tokens: tf.RaggedTensor, index) -> tf.Tensor:
    """tokens [B, (T)], index int64 [B or 1, L] -> tokens[row, index] [B, L]; any value where the index
    is outside the row (the caller masks it)."""
    dense = tf.pad(tokens.to_tensor(), [[0, 0], [0, 1]])  # [B, T + 1]: a column even when every row is empty
    index = tf.clip_by_value(index, 0, tf.shape(dense, out_type=tf.int64)[1] - 1)
    return tf.gather(dense, tf.broadcast_to(index, [tokens.nrows(), tf.shape(index, out_type=tf.int64)[1]]),
                     batch_dims=1)
