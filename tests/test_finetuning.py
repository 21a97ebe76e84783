"""Fine-tuning end to end on real GLUE data with a tiny pretrained model: weights, loss, LR table,
padding, trials, results and GLUE-server test files, and the CLI's errors."""

import json
import os
import re
import shutil
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import convert_checkpoint
import run_finetuning
from electra_tf import layerwise_decay
from electra_tf.config import PretrainingConfig
from electra_tf.errors import InputError
from electra_tf.pretraining import PretrainingModel
from finetune.config import FinetuningConfig
from finetune.task_data import load_task_data, make_tokenizer
from finetune.tasks import get_task
from finetune.model import FinetuningModel
from finetune.pretrained import load_encoder_weights
from finetune.runner import Trial, main_score
from process_helpers import REPO, signal_when

TASK_FOLDERS = ("MRPC", "CoLA", "STS-B")
BASE = dict(model_size="tiny", max_seq_length=32, train_batch_size=16, eval_batch_size=64, max_examples=48,
            num_train_epochs=1.0, iterations_per_loop=2, learning_rate=1e-3)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, shared_data, vocab_file):
    """DATA_DIR with finetuning_data/{MRPC,CoLA,STS-B} (links to the real GLUE folders) and a tiny
    pretrained model dir models/tiny as run_pretraining.py writes it (config.json, vocab, ckpt)."""
    root = tmp_path_factory.mktemp("finetune_data")
    for folder in TASK_FOLDERS:
        (root / "finetuning_data").mkdir(exist_ok=True)
        (root / "finetuning_data" / folder).symlink_to(shared_data / "glue" / folder)
    model_dir = root / "models" / "tiny"
    config = PretrainingConfig.from_hparams("tiny", str(root), {"model_size": "tiny"})
    tf_keras.utils.set_random_seed(0)
    model = PretrainingModel(config, cls_id=101, sep_id=102, mask_id=103)
    config.save(model_dir / "config.json")
    shutil.copyfile(vocab_file, model_dir / "vocab.txt")
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(model_dir), 2).save(checkpoint_number=7)
    return root


def finetuning_config(data_dir, **values):
    return FinetuningConfig.from_hparams("tiny", str(data_dir), {**BASE, **values})


def run_cli(data_dir, capsys, **values):
    code = run_finetuning.main(["--data-dir", str(data_dir), "--model-name", "tiny",
                                "--hparams", json.dumps({**BASE, **values})])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_encoder_weights_come_from_the_pretrained_discriminator(data_dir):
    config = finetuning_config(data_dir, task_names=["mrpc"])
    pretrained = PretrainingModel(PretrainingConfig.from_json_file(data_dir / "models/tiny/config.json"), 101, 102, 103)
    tf.train.Checkpoint(model=pretrained).read(str(data_dir / "models/tiny/ckpt-7")).expect_partial()
    expected = {v.name: v.numpy() for v in pretrained.network.discriminator.variables}
    model = FinetuningModel(config.encoder_config(), [get_task("mrpc")])
    report = load_encoder_weights(model.encoder_variables, config.init_checkpoint)
    assert len(report.loaded) == len(model.encoder_variables) == len(expected) and report.unused
    assert not report.missing
    for variable in model.encoder_variables:
        np.testing.assert_array_equal(variable.numpy(), expected[variable.name])

    deeper = FinetuningModel(finetuning_config(data_dir, task_names=["mrpc"],
                                               model_hparam_overrides={"num_hidden_layers": 3}).encoder_config(),
                             [get_task("mrpc")])
    with pytest.raises(InputError, match="lacks the required variable electra/encoder/layer_2/"):
        load_encoder_weights(deeper.encoder_variables, config.init_checkpoint)
    wider = FinetuningModel(finetuning_config(data_dir, task_names=["mrpc"], embedding_size=32).encoder_config(),
                            [get_task("mrpc")])
    with pytest.raises(InputError, match=r"electra/embeddings/word_embeddings: the checkpoint has shape \[30522, 64\]"):
        load_encoder_weights(wider.encoder_variables, config.init_checkpoint)


