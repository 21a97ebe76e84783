"""Pre-training eval metrics: each against a hand computation, under a strategy, and the slots
that show [MASK] (what masked_lm_accuracy_at_mask counts)."""

from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf
from scipy.special import log_softmax
from sklearn.metrics import roc_auc_score

from electra_tf.objectives import (MaskedLmInputs, PretrainingMetrics, mask_tokens, mlm_loss, rtd_loss,
                                   slots_showing_mask)
from electra_tf.training.evaluation import update_metrics

MASK = 103


@pytest.mark.parametrize("with_replacement", [True, False])
def test_slots_showing_mask_are_the_slots_the_generator_sees_as_mask(with_replacement):
    rng = np.random.default_rng(5)
    input_ids = rng.integers(1000, 5000, (2000, 64)).astype(np.int32)  # no special token inside
    input_mask = (np.arange(64)[None, :] < rng.integers(20, 65, (2000, 1))).astype(np.int32)
    masked = mask_tokens(input_ids, input_mask, max_predictions_per_seq=10, mask_id=MASK, cls_id=101,
                         sep_id=102, with_replacement=with_replacement, seed=tf.constant([4, 2]))
    at_mask = slots_showing_mask(masked, MASK).numpy()
    positions, weights = masked.masked_lm_positions.numpy(), masked.masked_lm_weights.numpy()
    shown = np.take_along_axis(masked.masked_input_ids.numpy(), positions, 1)
    np.testing.assert_array_equal(at_mask, (shown == MASK) * weights)
    kept = (weights > 0) & (at_mask == 0)
    np.testing.assert_array_equal(shown[kept], np.take_along_axis(input_ids, positions, 1)[kept])
    # 85 / 15; with replacement, a kept slot whose position another slot masked reads [MASK] too
    assert at_mask.sum() / weights.sum() == pytest.approx(0.866 if with_replacement else 0.85, abs=0.01)


def test_slots_showing_mask_by_hand():
    # row: [MASK] at 3 (drawn twice: once masked, once kept), kept at 5, random token at 2,
    # an unused slot at position 0 (which holds [MASK] here, and still does not count)
    masked = MaskedLmInputs(masked_input_ids=tf.constant([[MASK, 7, 42, MASK, 9, 11]]),
                            masked_lm_positions=tf.constant([[3, 3, 5, 2, 0]]),
                            masked_lm_ids=tf.constant([[8, 8, 11, 10, 0]]),
                            masked_lm_weights=tf.constant([[1.0, 1.0, 1.0, 1.0, 0.0]]))
    np.testing.assert_array_equal(slots_showing_mask(masked, MASK), [[1, 1, 0, 0, 0]])


def copier_output(mask_token_fraction):
    """A pretraining output whose generator predicts the token its input shows (a pure copier)."""
    rng = np.random.default_rng(6)
    input_ids = rng.integers(1000, 1100, (500, 64)).astype(np.int32)
    input_mask = np.ones((500, 64), np.int32)
    masked = mask_tokens(input_ids, input_mask, max_predictions_per_seq=10, mask_id=MASK, cls_id=101,
                         sep_id=102, mask_token_fraction=mask_token_fraction, seed=tf.constant([1, 9]))
    shown = tf.gather(masked.masked_input_ids, masked.masked_lm_positions, batch_dims=1)  # [B, N]
    logits = tf.one_hot(shown, 1100) * 10.0
    output = SimpleNamespace(masked=masked, mlm=mlm_loss(logits, masked.masked_lm_ids, masked.masked_lm_weights),
                             sampled_ids=None, rtd=None)
    return {"input_mask": tf.constant(input_mask)}, output


def test_a_copying_generator_scores_the_kept_share_overall_and_zero_at_mask():
    metrics = PretrainingMetrics(electra_objective=False)
    update_metrics(metrics, *copier_output(0.85), mask_id=MASK)
    result = metrics.result()
    assert result["masked_lm_accuracy_at_mask"] == 0.0
    assert result["masked_lm_accuracy"] == pytest.approx(1 - 0.866, abs=0.01)  # the slots reading their token


def test_accuracy_at_mask_is_left_out_when_no_slot_shows_mask():
    metrics = PretrainingMetrics(electra_objective=False)
    update_metrics(metrics, *copier_output(0.0), mask_id=MASK)
    result = metrics.result()
    assert list(result) == ["masked_lm_accuracy", "masked_lm_loss"] and result["masked_lm_accuracy"] == 1.0


