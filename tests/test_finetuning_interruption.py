"""Fine-tuning stopped and resumed: SIGTERM mid-trial saves the trial and the same command resumes
it exactly; a signal in a trial's last step ends the run after that trial; finished trials come
back only under the config that wrote them."""

import json
import os
import re
import signal
import sys

import numpy as np
import pytest
import tensorflow as tf

import convert_checkpoint
from finetune.runner import Trial
from finetuning_helpers import BASE, data_dir, finetuning_config, run_cli  # noqa: F401 (data_dir: a fixture)
from process_helpers import REPO, signal_when


def test_sigterm_stops_a_trial_with_a_checkpoint_and_the_run_resumes_it(data_dir, capsys, monkeypatch, tmp_path):
    """A real run_finetuning.py gets SIGTERM mid-trial: it saves model, optimizer and step, exits 143;
    the same command restores exactly that state (weights, Adam moments, iterations), resumes the
    trial at that step and finishes it."""
    values = {**BASE, "task_names": ["mrpc"], "max_examples": 480, "keep_all_models": True}  # 60 steps
    command = [sys.executable, str(REPO / "run_finetuning.py"), "--data-dir", str(data_dir), "--model-name", "tiny",
               "--hparams", json.dumps(values)]
    code, out, err = signal_when(command, dict(os.environ, PYTHONPATH=str(REPO)),
                                 lambda line: line.startswith("[trial 1]") and " loss " in line, signal.SIGTERM)
    model_dir = data_dir / "models" / "tiny" / "finetuning_models" / "mrpc_model_1"
    assert code == 128 + signal.SIGTERM, out + err
    stopped = re.search(rf"^stopped: training stopped by SIGTERM at step (\d+); the checkpoint is "
                        rf"{re.escape(str(model_dir / 'interrupted'))}\. Run the same command again to resume$",
                        err, flags=re.M)
    assert stopped, err
    step = int(stopped.group(1))
    assert 2 <= step < 60 and json.loads((model_dir / "interrupted.json").read_text())["step"] == step
    capsys.readouterr()
    assert convert_checkpoint.main(["saved-model", "--model-dir", str(model_dir), "--output-dir",
                                    str(tmp_path / "export")]) == 2  # not a pretrained model's config.json error
    assert "its trial stopped before it ended: run its run_finetuning.py command again" in capsys.readouterr().err

    resume_state, restored = Trial._resume_state, []

    def resume_and_save_again(self):
        state = resume_state(self)
        # the step counter and the slots that the first step's apply_gradients creates (a restore assigns
        # them on creation), through the optimizer's public API; then the state as restored
        _ = self.optimizer.iterations  # created on first access
        for variable in self.model.trainable_variables:
            for slot in ("adam_m", "adam_v"):
                self.optimizer.add_slot(variable, slot)
        restored.append(self._training_state().write(str(tmp_path / "restored")))
        return state

    monkeypatch.setattr(Trial, "_resume_state", resume_and_save_again)
    code, out, err = run_cli(data_dir, capsys, task_names=["mrpc"], max_examples=480, keep_all_models=True)
    assert code == 0, err
    assert f"[trial 1] resuming at step {step} from {model_dir / 'interrupted'}" in out
    saved, again = (tf.train.load_checkpoint(path) for path in (str(model_dir / "interrupted"), restored[0]))
    keys = set(saved.get_variable_to_shape_map()) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}
    assert keys == set(again.get_variable_to_shape_map()) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}
    moments = [key for key in keys if "/adam_m/" in key or "/adam_v/" in key]
    assert moments and all(np.any(saved.get_tensor(key)) for key in moments)  # trained, not fresh zeros
    assert again.get_tensor("optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE") == step
    for key in keys:
        np.testing.assert_array_equal(again.get_tensor(key), saved.get_tensor(key), err_msg=key)
    resumed = re.findall(r"train: (\d+)/60 steps", out)
    assert resumed and resumed[0] == str(step + 2 - step % 2) and resumed[-1] == "60", out
    assert not (model_dir / "interrupted.json").exists()
    results = json.loads((data_dir / "models" / "tiny" / "results" / "mrpc_results.json").read_text())
    assert len(results["trials"]) == 1 and 0.0 <= results["trials"][0]["mrpc"]["accuracy"] <= 100.0