@pytest.mark.parametrize("layers, decay, hidden", [(12, 0.8, 256), (24, 0.9, 64)])
def test_layerwise_multipliers_of_every_finetuning_variable(data_dir, layers, decay, hidden):
    config = finetuning_config(data_dir, task_names=["mrpc", "sts"], model_size="small",
                               model_hparam_overrides={"num_hidden_layers": layers, "hidden_size": hidden})
    model = FinetuningModel(config.encoder_config(), [get_task("mrpc"), get_task("sts")])
    table = layerwise_decay.lr_multiplier_table(model.trainable_variables, layers, decay)
    assert len(table) == len(model.trainable_variables)
    for name, multiplier in table.items():  # docs/fidelity.md#layer-wise-decay: decay ** (n_layers + 2 - depth)
        if name.startswith("electra/embeddings"):  # the embedding block and its projection: depth 0
            expected = decay ** (layers + 2)
        elif name.startswith("task_specific/"):
            expected = 1.0
        else:
            layer = int(name.split("/")[2].split("_")[1])
            expected = decay ** (layers + 1 - layer)
        assert multiplier == pytest.approx(expected), name
    assert table["electra/embeddings_project/kernel"] == pytest.approx(decay ** (layers + 2))
    assert table[f"electra/encoder/layer_{layers - 1}/output/dense/kernel"] == pytest.approx(decay ** 2)
    assert table["task_specific/sts/dense/kernel"] == 1.0
    # "fixed_layerwise_decay": true corrects the off-by-one: the top layer gets decay^1
    fixed = finetuning_config(data_dir, task_names=["mrpc"], fixed_layerwise_decay=True)
    fixed_table = layerwise_decay.lr_multiplier_table(model.trainable_variables, layers, decay,
                                                      fixed=fixed.fixed_layerwise_decay)
    assert fixed_table[f"electra/encoder/layer_{layers - 1}/output/dense/kernel"] == pytest.approx(decay)


@pytest.mark.parametrize("values, lr, top, weight_decay", [
    ({"learning_rate": 1e-3}, 1e-3, 0.8 ** 2, 0.01),  # the original's fine-tuning defaults
    ({"learning_rate": 1e-3, "fixed_layerwise_decay": True}, 1e-3, 0.8, 0.01),  # the off-by-one corrected
    ({"model_size": "small", "model_hparam_overrides": {"num_hidden_layers": 2}, "recipe": "paper"},
     3e-4, 0.8 ** 2, 0.0)],  # the paper's Table 7 for Small
    ids=["defaults", "fixed-decay", "paper-recipe"])
def test_a_trial_trains_with_the_configured_optimizer(data_dir, values, lr, top, weight_decay):
    """The optimizer a trial's train step is compiled with: AdamW with the config's peak rate, 10 % warm-up and linear
    decay over the trial's steps, weight decay off for LayerNorm and biases, clipping at global
    norm 1, and layer-wise decay 0.8 over the encoder's depth (2 layers here)."""
    decay = 0.8
    base = {k: v for k, v in BASE.items() if k != "learning_rate"}
    config = FinetuningConfig.from_hparams("tiny", str(data_dir), {**base, "task_names": ["mrpc"],
                                                                  "random_init": True, **values})
    trial = Trial(config, load_task_data(config, make_tokenizer(config)), 1, None)
    trial.compile_train_step(200)
    optimizer, schedule = trial.optimizer, trial.optimizer._get_hyper("learning_rate")
    assert type(optimizer).__name__ == "AdamWeightDecay" and optimizer.global_clipnorm == 1.0
    assert (schedule.initial_learning_rate, schedule.decay_steps, schedule.warmup_steps) == pytest.approx((lr, 200, 20))
    assert float(schedule(20)) == pytest.approx(lr * 0.9) and float(schedule(200)) == 0.0
    assert optimizer.weight_decay_rate == weight_decay
    multipliers = {v.name.split(":")[0]: optimizer.lr_multiplier(v.name) for v in trial.model.trainable_variables}
    assert multipliers["electra/embeddings/word_embeddings"] == pytest.approx(top * decay ** 2)  # below 2 layers
    assert multipliers["electra/encoder/layer_0/attention/self/query/kernel"] == pytest.approx(top * decay)
    assert multipliers["electra/encoder/layer_1/output/dense/kernel"] == pytest.approx(top)
    assert multipliers["task_specific/mrpc/dense/kernel"] == 1.0
    decayed = {name for name in multipliers if optimizer.uses_weight_decay(name)}
    if weight_decay:
        assert "electra/encoder/layer_1/output/dense/kernel" in decayed
        assert not any("LayerNorm" in name or name.endswith("bias") for name in decayed)
    else:
        assert not decayed


