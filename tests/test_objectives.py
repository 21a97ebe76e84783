"""ELECTRA objectives: masking statistics on real Wikipedia rows, sampling, labels, losses
(the eval metrics: test_pretraining_metrics.py)."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.config import PretrainingConfig
from electra_tf.errors import InputError
from electra_tf.objectives import (copy_mechanism_loss, fake_data, mask_tokens, mlm_loss, rtd_loss,
                                   sample_tokens, total_loss)
from electra_tf.pretraining import PretrainingModel

PAD, CLS, SEP, MASK = 0, 101, 102, 103
N = 19  # int((0.15 + 0.005) * 128), the original's max_predictions_per_seq, for wikipedia_rows
SPECIAL = dict(mask_id=MASK, cls_id=CLS, sep_id=SEP)


def candidate_counts(ids, mask):
    """[B] real tokens per row other than [CLS], [SEP] and [MASK]."""
    return ((mask == 1) & ~np.isin(ids, [CLS, SEP, MASK])).sum(1)


def expected_counts(ids, mask, mask_prob=0.15):
    """The original's num_to_predict in float32 with round-half-to-even, capped by candidates."""
    num_tokens = mask.sum(1).astype(np.float32)
    count = np.clip(np.round(num_tokens * np.float32(mask_prob)).astype(np.int32), 1, N)
    return np.minimum(count, candidate_counts(ids, mask))


def drawn_positions(masked):
    """Per row: (distinct positions its used slots drew, how often each was drawn)."""
    pos, used = masked.masked_lm_positions.numpy(), masked.masked_lm_weights.numpy() == 1
    return [np.unique(p[u], return_counts=True) for p, u in zip(pos, used)]


def duplicate_draws(ids, mask, masked):
    """(repeated draws in `masked`, their expectation for uniform draws with replacement)."""
    counts, candidates = expected_counts(ids, mask), candidate_counts(ids, mask)
    expected_distinct = candidates * (1 - (1 - 1 / candidates) ** counts)
    distinct = sum(len(positions) for positions, _ in drawn_positions(masked))
    return counts.sum() - distinct, counts.sum() - expected_distinct.sum()


def selected_values(ids, masked):
    """Per used slot: (original id, id in the masked input) as flat arrays."""
    rows, slots = np.nonzero(masked.masked_lm_weights.numpy())
    pos = masked.masked_lm_positions.numpy()[rows, slots]
    return ids[rows, pos], masked.masked_input_ids.numpy()[rows, pos]


def check_positions(ids, mask, masked, distinct):
    """Counts, candidate-only positions, targets, and changes only at selected positions."""
    weights = masked.masked_lm_weights.numpy()
    pos, lm_ids = masked.masked_lm_positions.numpy(), masked.masked_lm_ids.numpy()
    counts = expected_counts(ids, mask)
    np.testing.assert_array_equal(weights.sum(1), counts)
    np.testing.assert_array_equal(weights, np.arange(N)[None, :] < counts[:, None])
    assert (pos[weights == 0] == 0).all() and (lm_ids[weights == 0] == 0).all()
    picked = np.take_along_axis(ids, pos, 1)
    np.testing.assert_array_equal(lm_ids, picked * weights)
    used = weights == 1
    assert (pos[used] > 0).all() and (mask[np.arange(len(ids))[:, None], pos][used] == 1).all()
    assert not np.isin(picked[used], [CLS, SEP, MASK, PAD]).any()
    selected = np.zeros_like(ids, bool)
    np.put_along_axis(selected, pos, used, 1)
    assert (masked.masked_input_ids.numpy()[~selected] == ids[~selected]).all()
    if distinct:
        assert all(len(set(p[u])) == u.sum() for p, u in zip(pos, used))
    return counts


def test_masking_statistics_on_wikipedia_rows(wikipedia_rows):
    ids, mask = wikipedia_rows
    assert len({int(m.sum()) for m in mask}) > 50  # padding variety
    masked = mask_tokens(ids, mask, max_predictions_per_seq=N, with_replacement=False, seed=[1, 2], **SPECIAL)
    counts = check_positions(ids, mask, masked, distinct=True)
    assert counts.sum() > 150_000
    original, now = selected_values(ids, masked)
    assert abs(np.mean(now == MASK) - 0.85) < 0.01
    assert abs(np.mean(now == original) - 0.15) < 0.01
    assert np.mean((now != MASK) & (now != original)) == 0.0