def metric_batches():
    rng = np.random.default_rng(3)
    for _ in range(2):
        lm_ids = rng.integers(0, 5, (4, 6))
        weights = (np.arange(6)[None, :] < rng.integers(1, 7, (4, 1))).astype(np.float32)
        lm_logits = rng.normal(size=(4, 6, 5)).astype(np.float32)
        sampled = rng.integers(0, 5, (4, 6))
        at_mask = (rng.random((4, 6)) < 0.85).astype(np.float32) * weights
        input_mask = (np.arange(300)[None, :] < rng.integers(100, 301, (4, 1))).astype(np.int32)
        labels = (rng.random((4, 300)) < 0.2).astype(np.int32) * input_mask
        d_logits = (rng.normal(size=(4, 300)) + 1.5 * labels).astype(np.float32)
        yield lm_ids, weights, at_mask, lm_logits, sampled, input_mask, labels, d_logits


def update(metrics, lm_ids, weights, at_mask, lm_logits, sampled, input_mask, labels, d_logits):
    metrics.update_state(masked_lm_ids=lm_ids, masked_lm_weights=weights, slots_at_mask=at_mask,
                         mlm=mlm_loss(lm_logits, lm_ids, weights), sampled_ids=sampled,
                         rtd=rtd_loss(d_logits, labels, input_mask), rtd_labels=labels,
                         input_mask=input_mask)


def test_metrics_against_hand_computed_values():
    metrics = PretrainingMetrics()
    batches = list(metric_batches())
    for batch in batches:
        update(metrics, *batch)
    lm_ids, weights, at_mask, lm_logits, sampled, input_mask, labels, d_logits = (
        np.concatenate(parts) for parts in zip(*batches))
    per_slot = -np.take_along_axis(log_softmax(lm_logits, -1), lm_ids[..., None], -1)[..., 0]
    probs, preds = 1 / (1 + np.exp(-d_logits)), (d_logits > 0).astype(np.int32)
    bce = (np.maximum(d_logits, 0) - d_logits * labels + np.log1p(np.exp(-np.abs(d_logits))))
    correct = preds == labels
    expected = {
        "masked_lm_accuracy": (weights * (lm_logits.argmax(-1) == lm_ids)).sum() / weights.sum(),
        "masked_lm_accuracy_at_mask": (at_mask * (lm_logits.argmax(-1) == lm_ids)).sum() / at_mask.sum(),
        "masked_lm_loss": (weights * per_slot).sum() / weights.sum(),
        "sampled_masked_lm_accuracy": (weights * (sampled == lm_ids)).sum() / weights.sum(),
        "disc_loss": ((bce * input_mask).sum(1) / input_mask.sum(1)).mean(),
        "disc_auc": roc_auc_score(labels[input_mask == 1], probs[input_mask == 1]),  # real tokens
        "disc_accuracy": (correct * input_mask).sum() / input_mask.sum(),
        "disc_precision": (correct * preds * input_mask).sum() / (preds * input_mask).sum(),
        "disc_recall": (correct * labels * input_mask).sum() / (labels * input_mask).sum(),
        "disc_auc_with_padding": roc_auc_score((labels * input_mask).ravel(), (probs * input_mask).ravel()),
        "replaced_fraction": ((labels * input_mask).sum(1) / input_mask.sum(1)).mean(),
    }
    rate = expected["replaced_fraction"]
    expected["disc_loss_constant_predictor"] = -rate * np.log(rate) - (1 - rate) * np.log(1 - rate)
    got = metrics.result()
    assert list(got) == list(expected)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, abs=1e-3 if name.startswith("disc_auc") else 1e-5), name
    assert 0.7 < got["disc_auc"] < 0.95
    # padding scored 0 and labelled 0 adds easy negatives: the original's figure is higher
    assert got["disc_auc_with_padding"] > got["disc_auc"] + 0.01
    metrics.reset_state()
    assert metrics.result()["masked_lm_loss"] == 0.0
    assert list(PretrainingMetrics(electra_objective=False).names) == [
        "masked_lm_accuracy", "masked_lm_accuracy_at_mask", "masked_lm_loss"]
    assert list(PretrainingMetrics(disc_weight=0.0).names)[-1] == "sampled_masked_lm_accuracy"


def test_metrics_update_inside_tf_function_under_a_strategy():
    batches = list(metric_batches())
    eager = PretrainingMetrics()
    for batch in batches:
        update(eager, *batch)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        metrics = PretrainingMetrics()

    @tf.function
    def step(*batch):
        strategy.run(lambda *args: update(metrics, *args), args=batch)

    for batch in batches:
        step(*(tf.constant(t) for t in batch))
    for name, value in eager.result().items():
        assert metrics.result()[name] == pytest.approx(value, abs=1e-6), name