def test_loss_is_each_examples_own_task_summed_over_the_batch(data_dir):
    tasks = [get_task("mrpc"), get_task("sts")]
    model = FinetuningModel(finetuning_config(data_dir, task_names=["mrpc", "sts"]).encoder_config(), tasks)
    rng = np.random.default_rng(0)
    batch = {"input_ids": rng.integers(1, 1000, (6, 9)).astype(np.int32), "input_mask": np.ones((6, 9), np.int32),
             "segment_ids": np.zeros((6, 9), np.int32), "task_id": np.array([0, 1, 0, 1, 1, 0], np.int32),
             "label_ids": np.array([1, 0, 0, 0, 0, 1], np.int32),
             "targets": np.array([0, 0.2, 0, 0.8, 0.4, 0], np.float32)}
    outputs = model(batch, training=False)
    logits, scores = outputs["mrpc"].numpy(), outputs["sts"].numpy()[:, 0]
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -sum(log_probs[i, batch["label_ids"][i]] for i in (0, 2, 5))
    expected += sum((scores[i] - batch["targets"][i]) ** 2 for i in (1, 3, 4))
    assert float(model.loss(batch, outputs)) == pytest.approx(expected, rel=1e-5)


def test_a_process_reuses_the_tokenizer_of_the_same_vocab(tmp_path, data_dir, vocab_file):
    """Runs of one process share a tokenizer per vocab and casing (the replication runs one trial
    per run); a vocab file rewritten in place gets a tokenizer of its new tokens."""
    first = make_tokenizer(finetuning_config(data_dir))
    assert make_tokenizer(finetuning_config(data_dir, task_names=["sts"])) is first
    assert make_tokenizer(finetuning_config(data_dir, do_lower_case=False)) is not first
    vocab = tmp_path / "vocab.txt"
    tokens = Path(vocab_file).read_text(encoding="utf-8").splitlines()
    vocab.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    before = make_tokenizer(finetuning_config(data_dir, vocab_file=str(vocab)))
    assert before.convert_tokens_to_ids(["hello"]) == first.convert_tokens_to_ids(["hello"])
    index = tokens.index("hello")
    tokens[index], tokens[index + 1] = tokens[index + 1], tokens[index]
    vocab.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    after = make_tokenizer(finetuning_config(data_dir, vocab_file=str(vocab)))
    assert after is not before and after.convert_tokens_to_ids(["hello"]) == [index + 1]


