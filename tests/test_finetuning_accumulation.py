"""Gradient accumulation in fine-tuning (`gradient_accumulation_steps`): k micro-batches train the
weights the whole batch trains (same start, dropout off) and score dev the same, for the summed
loss (the original's) and the mean, on batches k does not divide (31 rows in 4 micro-batches of
7-8) and on an epoch's last batch smaller than k (3 rows: one micro-batch empty)."""

import io

import numpy as np
import pytest

import finetune.heads
from electra_tf.training import reporting
from electra_tf.training.interruption import Interruption
from finetune.runner import TENSORBOARD, Trial
from finetune.task_data import load_task_data, make_tokenizer
from finetuning_helpers import data_dir, finetuning_config  # noqa: F401 (data_dir: MRPC and a tiny pretrained model)

NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
WEIGHT_TOLERANCE = 1e-5  # float32 rounding: the micro-batches' gradients are summed in another order


def _trained(config, start=None):
    """(weights before, weights after one epoch, dev scores, the training scalars it wrote for
    TensorBoard: {tag: [(step, value)]}) of trial 1 from `start` (its own initialisation if None)."""
    data = load_task_data(config, make_tokenizer(config))
    trial = Trial(config, data, 1, io.StringIO())
    trial.initialise()
    for variable, value in zip(trial.model.variables, start or []):  # the same head initialisation
        variable.assign(value)
    before = [v.numpy() for v in trial.model.variables]
    with Interruption(io.StringIO()) as interrupt:
        scores = trial.train(interrupt)
    return before, [v.numpy() for v in trial.model.variables], scores, reporting.read_scalars(
        trial.model_dir / TENSORBOARD / "train")


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_micro_batches_train_the_whole_batchs_weights(data_dir, monkeypatch, reduction):  # noqa: F811
    monkeypatch.setattr(finetune.heads, "HEAD_DROPOUT", 0.0)  # the [CLS] head's dropout (the encoder's: the config)
    values = dict(task_names=["mrpc"], train_batch_size=31, loss_reduction=reduction, model_hparam_overrides=NO_DROPOUT)
    config = finetuning_config(data_dir, iterations_per_loop=1, **values)  # 96 rows (pairs both ways): 31, 31, 31, 3
    start, whole, whole_scores, whole_logged = _trained(config)
    _, micro, micro_scores, micro_logged = _trained(finetuning_config(data_dir, gradient_accumulation_steps=4,
                                                                      iterations_per_loop=1, **values), start)
    assert max(float(np.abs(a - b).max()) for a, b in zip(whole, start)) > 100 * WEIGHT_TOLERANCE  # it trained
    assert max(float(np.abs(a - b).max()) for a, b in zip(whole, micro)) <= WEIGHT_TOLERANCE
    # AdamW's step barely depends on the gradient's scale (and clipping rescales it), so the weights alone
    # would not catch a wrong one: the whole batch's loss and gradient norm are logged at every step
    for tag in ("loss", "grad_norm"):
        assert len(whole_logged[tag]) == 4
        np.testing.assert_allclose(micro_logged[tag], whole_logged[tag], rtol=1e-5, err_msg=tag)
    for metric, value in whole_scores["mrpc"].items():
        assert micro_scores["mrpc"][metric] == pytest.approx(value, abs=1e-4 if metric == "loss" else 0.0), metric


def test_accumulation_steps_below_one_are_refused(data_dir):  # noqa: F811
    from electra_tf.errors import InputError
    with pytest.raises(InputError, match="gradient_accumulation_steps 0 must be at least 1"):
        finetuning_config(data_dir, gradient_accumulation_steps=0)
