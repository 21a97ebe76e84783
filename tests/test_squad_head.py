"""The SQuAD head (finetune/qa_head.py; the original's `finetune/qa/qa_tasks.py: QATask.get_prediction_module`)
against NumPy on random encoder outputs: its variables, start and end logits under the answer
mask, the top candidates, null score and loss, in the default configuration and the others
(independent ends, joint prediction without the answerability classifier, the classifier on
[CLS] alone)."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from electra_tf.modeling.layer_utils import build_in_scope
from finetune import qa_head


def _numpy_gelu(x):
    from scipy.special import erf
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _qa_inputs(seed):
    """Encoder outputs h [3, 9, 8], a batch of 3 windows (one padded, one unanswerable) and the answer
    mask's penalty 1000 (m - 1), m = input_mask * segment_ids with [CLS] allowed."""
    h = np.random.default_rng(seed).normal(size=[3, 9, 8]).astype(np.float32)
    batch = {"input_mask": np.array([[1] * 9, [1] * 7 + [0] * 2, [1] * 9], np.int32),
             "segment_ids": np.array([[0, 0, 0, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1, 0, 0], [0] * 4 + [1] * 5],
                                     np.int32),
             "start_positions": np.array([4, 0, 6], np.int32), "end_positions": np.array([5, 0, 8], np.int32),
             "is_impossible": np.array([0.0, 1.0, 0.0], np.float32)}
    mask = batch["input_mask"] * batch["segment_ids"]
    mask[:, 0] = 1
    return h, batch, 1000.0 * (mask - 1)