@pytest.mark.parametrize("signum, moment", [(signal.SIGTERM, "last step"), (signal.SIGINT, "final evaluation")])
def test_signal_in_a_trials_last_step_stops_the_run_after_that_trial(data_dir, capsys, monkeypatch, signum, moment):
    """A signal during trial 1's last step (or its final dev evaluation) is not lost: trial 1 finishes and
    its scores are saved, the run exits 128 + signal; the same command runs trial 2 only. A signal during
    the last trial's last step lets the run complete (exit 0): nothing is left to resume."""
    signalled = {"trial": 1}
    compile_train_step, evaluate = Trial.compile_train_step, Trial.evaluate

    def compile_signalling(self, num_steps):
        train_step, calls = compile_train_step(self, num_steps), []

        def step(batch):
            calls.append(batch)
            if moment == "last step" and self.trial == signalled["trial"] and len(calls) == num_steps:
                os.kill(os.getpid(), signum)  # the handler runs before the step's own work
            return train_step(batch)
        return step

    def evaluate_signalling(self):
        if moment == "final evaluation" and self.trial == signalled["trial"]:
            os.kill(os.getpid(), signum)
        return evaluate(self)

    monkeypatch.setattr(Trial, "compile_train_step", compile_signalling)
    monkeypatch.setattr(Trial, "evaluate", evaluate_signalling)
    values = dict(task_names=["mrpc"], num_trials=2, seed=11)  # one epoch: one dev evaluation, at the end
    results = data_dir / "models" / "tiny" / "results" / "mrpc_results.json"
    code, out, err = run_cli(data_dir, capsys, **values)
    assert code == 128 + signum, out + err
    assert f"stopped: training stopped by {signal.Signals(signum).name} after trial 1 of 2 (its scores are in " \
           f"{results}). Run the same command again to resume" in err, err
    assert re.search(r"^\[trial 1\] train: (\d+)/\1 steps", out, flags=re.M), out
    assert "[trial 1] epoch 1.00 dev: mrpc accuracy" in out
    assert "[trial 2]" not in out
    first = json.loads(results.read_text())["trials"]
    assert len(first) == 1
    models = data_dir / "models" / "tiny" / "finetuning_models"
    assert json.loads((models / "mrpc_model_2" / "interrupted.json").read_text()) == {"step": 0}

    signalled["trial"] = 2  # now during the last trial: it finishes and the run is complete
    code, out, err = run_cli(data_dir, capsys, **values)
    assert code == 0, err
    assert f"trials 1-1 are done (scores in {results}); resuming trial 2" in out
    assert "[trial 1]" not in out and re.search(r"^\[trial 2\] train: (\d+)/\1 steps", out, flags=re.M), out
    assert "[trial 2] the signal came during the last trial, which finished: the run is complete" in out
    trials = json.loads(results.read_text())["trials"]
    assert len(trials) == 2 and trials[0] == first[0]
    assert not list(models.glob("mrpc_model_*/interrupted.json"))


def test_an_interrupted_run_resumes_only_with_its_own_config(data_dir, tmp_path):
    """Trial 2 interrupted: trial 1's scores come back from the results file when it was written by
    the same config; another config's (say, before an upgrade added a field) means starting again,
    and the run says so."""
    import io
    from finetune.runner import _finished_trials, _written_score, mark_not_started
    config = finetuning_config(data_dir, task_names=["cola"], num_trials=2, results_dir=str(tmp_path / "results"),
                               finetuning_models_dir=str(tmp_path / "models"))
    mark_not_started(config, 2)
    results = tmp_path / "results" / "cola_results.json"
    results.parent.mkdir()
    own = json.loads(json.dumps(config.to_dict()))
    results.write_text(json.dumps({"config": own, "trials": [{"cola": {"mcc": 1.0}}]}))
    assert _finished_trials(config, io.StringIO())[:2] == (2, [{"cola": {"mcc": 1.0}}])
    written = {"test_predictions": {"trial": 1}}  # without dev data (do_eval false) trials hold no scores
    assert (_written_score([], written), _written_score([{"cola": {"mcc": 1.0}}], written)) == (-1, 1.0)
    results.write_text(json.dumps({"config": {**own, "learning_rate": 0.5}, "trials": [{"cola": {"mcc": 1.0}}]}))
    stream = io.StringIO()
    assert _finished_trials(config, stream)[:2] == (1, [])
    assert "holds the scores of a run with another config: starting again at trial 1" in stream.getvalue()
