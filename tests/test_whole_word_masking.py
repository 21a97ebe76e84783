"""Whole-word masking (`whole_word_masking`): on real Wikipedia rows every WordPiece word is masked
whole or not at all, rows fill their count by BERT's skip rule, and the pretraining model uses it."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.config import PretrainingConfig
from electra_tf.errors import InputError
from electra_tf.objectives import mask_tokens
from electra_tf.objectives.whole_word_masking import draw_whole_words
from electra_tf.pretraining import PretrainingModel
from electra_tf.tokenization import continuation_ids, load_vocab

CLS, SEP, MASK = 101, 102, 103
SPECIAL = dict(mask_id=MASK, cls_id=CLS, sep_id=SEP)
N = 19  # max_predictions_per_seq at length 128


@pytest.fixture(scope="module")
def pieces(vocab_file):
    """The BERT vocab's "##" ids."""
    return continuation_ids(load_vocab(vocab_file))


def words_of(ids, mask, is_continuation):
    """Per row, the words as lists of positions, by a plain loop: a candidate (real, not special,
    not position 0) starts a word unless it is a "##" piece right after another candidate."""
    rows = []
    for row_ids, row_mask, row_cont in zip(ids, mask, is_continuation):
        words, previous = [], False
        for position, (token, real, cont) in enumerate(zip(row_ids, row_mask, row_cont)):
            candidate = bool(real) and token not in (CLS, SEP, MASK) and position > 0
            if candidate and cont and previous:
                words[-1].append(position)
            elif candidate:
                words.append([position])
            previous = candidate
        rows.append(words)
    return rows


def selected_sets(masked):
    """Per row, the set of positions its used slots hold; and whether they were distinct."""
    pos, used = masked.masked_lm_positions.numpy(), masked.masked_lm_weights.numpy() == 1
    sets = [set(p[u].tolist()) for p, u in zip(pos, used)]
    return sets, all(len(s) == u.sum() for s, u in zip(sets, used))


def target_counts(mask, words):
    """num_to_predict: max(1, min(N, round(0.15 * real tokens))), capped by the candidates."""
    counts = np.clip(np.round(mask.sum(1).astype(np.float32) * np.float32(0.15)).astype(int), 1, N)
    return np.minimum(counts, [sum(len(w) for w in row) for row in words])


def check_whole_words(ids, mask, words, masked):
    """No word split, distinct positions in the first slots, the right targets, and each row's
    count its target unless every word it left out is longer than what is missing (BERT's rule:
    skip a word that does not fit). Returns (positions chosen per row, tokens taken, targets)."""
    sets, distinct = selected_sets(masked)
    assert distinct
    assert sum(0 < len(s.intersection(w)) < len(w) for s, row in zip(sets, words) for w in row) == 0
    weights = masked.masked_lm_weights.numpy()
    taken = weights.sum(1).astype(int)
    np.testing.assert_array_equal(weights, np.arange(N)[None, :] < taken[:, None])  # used slots first
    positions = masked.masked_lm_positions.numpy()
    np.testing.assert_array_equal(masked.masked_lm_ids.numpy(), np.take_along_axis(ids, positions, 1) * weights)
    targets = target_counts(mask, words)
    assert (taken <= targets).all()
    for row, (chosen, target) in enumerate(zip(sets, targets)):
        left_out = [len(w) for w in words[row] if not chosen.intersection(w)]
        assert all(length > target - taken[row] for length in left_out), row
    return sets, taken, targets


def test_every_word_is_masked_whole_on_real_rows(wikipedia_rows, pieces):
    """10,000 packed Wikipedia rows: no word is split (token-level masking splits thousands), rows
    fill their counts by the skip rule, long words are not avoided, and the slots still show
    [MASK] 85 % of the time."""
    ids, mask = wikipedia_rows
    is_continuation = np.isin(ids, pieces)
    words = words_of(ids, mask, is_continuation)
    whole = mask_tokens(ids, mask, max_predictions_per_seq=N, is_continuation=is_continuation, seed=[1, 2],
                        **SPECIAL)
    tokens = mask_tokens(ids, mask, max_predictions_per_seq=N, with_replacement=False, seed=[1, 2], **SPECIAL)
    token_sets, _ = selected_sets(tokens)
    assert sum(0 < len(s.intersection(w)) < len(w) for s, row in zip(token_sets, words) for w in row) > 1000
    sets, taken, targets = check_whole_words(ids, mask, words, whole)
    assert taken.sum() > 0.97 * targets.sum()
    chosen_pieces = np.mean([is_continuation[r, p] for r, s in enumerate(sets) for p in s])
    candidate_pieces = np.mean([is_continuation[r, p] for r, row in enumerate(words) for w in row for p in w])
    assert chosen_pieces > 0.9 * candidate_pieces  # long words are not avoided beyond the skip rule
    rows, slots = np.nonzero(whole.masked_lm_weights.numpy())
    shown = whole.masked_input_ids.numpy()[rows, whole.masked_lm_positions.numpy()[rows, slots]]
    assert abs(np.mean(shown == MASK) - 0.85) < 0.01


