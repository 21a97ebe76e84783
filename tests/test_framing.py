"""electra_tf/framing.py against the layout written out in Python: `framed` (one text, cut to
max_seq_length - 2 tokens) and `framed_pair` with `pair_layout` against `featurize`'s rows (the
original's: `truncate_pair`, a second segment only where the second text has tokens before the
cut and after it), on ids and on offsets, with rows of no tokens and a batch of no rows."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.framing import framed, framed_ids, framed_pair, mask_and_segments, pair_layout
from finetune.inputs import truncate_pair

ROWS = [[5, 6, 7, 8, 9, 10, 11], [], [12], [13, 14, 15]]
SPECIAL = type("SpecialIds", (), {"cls_id": 1, "sep_id": 2, "pad_id": 0})  # what framed_ids reads of a tokenizer


def padded(rows, pad):
    width = max(len(row) for row in rows)
    return np.array([row + [pad] * (width - len(row)) for row in rows])


@pytest.mark.parametrize("dtype", [tf.int32, tf.int64])
@pytest.mark.parametrize("max_seq_length", [3, 5, 12])
def test_one_text_is_cls_tokens_sep_cut_and_padded(dtype, max_seq_length):
    tokens = tf.ragged.constant(ROWS, dtype)
    expected = [[1] + row[:max_seq_length - 2] + [2] for row in ROWS]
    got = framed(tokens, max_seq_length, 1, 2, -1)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.numpy(), padded(expected, -1))
    ids, mask = framed_ids(SPECIAL, tokens, max_seq_length)
    np.testing.assert_array_equal(ids.numpy(), padded(expected, 0))
    np.testing.assert_array_equal(mask.numpy(), padded([[1] * len(row) for row in expected], 0))
    empty = framed(tf.ragged.constant([[], []], dtype), max_seq_length, 1, 2, 0)  # no tokens in the batch
    np.testing.assert_array_equal(empty.numpy(), [[1, 2], [1, 2]])
    no_rows = tf.RaggedTensor.from_row_lengths(tf.zeros([0], dtype), tf.zeros([0], tf.int64))
    assert framed(no_rows, max_seq_length, 1, 2, 0).shape == (0, 0)
    assert [part.shape for part in framed_ids(SPECIAL, no_rows, max_seq_length)] == [(0, 0), (0, 0)]


def test_pairs_are_cut_as_the_featurizer_cuts_them():
    """Every pair of lengths 0..9 and 0..9 at max_seq_length 3..12, ids and offsets framed alike."""
    lengths = [(a, b) for a in range(10) for b in range(10)]
    a_rows = [list(range(100, 100 + a)) for a, _ in lengths]
    b_rows = [list(range(200, 200 + b)) for _, b in lengths]
    for max_seq_length in range(3, 13):
        layout = pair_layout(tf.constant([a for a, _ in lengths], tf.int64),
                             tf.constant([b for _, b in lengths], tf.int64), max_seq_length)
        expected, segments = [], []
        for a, b in zip(a_rows, b_rows):  # the original's `_featurize_example`
            a, b = truncate_pair(a, b, max_seq_length - (3 if b else 2))
            expected.append([1, *a, 2] + ([*b, 2] if b else []))
            segments.append([0] * (len(a) + 2) + [1] * (len(expected[-1]) - len(a) - 2))
        for dtype in (tf.int64, tf.int32):
            got = framed_pair(tf.ragged.constant(a_rows, dtype), tf.ragged.constant(b_rows, dtype), layout, 1, 2, -1)
            np.testing.assert_array_equal(got.numpy(), padded(expected, -1), err_msg=f"max_seq_length {max_seq_length}")
        mask, segment_ids = mask_and_segments(layout)
        np.testing.assert_array_equal(mask.numpy(), padded([[1] * len(row) for row in expected], 0))
        np.testing.assert_array_equal(segment_ids.numpy(), padded(segments, 0))