def test_bert_style_80_10_10(wikipedia_rows):
    ids, mask = wikipedia_rows
    masked = mask_tokens(ids, mask, max_predictions_per_seq=N, mask_token_fraction=0.8,
                         random_token_fraction=0.1, vocab_size=30522, with_replacement=False,
                         seed=[3, 4], **SPECIAL)
    check_positions(ids, mask, masked, distinct=True)
    original, now = selected_values(ids, masked)
    random = (now != MASK) & (now != original)
    assert abs(np.mean(now == MASK) - 0.8) < 0.01
    assert abs(np.mean(now == original) - 0.1) < 0.01
    assert abs(np.mean(random) - 0.1) < 0.01
    assert now[random].min() >= 0 and now[random].max() < 30522
    assert len(np.unique(now[random])) > 0.5 * random.sum()  # spread over the vocab


def test_with_replacement_duplicates_and_scatter_rule(wikipedia_rows):
    ids, mask = wikipedia_rows
    masked = mask_tokens(ids, mask, max_predictions_per_seq=N, with_replacement=True,
                         seed=[5, 6], **SPECIAL)
    check_positions(ids, mask, masked, distinct=False)
    drawn = drawn_positions(masked)
    rows = np.concatenate([np.full(len(d[0]), r) for r, d in enumerate(drawn)])
    distinct = np.concatenate([d[0] for d in drawn])
    multiplicity = np.concatenate([d[1] for d in drawn])
    duplicates, expected = duplicate_draws(ids, mask, masked)
    assert duplicates > 5_000
    assert abs(duplicates / expected - 1) < 0.05
    # A position becomes [MASK] unless every slot that drew it kept it (0.15 ** multiplicity).
    values = masked.masked_input_ids.numpy()[rows, distinct]
    assert (values == MASK).sum() == pytest.approx((1 - 0.15 ** multiplicity).sum(), rel=0.01)
    assert ((values == MASK) | (values == ids[rows, distinct])).all()


def test_default_config_masks_with_replacement(wikipedia_rows):
    """A default PretrainingConfig draws as the original (repeats happen); false never repeats."""
    ids, mask = wikipedia_rows
    short = mask.sum(1) < 40  # rows with few candidates, where a repeated draw is likely
    ids, mask = ids[short, :40], mask[short, :40]  # [R, 40]: their padding cut off
    ids = np.where(ids > MASK, MASK + 1 + ids % 400, ids)  # a 504-token vocab keeps the MLM logits small
    features = dict(input_ids=tf.constant(ids), input_mask=tf.constant(mask), segment_ids=tf.zeros_like(ids))
    for hparams in ({}, {"mask_with_replacement": False}):
        values = {"model_size": "tiny", "vocab_size": 504, **hparams}
        config = PretrainingConfig.from_hparams("test", "/unused", values)
        assert config.max_predictions_per_seq == N
        model = PretrainingModel(config, **SPECIAL)
        masked = model(features, seed=tf.constant([3, 1]), stage="generator").masked  # the config's draw
        check_positions(ids, mask, masked, distinct=bool(hparams))
        duplicates, expected = duplicate_draws(ids, mask, masked)
        if hparams:
            assert duplicates == 0
        else:
            assert len(ids) > 400 and expected > 30
            assert abs(duplicates / expected - 1) < 0.4, (duplicates, expected)


def test_scatter_rule_and_label_rule():
    ids = tf.constant([[CLS, 5, 6, 7, SEP, PAD]])
    # Position 2 is hit twice (10, 13 -> floor(23 / 2) = 11); 3 gets its own token back (real);
    # the slot at 0 is the unused-slot sentinel and is ignored.
    fake = fake_data(ids, tf.constant([[2, 2, 3, 0]]), tf.constant([[10, 13, 7, 99]]))
    np.testing.assert_array_equal(fake.fake_input_ids, [[CLS, 5, 11, 7, SEP, PAD]])
    np.testing.assert_array_equal(fake.selected, [[0, 0, 1, 1, 0, 0]])
    np.testing.assert_array_equal(fake.is_replaced, [[0, 0, 1, 0, 0, 0]])