def test_a_word_that_does_not_fit_is_skipped_not_a_stop():
    """[CLS] a ##b ##c d e f [SEP] ##b [SEP] with 4 to predict, over 200 word orders: the "##"
    piece after [SEP] is a word of its own, so there are four single words and a three-piece one;
    a row takes the long word and a single, or the four singles. Always 4: stopping at the first
    word that does not fit would leave a row at 1 whenever a single comes before the long word."""
    ids = tf.constant([[CLS, 7, 8, 8, 9, 10, 11, SEP, 8, SEP]])
    candidates = tf.constant([[False, True, True, True, True, True, True, False, True, False]])
    is_continuation = tf.equal(ids, 8)
    outcomes = set()
    for seed in range(200):
        positions, used = draw_whole_words(candidates, is_continuation, tf.constant([4]), 6, tf.constant([seed, 0]))
        chosen = tuple(sorted(positions.numpy()[0][used.numpy()[0] == 1].tolist()))
        outcomes.add(chosen)
        assert (positions.numpy()[0][used.numpy()[0] == 0] == 0).all()
    assert {len(chosen) for chosen in outcomes} == {4}, outcomes
    assert (4, 5, 6, 8) in outcomes and any({1, 2, 3} <= set(chosen) for chosen in outcomes), outcomes
    for chosen in outcomes:
        assert {1, 2, 3} <= set(chosen) or not {1, 2, 3} & set(chosen), chosen


def test_xla_draws_whole_words_deterministically(wikipedia_rows, pieces):
    """Compiled with XLA (whose stateless random numbers are not the kernels' own), the same seed
    gives the same masks, and they keep every rule."""
    ids, mask = (a[:256] for a in wikipedia_rows)
    is_continuation = np.isin(ids, pieces)

    @tf.function(jit_compile=True)
    def draw(ids, mask, is_continuation):
        return mask_tokens(ids, mask, max_predictions_per_seq=N, is_continuation=is_continuation,
                           seed=tf.constant([3, 4]), **SPECIAL)

    first, again = draw(ids, mask, is_continuation), draw(ids, mask, is_continuation)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    check_whole_words(ids, mask, words_of(ids, mask, is_continuation), first)


def test_the_pretraining_model_masks_whole_words(wikipedia_rows, pieces, vocab_file):
    """`"whole_word_masking": true`: the model's generator predicts whole words; the same model
    without it splits them; without the vocab's "##" pieces it is one clear error."""
    ids, mask = (a[:32] for a in wikipedia_rows)
    words = words_of(ids, mask, np.isin(ids, pieces))
    features = {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
                "segment_ids": tf.zeros_like(tf.constant(ids))}
    split = {}
    for whole in (True, False):
        config = PretrainingConfig.from_hparams("m", "d", {"model_size": "tiny", "whole_word_masking": whole,
                                                           "mask_with_replacement": False})
        model = PretrainingModel(config, **SPECIAL, continuation_ids=pieces)
        output = model(features, seed=tf.constant([5, 6]))
        assert np.isfinite(output.loss.numpy())
        sets, _ = selected_sets(output.masked)
        split[whole] = sum(0 < len(s.intersection(w)) < len(w) for s, row in zip(sets, words) for w in row)
    assert split[True] == 0 < split[False]
    with pytest.raises(InputError, match="whole_word_masking: the vocab .* has no WordPiece continuations"):
        PretrainingModel(PretrainingConfig.from_hparams("m", "d", {"model_size": "tiny", "whole_word_masking": True}),
                         **SPECIAL)