def test_qa_head_matches_numpy():
    tf_keras.utils.set_random_seed(5)
    batch_size, length, hidden, beam = 3, 9, 8, 4
    head = qa_head.QAHead("squad", hidden, beam_size=beam)
    build_in_scope(head, None, "task_specific")
    names = {v.name: tuple(v.shape) for v in head.variables}
    assert names == {"task_specific/squad/dense/kernel:0": (8, 1), "task_specific/squad/dense/bias:0": (1,),
                     "task_specific/squad/qa_hidden/kernel:0": (16, 512),
                     "task_specific/squad/qa_hidden/bias:0": (512,),
                     "task_specific/squad/dense_1/kernel:0": (512, 1), "task_specific/squad/dense_1/bias:0": (1,),
                     "task_specific/squad/dense_2/kernel:0": (16, 512), "task_specific/squad/dense_2/bias:0": (512,),
                     "task_specific/squad/dense_3/kernel:0": (512, 1), "task_specific/squad/dense_3/bias:0": (1,)}
    h, batch, penalty = _qa_inputs(seed=0)
    w = {v.name.split("/", 2)[2][:-2]: v.numpy() for v in head.variables}
    start = (h @ w["dense/kernel"])[..., 0] + w["dense/bias"] + penalty  # [B, L]

    def end_logits_given(start_vectors):  # [B, H] -> [B, L]
        both = np.concatenate([np.repeat(start_vectors[:, None], length, 1), h], -1)
        hid = _numpy_gelu(both @ w["qa_hidden/kernel"] + w["qa_hidden/bias"])
        return (hid @ w["dense_1/kernel"])[..., 0] + w["dense_1/bias"] + penalty

    end = end_logits_given(h[np.arange(batch_size), batch["start_positions"]])
    p_start = np.exp(_log_softmax(start))
    answerable_in = np.concatenate([h[:, 0], (p_start[..., None] * h).sum(1)], -1)
    answerable = (_numpy_gelu(answerable_in @ w["dense_2/kernel"] + w["dense_2/bias"]) @ w["dense_3/kernel"])[:, 0] \
        + w["dense_3/bias"]
    rows = np.arange(batch_size)
    ce = lambda z, y: -_log_softmax(z)[rows, y]  # noqa: E731
    expected_loss = (ce(start, batch["start_positions"]) + ce(end, batch["end_positions"])) / 2 + 0.5 * (
        np.maximum(answerable, 0) - answerable * batch["is_impossible"] + np.log1p(np.exp(-np.abs(answerable))))
    for training in (True, False):
        outputs = head(tf.constant(h), batch, training=training)
        np.testing.assert_allclose(outputs["start_logits"], start, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(outputs["end_logits"], end, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(outputs["answerable_logit"], answerable, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(head.per_example_loss(outputs, batch), expected_loss, rtol=1e-5)
    # inference: the top-4 starts, then the top-4 ends of each start's end distribution
    top_start = np.argsort(-start, axis=-1, kind="stable")[:, :beam]
    np.testing.assert_array_equal(outputs["start_top_index"], top_start)
    np.testing.assert_allclose(outputs["start_top_log_probs"], np.take_along_axis(_log_softmax(start), top_start, -1),
                               rtol=1e-5)
    for i in range(beam):
        log_p_end = _log_softmax(end_logits_given(h[rows, top_start[:, i]]))
        top_end = np.argsort(-log_p_end, axis=-1, kind="stable")[:, :beam]
        np.testing.assert_array_equal(outputs["end_top_index"][:, i], top_end)
        np.testing.assert_allclose(outputs["end_top_log_probs"][:, i], np.take_along_axis(log_p_end, top_end, -1),
                                   rtol=1e-4, atol=1e-4)
    assert set(head.predictions(outputs)) == {"start_top_log_probs", "start_top_index", "end_top_log_probs",
                                              "end_top_index", "null_score"}


@pytest.mark.parametrize("joint, classifier", [(False, False), (True, False), (True, True)],
                         ids=["independent-ends", "joint-without-classifier", "classifier-on-cls-alone"])
def test_qa_head_options_match_numpy(joint, classifier):
    """The head's other configurations (joint_prediction, answerable_classifier, and the classifier
    without the start-weighted feature): logits, null score and loss as QAHead's docstring says,
    and the candidates of independent ends are the top n_best_size logits of each (the original's
    write_predictions; beam_size is the joint search's)."""
    tf_keras.utils.set_random_seed(6)
    batch_size, length, hidden, beam, n_best = 3, 9, 8, 4, 6
    head = qa_head.QAHead("squad", hidden, beam_size=beam, joint_prediction=joint, answerable_classifier=classifier,
                          answerable_uses_start_logits=False, n_best_size=n_best)
    build_in_scope(head, None, "task_specific")
    w = {v.name.split("/", 2)[2][:-2]: v.numpy() for v in head.variables}
    layers = {"dense", "dense_1"} | ({"qa_hidden"} if joint else set()) | ({"dense_2"} if classifier else set())
    assert {name.split("/")[0] for name in w} == layers
    h, batch, penalty = _qa_inputs(seed=1)
    rows = np.arange(batch_size)
    start = (h @ w["dense/kernel"])[..., 0] + w["dense/bias"] + penalty
    if joint:  # the end conditioned on the gold start
        both = np.concatenate([np.repeat(h[rows, batch["start_positions"]][:, None], length, 1), h], -1)
        hid = _numpy_gelu(both @ w["qa_hidden/kernel"] + w["qa_hidden/bias"])
        end = (hid @ w["dense_1/kernel"])[..., 0] + w["dense_1/bias"] + penalty
    else:
        end = (h @ w["dense_1/kernel"])[..., 0] + w["dense_1/bias"] + penalty
    ce = lambda z, y: -_log_softmax(z)[rows, y]  # noqa: E731
    expected_loss = (ce(start, batch["start_positions"]) + ce(end, batch["end_positions"])) / 2
    outputs = head(tf.constant(h), batch, training=True)
    if classifier:  # dense_2 on [CLS] alone
        answerable = (h[:, 0] @ w["dense_2/kernel"])[:, 0] + w["dense_2/bias"]
        expected_loss += 0.5 * (np.maximum(answerable, 0) - answerable * batch["is_impossible"]
                                + np.log1p(np.exp(-np.abs(answerable))))
        np.testing.assert_allclose(outputs["answerable_logit"], answerable, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(outputs["null_score"], answerable, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(outputs["answerable_logit"], np.zeros(batch_size))
        null = start[:, 0] if joint else start[:, 0] + end[:, 0]
        np.testing.assert_allclose(outputs["null_score"], null, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(outputs["start_logits"], start, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(outputs["end_logits"], end, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(head.per_example_loss(outputs, batch), expected_loss, rtol=1e-5)
    if not joint:  # inference: the top logits of each, the ends the same for every start
        outputs = head(tf.constant(h), batch, training=False)
        top_start = np.argsort(-start, axis=-1, kind="stable")[:, :n_best]
        top_end = np.argsort(-end, axis=-1, kind="stable")[:, :n_best]
        np.testing.assert_array_equal(outputs["start_top_index"], top_start)
        np.testing.assert_allclose(outputs["start_top_log_probs"], np.take_along_axis(start, top_start, -1),
                                   rtol=1e-5, atol=1e-4)
        for i in range(n_best):
            np.testing.assert_array_equal(outputs["end_top_index"][:, i], top_end)
            np.testing.assert_allclose(outputs["end_top_log_probs"][:, i], np.take_along_axis(end, top_end, -1),
                                       rtol=1e-5, atol=1e-4)
