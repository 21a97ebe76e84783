"""The layout of every served text, in the graph: `[CLS] a [SEP]`, or `[CLS] a [SEP] b [SEP]` for a
pair, cut as the fine-tuning featurizer cuts it, padded to the batch's longest row.

A row is built by dense gathers from its texts' tokens (ids, or character offsets), not by ragged
slicing and concatenation: the same rows, and far less graph to trace (a pair's ids: 0.08 s against
1.0 s, 2026-12-07), which an export does once per output (ids, start, end) of each signature.
"""

from typing import NamedTuple

import tensorflow as tf


class Layout(NamedTuple):
    """Where each row's parts go: the tokens kept of text a and of text b, int64 [B]; `b [SEP]`
    follows where some of b is kept."""

    kept_a: tf.Tensor
    kept_b: tf.Tensor


def single_layout(length, max_seq_length: int) -> Layout:
    """Token counts int64 [B] of one text -> its layout: the text cut to max_seq_length - 2."""
    kept = tf.minimum(tf.cast(length, tf.int64), max_seq_length - 2)
    return Layout(kept, tf.zeros_like(kept))


def pair_layout(length_a, length_b, max_seq_length: int) -> Layout:
    """Token counts int64 [B] of two texts -> their layout as the fine-tuning featurizer's
    `truncate_pair` cuts them: the longer text loses its last token until both fit, text_b on a tie.
    In closed form: the shorter text stays whole if that leaves the longer no shorter, else text_b
    keeps half the budget, rounded down. A row without text_b is `single_layout`'s; one whose text_b
    is cut to nothing (max_seq_length 4 and below) is `[CLS] a [SEP]` with a cut to the pair's budget."""
    length_a, length_b = tf.cast(length_a, tf.int64), tf.cast(length_b, tf.int64)
    budget = max_seq_length - 3  # [CLS] a [SEP] b [SEP]
    kept_b = tf.minimum(length_b, tf.maximum(budget - length_a, budget // 2))
    kept_a = tf.minimum(length_a, tf.where(length_b > 0, budget - kept_b, budget + 1))
    return Layout(kept_a, kept_b)


def framed(tokens: tf.RaggedTensor, max_seq_length: int, cls, sep, pad) -> tf.Tensor:
    """tokens [B, (T)] -> [B, L]: cls t1 .. tn sep, cut to max_seq_length, padded with `pad`."""
    return framed_pair(tokens, None, single_layout(tokens.row_lengths(), max_seq_length), cls, sep, pad)


def framed_ids(tokenizer, ids: tf.RaggedTensor, max_seq_length: int):
    """ids [B, (T)] -> (input_ids, input_mask) int32 [B, L]: `framed` with the tokenizer's
    [CLS], [SEP] and padding, and the mask of those positions that are not padding."""
    layout = single_layout(ids.row_lengths(), max_seq_length)
    return (framed_pair(ids, None, layout, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id),
            mask_and_segments(layout)[0])


def framed_pair(a, b, layout: Layout, cls, sep, pad) -> tf.Tensor:
    """a [B, (Ta)], b [B, (Tb)] -> `cls a[:kept_a] sep b[:kept_b] sep` (the second sep where kept_b > 0),
    padded with `pad`: [B, L], L the longest row. b None: one text (`single_layout`), nothing of b read."""
    kept_a, kept_b = layout.kept_a[:, tf.newaxis], layout.kept_b[:, tf.newaxis]  # [B, 1]
    length, position = _positions(layout)  # [B, 1], [1, L]
    in_a = (position >= 1) & (position <= kept_a)  # [B, L]
    in_b = (position >= kept_a + 2) & (position < kept_a + 2 + kept_b)
    as_token = lambda constant: tf.cast(constant, a.dtype)  # noqa: E731
    token = _gather(a, position - 1) if b is None else tf.where(in_a, _gather(a, position - 1),
                                                                 _gather(b, position - kept_a - 2))
    rows = tf.where(in_a | in_b, token, tf.where(position < length, as_token(sep), as_token(pad)))
    return tf.where(position == 0, as_token(cls), rows)


def mask_and_segments(layout: Layout):
    """The framed rows' input_mask and segment_ids (0 up to the first [SEP], 1 after it), int32 [B, L]."""
    length, position = _positions(layout)  # [B, 1], [1, L]
    second = position >= layout.kept_a[:, tf.newaxis] + 2
    return tf.cast(position < length, tf.int32), tf.cast(second & (position < length), tf.int32)


def _positions(layout: Layout):
    """(each row's length [B, 1]: cls a sep, and b sep where b is kept; the positions 0 .. L - 1 [1, L])."""
    length = (layout.kept_a + 2 + layout.kept_b + tf.minimum(layout.kept_b, 1))[:, tf.newaxis]
    longest = tf.maximum(tf.reduce_max(length), 0)  # 0 for an empty batch (reduce_max gives int64's least)
    return length, tf.range(longest)[tf.newaxis]


def _gather(tokens: tf.RaggedTensor, index) -> tf.Tensor:
    """tokens [B, (T)], index int64 [B or 1, L] -> tokens[row, index] [B, L]; any value where the index
    is outside the row (the caller masks it)."""
    dense = tf.pad(tokens.to_tensor(), [[0, 0], [0, 1]])  # [B, T + 1]: a column even when every row is empty
    index = tf.clip_by_value(index, 0, tf.shape(dense, out_type=tf.int64)[1] - 1)
    return tf.gather(dense, tf.broadcast_to(index, [tokens.nrows(), tf.shape(index, out_type=tf.int64)[1]]),
                     batch_dims=1)