def test_masking_determinism_edge_rows_and_xla():
    ids = np.array([[CLS, 7, 8, 9, SEP, 10, 11, SEP, 0, 0], [CLS, SEP] + [0] * 8, [0] * 10,
                    [CLS] + list(range(20, 28)) + [SEP]], np.int32)
    mask = (ids != 0).astype(np.int32)
    kwargs = dict(max_predictions_per_seq=3, **SPECIAL)
    first = mask_tokens(ids, mask, seed=[7, 8], **kwargs)
    again = mask_tokens(ids, mask, seed=tf.constant([7, 8]), **kwargs)
    other = mask_tokens(ids, mask, seed=[7, 9], **kwargs)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert any((a.numpy() != b.numpy()).any() for a, b in zip(first, other))
    np.testing.assert_array_equal(first.masked_lm_weights.numpy().sum(1), [1, 0, 0, 2])
    unseeded = [mask_tokens(np.tile(ids[3:], [64, 1]), np.tile(mask[3:], [64, 1]), **kwargs)
                for _ in range(2)]
    assert (unseeded[0].masked_lm_positions.numpy() != unseeded[1].masked_lm_positions.numpy()).any()

    @tf.function(jit_compile=True)
    def step(input_ids, input_mask, seed):
        masked = mask_tokens(input_ids, input_mask, seed=seed, **kwargs)
        logits = tf.random.stateless_normal([4, 3, 30], seed)
        fake = fake_data(input_ids, masked.masked_lm_positions, sample_tokens(logits, seed=seed))
        return masked, fake

    (xla, fake), (xla_again, _) = step(ids, mask, [7, 8]), step(ids, mask, [7, 8])
    assert xla.masked_input_ids.shape == (4, 10) and xla.masked_lm_positions.shape == (4, 3)
    np.testing.assert_array_equal(xla.masked_lm_positions, xla_again.masked_lm_positions)
    np.testing.assert_array_equal(xla.masked_lm_weights.numpy().sum(1), [1, 0, 0, 2])
    assert fake.selected.numpy().sum() == sum(len(p) for p, _ in drawn_positions(xla))  # distinct of 3 draws


def test_masking_rejects_bad_settings():
    ids, mask = tf.ones([2, 8], tf.int32), tf.ones([2, 8], tf.int32)
    with pytest.raises(InputError, match="max_predictions_per_seq"):
        mask_tokens(ids, mask, max_predictions_per_seq=9, with_replacement=False, **SPECIAL)
    with pytest.raises(InputError, match="vocab_size"):
        mask_tokens(ids, mask, max_predictions_per_seq=2, random_token_fraction=0.1, **SPECIAL)
    with pytest.raises(InputError, match="<= 1"):
        mask_tokens(ids, mask, max_predictions_per_seq=2, mask_token_fraction=0.9,
                    random_token_fraction=0.2, vocab_size=10, **SPECIAL)


def frequencies(samples, vocab_size):
    return np.bincount(samples.numpy().ravel(), minlength=vocab_size) / samples.numpy().size


def test_sampling_matches_softmax_and_temperature():
    base = np.array([0.0, 1.0, 2.0, -1.0, 0.5], np.float32)
    logits = tf.tile(tf.constant(base)[None, None, :], [4, 10_000, 1])
    for temperature in (1.0, 2.0):
        softmax = np.exp(base / temperature) / np.exp(base / temperature).sum()
        got = frequencies(sample_tokens(logits, temperature=temperature, seed=[1, 1]), 5)
        np.testing.assert_allclose(got, softmax, atol=0.01)
    uniform = frequencies(sample_tokens(tf.zeros([4, 10_000, 8]), seed=[2, 2]), 8)
    np.testing.assert_allclose(uniform, np.full(8, 1 / 8), atol=0.01)
    random_logits = tf.random.stateless_normal([4, N, 1000], [3, 3])
    np.testing.assert_array_equal(sample_tokens(random_logits, temperature=1e-6, seed=[4, 4]),
                                  tf.argmax(random_logits, -1, output_type=tf.int32))


