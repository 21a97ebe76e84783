"""Early stopping and the evaluation schedule (`early_stopping_patience`, `eval_every_steps`): a trial
whose dev scores are scripted stops at the evaluation the patience says, ends with the weights of
its best evaluation, and resumes its count after an interruption; `ModelSelection` on its own."""

import io
import json
import math
import re
import signal

import numpy as np
import pytest

from electra_tf.errors import InputError, TrainingInterrupted
from electra_tf.training.interruption import Interruption
from finetune.model_selection import ModelSelection
from finetune.runner import INTERRUPTED, Trial
from finetune.task_data import load_task_data, make_tokenizer
from test_finetuning import data_dir, finetuning_config  # noqa: F401 (data_dir is a fixture)

# MRPC's 48 rows in both text orders (96) at batch 16 for 1.5 epochs: 9 steps, dev scored every 2 (steps
# 2, 4, 6, 8 and after the last, 9)
EPOCHS = 1.5
ACCURACIES = {2: 50.0, 4: 60.0, 6: 55.0, 8: 60.0, 9: 70.0}  # step 4 is the best before patience 2 runs out


class ScriptedTrial(Trial):
    """A trial whose dev scores are ACCURACIES by step, keeping each evaluation's weights."""

    def evaluate(self):
        step = int(self.optimizer.iterations.numpy())
        self.evaluated[step] = [v.numpy() for v in self.model.variables]
        return {"mrpc": {"accuracy": ACCURACIES[step], "f1": 0.0}}


def scripted_trial(data_dir, **values):  # noqa: F811
    config = finetuning_config(data_dir, task_names=["mrpc"], num_train_epochs=EPOCHS, eval_every_steps=2, **values)
    trial = ScriptedTrial(config, load_task_data(config, make_tokenizer(config)), 1, io.StringIO())
    trial.evaluated = {}
    trial.initialise()
    return trial


def test_early_stopping_stops_after_patience_evaluations_and_restores_the_best(data_dir):  # noqa: F811
    trial = scripted_trial(data_dir, early_stopping_patience=2, iterations_per_loop=1000)  # no progress line before 9
    with Interruption(io.StringIO()) as interrupt:
        scores = trial.train(interrupt)
    # evaluations at steps 2, 4 (best), 6 and 8 (no better: 60 ties 60): stopped at step 8 of 9
    assert sorted(trial.evaluated) == [2, 4, 6, 8]
    assert int(trial.optimizer.iterations.numpy()) == 8
    assert scores == {"mrpc": {"accuracy": 60.0, "f1": 0.0}}
    log = trial.stream.getvalue()
    assert "early stopping at step 8: 2 evaluations without a better dev score than 60.00 (step 4)" in log
    assert "kept the best evaluation (step 4, dev score 60.00)" in log
    # the training since the last progress line (here none) is reported where the trial stops
    assert re.search(r"\] train: 8/9 steps .* loss \d+\.\d{4}\n\[trial 1\] early stopping at step 8", log), log
    for variable, best, last in zip(trial.model.variables, trial.evaluated[4], trial.evaluated[8]):
        np.testing.assert_array_equal(variable.numpy(), best)
    assert any(not np.array_equal(best, last) for best, last in zip(trial.evaluated[4], trial.evaluated[8]))
    assert (trial.model_dir / "best.index").exists() and (trial.model_dir / "finetuned.index").exists()


def test_without_patience_every_scheduled_evaluation_runs_and_the_last_weights_stay(data_dir):  # noqa: F811
    trial = scripted_trial(data_dir)
    with Interruption(io.StringIO()) as interrupt:
        scores = trial.train(interrupt)
    assert sorted(trial.evaluated) == [2, 4, 6, 8, 9]  # every eval_every_steps steps and after the last
    assert scores["mrpc"]["accuracy"] == 70.0 and not (trial.model_dir / "best.index").exists()
    for variable, last in zip(trial.model.variables, trial.evaluated[9]):
        np.testing.assert_array_equal(variable.numpy(), last)


def test_an_interrupted_trial_resumes_its_patience_count(data_dir):  # noqa: F811
    trial = scripted_trial(data_dir, early_stopping_patience=2)
    scripted = trial.evaluate
    with Interruption(io.StringIO()) as interrupt:
        def evaluate_then_signal_at_six():
            scores = scripted()
            if int(trial.optimizer.iterations.numpy()) == 6:
                interrupt.signum = signal.SIGTERM  # as the handler records a signal
            return scores

        trial.evaluate = evaluate_then_signal_at_six
        with pytest.raises(TrainingInterrupted):
            trial.train(interrupt)
    state = json.loads((trial.model_dir / f"{INTERRUPTED}.json").read_text())
    assert state["step"] == 6 and state["best_step"] == 4 and state["stale"] == 1
    resumed = scripted_trial(data_dir, early_stopping_patience=2)
    with Interruption(io.StringIO()) as interrupt:
        scores = resumed.train(interrupt)
    assert sorted(resumed.evaluated) == [8] and int(resumed.optimizer.iterations.numpy()) == 8
    assert scores == {"mrpc": {"accuracy": 60.0, "f1": 0.0}}
    for variable, best in zip(resumed.model.variables, trial.evaluated[4]):  # the first run's best
        np.testing.assert_array_equal(variable.numpy(), best)


def test_model_selection_counts_evaluations_since_the_best():
    selection = ModelSelection(patience=3)
    improved = [selection.record(step, {"a": {"m": m}, "b": {"m": 0.0}})
                for step, m in ((1, 10.0), (2, 20.0), (3, 20.0), (4, 5.0))]
    assert improved == [True, True, False, False] and not selection.stop
    assert selection.best == 10.0 and selection.best_step == 2 and selection.stale == 2  # mean over tasks
    assert selection.record(5, {"a": {"m": 1.0}, "b": {"m": 0.0}}) is False and selection.stop
    again = ModelSelection(3, json.loads(json.dumps(selection.state())))
    assert again.state() == selection.state() and again.stop
    legacy = ModelSelection(None, {"best": 1.0, "best_scores": {"a": {"m": 1.0}}})  # saved before early stopping
    assert legacy.stale == 0 and not legacy.stop and legacy.best_step is None
    assert ModelSelection(None).best == -math.inf


@pytest.mark.parametrize("values, message", [
    ({"early_stopping_patience": 0}, "early_stopping_patience 0 must be None or at least 1"),
    ({"eval_every_steps": 0}, "eval_every_steps 0 must be None or at least 1"),
    ({"early_stopping_patience": 2, "do_eval": False}, "early_stopping_patience needs do_eval")])
def test_invalid_schedules_are_input_errors(data_dir, values, message):  # noqa: F811
    with pytest.raises(InputError, match=message):
        finetuning_config(data_dir, task_names=["mrpc"], **values)