def test_dynamic_padding_predicts_what_fixed_padding_predicts(data_dir):
    dynamic = finetuning_config(data_dir, task_names=["sts"], do_train=False, random_init=True)
    data = load_task_data(dynamic, make_tokenizer(dynamic))
    trial = Trial(dynamic, data, 1, None)
    with_dynamic, losses = trial.predict(data.dev[0])
    trial.config = finetuning_config(data_dir, task_names=["sts"], do_train=False, dynamic_padding=False)
    with_fixed, fixed_losses = trial.predict(data.dev[0])
    assert len(with_dynamic) == 48
    np.testing.assert_allclose(with_dynamic, with_fixed, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(losses, fixed_losses, rtol=1e-4, atol=1e-5)


def test_multitask_trials_results_and_glue_test_files(data_dir, capsys):
    code, out, err = run_cli(data_dir, capsys, task_names=["MRPC", "cola", "STS-B"], num_trials=2,
                             write_test_outputs=True, keep_best_model=True, num_train_epochs=2.0)
    assert code == 0, err
    results_dir = data_dir / "models" / "tiny" / "results"
    document = json.loads((results_dir / "mrpc_cola_sts_results.json").read_text())
    assert len(document["trials"]) == 2
    for trial in document["trials"]:
        assert set(trial) == {"mrpc", "cola", "sts"}
        assert 0 <= trial["mrpc"]["accuracy"] <= 100 and 0 <= trial["mrpc"]["f1"] <= 100
        assert -100 <= trial["cola"]["mcc"] <= 100 and -100 <= trial["sts"]["spearman"] <= 100
        assert {"pearson", "spearman", "mse", "loss"} <= set(trial["sts"])
    values = [t["sts"]["pearson"] for t in document["trials"]]
    stats = document["aggregate"]["sts"]["pearson"]
    assert stats["median"] == pytest.approx(np.median(values)) and stats["max"] == max(values)
    assert stats["std"] == pytest.approx(np.std(values, ddof=1))
    assert "task  metric" in out and "ETA" in out and "epoch 1.00 dev: mrpc accuracy" in out
    assert (results_dir / "mrpc_cola_sts_results.txt").read_text().startswith("mrpc: accuracy: ")
    test_dir = results_dir / "glue_test"
    assert sorted(p.name for p in test_dir.iterdir()) == ["CoLA.tsv", "MRPC.tsv", "STS-B.tsv"]
    for name, rows, valid in (("MRPC", 1725, {"0", "1"}), ("CoLA", 1063, {"0", "1"}), ("STS-B", 1379, None)):
        lines = (test_dir / f"{name}.tsv").read_text().splitlines()
        assert lines[0] == "index\tprediction" and len(lines) == rows + 1
        indices, labels = zip(*(line.split("\t") for line in lines[1:]))
        assert indices == tuple(str(i) for i in range(rows))
        if valid:
            assert set(labels) <= valid
        else:
            assert all(0.0 <= float(label) <= 5.0 for label in labels)
    # keep_best_model: each trial reports (and keeps) its epoch with the best mean of first metrics
    for number, trial in enumerate(document["trials"], 1):
        epochs = [[float(first) for first in re.findall(r"(?:^|; )\w+ \w+ (-?[\d.]+)", line)] for line in
                  re.findall(rf"^\[trial {number}\] epoch \d\.00 dev: (.*)$", out, flags=re.M)]
        assert len(epochs) == 2 and all(len(firsts) == 3 for firsts in epochs)
        assert main_score(trial) == pytest.approx(max(np.mean(firsts) for firsts in epochs), abs=0.01)
    # GLUE-server files come from the trial with the best main score
    assert document["test_predictions"]["trial"] == 1 + int(np.argmax([main_score(t) for t in document["trials"]]))
    model_dir = data_dir / "models" / "tiny" / "finetuning_models" / "mrpc_cola_sts_model_1"
    assert (model_dir / "finetuned.index").exists() and (model_dir / "best.index").exists()

    # evaluation only, from the fine-tuned model: the same dev scores as the trial's best epoch
    code, out, err = run_cli(data_dir, capsys, task_names=["MRPC", "cola", "STS-B"], do_train=False,
                             init_checkpoint=str(model_dir))
    assert code == 0, err
    again = json.loads((results_dir / "mrpc_cola_sts_results.json").read_text())["trials"][0]
    for task, metrics in document["trials"][0].items():
        for metric, value in metrics.items():
            assert again[task][metric] == pytest.approx(value, abs=1e-3), (task, metric)


@pytest.mark.parametrize("values, message", [
    ({"task_names": ["mrpc"], "learnig_rate": 1e-3}, "did you mean 'learning_rate'"),
    ({"task_names": ["rte"]}, "no data for task rte"),
    ({"task_names": ["mrpc"], "model_size": "small"}, "the pretrained model has model_size 'tiny'"),
    ({"task_names": ["mrpc"], "vocab_size": 1000}, "has 30522 tokens but vocab_size is 1000"),
])
def test_bad_input_gives_one_clear_error(data_dir, capsys, values, message):
    code, _, err = run_cli(data_dir, capsys, **values)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_bad_row_in_task_data_names_file_and_line(tmp_path, data_dir, capsys):
    (tmp_path / "finetuning_data" / "rte").mkdir(parents=True)
    (tmp_path / "finetuning_data" / "rte" / "train.tsv").write_text(
        "index\ts1\ts2\tlabel\n0\ta\tb\tentailment\n1\ta\tb\tmaybe\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny").symlink_to(data_dir / "models" / "tiny")
    code = run_finetuning.main(["--data-dir", str(tmp_path), "--model-name", "tiny",
                                "--hparams", json.dumps({**BASE, "task_names": ["rte"]})])
    err = capsys.readouterr().err
    assert code == 2 and "rte/train.tsv:3: unknown label 'maybe' for rte" in err


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


@pytest.mark.parametrize("drop, batch, steps", [(False, 20, 3), (True, 20, 2), (False, 64, 1), (True, 64, 0)])
def test_an_epoch_ends_with_its_remainder_as_the_original(data_dir, capsys, drop, batch, steps):
    """48 CoLA rows in batches of 20: the original's ceil(48 / 20) = 3 steps an epoch (its data padded
    to a multiple of the batch with rows of zero loss), the last on the 8 rows left; with
    drop_last_partial_batch the 2 full batches alone. In batches of 64: one step on the 48 rows, or
    with the option none, which is an error naming the sizes."""
    code, out, err = run_cli(data_dir, capsys, task_names=["cola"], random_init=True, train_batch_size=batch,
                             drop_last_partial_batch=drop, keep_all_models=False, do_eval=False)
    if steps == 0:
        assert code == 2 and "48 training examples, train_batch_size 64 and num_train_epochs 1.0 give no " \
                              "training step" in err, err
        return
    assert code == 0, err
    assert re.search(rf"^\[trial 1\] train: {steps}/{steps} steps", out, flags=re.M), out


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