def test_disallow_correct_never_returns_the_original():
    original = tf.constant(np.random.default_rng(0).integers(0, 6, [4, 5000]), tf.int32)
    logits = 10.0 * tf.one_hot(original, 6)  # the generator is confident and right
    sampled = sample_tokens(logits, disallow_ids=original, seed=[5, 5])
    assert not (sampled.numpy() == original.numpy()).any()
    assert len(np.unique(sampled)) == 6
    plain = sample_tokens(logits, seed=[5, 5])
    assert (plain.numpy() == original.numpy()).mean() > 0.99


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_sampling_runs_in_float32_without_gradient(dtype):
    logits = tf.cast(tf.random.stateless_normal([2, 7, 300], [6, 6]) * 3, dtype)
    sampled = sample_tokens(logits, seed=[8, 8])
    assert sampled.dtype == tf.int32 and sampled.shape == (2, 7)
    np.testing.assert_array_equal(sampled, sample_tokens(tf.cast(logits, tf.float32), seed=[8, 8]))
    watched = tf.Variable(tf.cast(logits, tf.float32))
    with tf.GradientTape() as tape:
        drawn = tf.one_hot(sample_tokens(watched, seed=[8, 8]), 300)
        total = tf.reduce_sum(tf.cast(drawn, tf.float32))
    assert tape.gradient(total, watched) is None


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_losses_against_numpy():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(2, 3, 7)).astype(np.float32)
    targets = np.array([[1, 4, 0], [6, 0, 0]])
    weights = np.array([[1, 1, 0], [1, 0, 0]], np.float32)
    per_slot = -np.take_along_axis(log_softmax(logits), targets[..., None], -1)[..., 0]
    mlm = mlm_loss(tf.cast(logits, tf.bfloat16), targets, weights)
    assert mlm.loss.dtype == tf.float32
    mlm = mlm_loss(logits, targets, weights)
    np.testing.assert_allclose(mlm.per_slot_loss, per_slot, rtol=1e-5)
    np.testing.assert_allclose(mlm.loss, (weights * per_slot).sum() / (3 + 1e-6), rtol=1e-5)
    np.testing.assert_array_equal(mlm.preds, logits.argmax(-1))

    d_logits = np.array([[2.0, -1.0, 0.0, 0.5, 3.0], [-2.0, 1.5, 0.3, 9.0, 9.0]], np.float32)
    labels = np.array([[0, 1, 1, 0, 0], [0, 1, 0, 1, 1]])
    input_mask = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], np.float32)
    bce = np.maximum(d_logits, 0) - d_logits * labels + np.log1p(np.exp(-np.abs(d_logits)))
    rtd = rtd_loss(d_logits, labels, input_mask)
    np.testing.assert_allclose(rtd.loss, (bce * input_mask).sum() / (7 + 1e-6), rtol=1e-5)
    np.testing.assert_allclose(rtd.per_example_loss,
                               (bce * input_mask).sum(1) / (input_mask.sum(1) + 1e-6), rtol=1e-5)
    np.testing.assert_array_equal(rtd.preds, [[1, 0, 0, 1, 1], [0, 1, 1, 1, 1]])
    np.testing.assert_allclose(rtd.probs, 1 / (1 + np.exp(-d_logits)), rtol=1e-6)
    selected = np.array([[0, 1, 0, 1, 1], [1, 0, 0, 1, 0]], np.float32)  # "ELECTRA 15%"
    only = input_mask * selected
    np.testing.assert_allclose(rtd_loss(d_logits, labels, input_mask, weights=selected).loss,
                               (bce * only).sum() / (only.sum() + 1e-6), rtol=1e-5)
    np.testing.assert_allclose(total_loss(mlm.loss, rtd.loss),
                               float(mlm.loss) + 50 * float(rtd.loss), rtol=1e-6)
    np.testing.assert_allclose(total_loss(2.0, 3.0, gen_weight=0.5, disc_weight=10.0), 31.0)


def test_copy_mechanism_loss_against_numpy():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(2, 4, 6)).astype(np.float32)
    copy_logits = np.array([[0.3, -1.0, 2.0, 40.0], [-40.0, 0.0, 1.0, -0.5]], np.float32)
    inputs = np.array([[1, 2, 3, 4], [5, 0, 2, 2]])
    targets = np.array([[1, 5, 3, 4], [1, 0, 4, 2]])
    weights = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], np.float32)
    d = 1 / (1 + np.exp(-copy_logits.astype(np.float64)))
    softmax = np.exp(log_softmax(logits.astype(np.float64)))
    prob = d[..., None] * np.eye(6)[inputs] + (1 - d[..., None]) * softmax
    per_token = -np.log(np.take_along_axis(prob, targets[..., None], -1)[..., 0])
    out = copy_mechanism_loss(logits, copy_logits, inputs, targets, weights)
    np.testing.assert_allclose(out.per_token_loss, per_token, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out.loss, (weights * per_token).sum() / (7 + 1e-6), rtol=1e-4)
    assert out.per_token_loss[0, 3] < 1e-6  # confident, correct copy
