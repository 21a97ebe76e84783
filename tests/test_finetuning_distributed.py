"""Fine-tuning under a tf.distribute strategy: a MirroredStrategy over two logical CPUs trains MRPC,
chunking and SQuAD 1.1 to the weights one device reaches (same global batch, same start, dropout
off), and scores dev the same (SQuAD: the same answers), for the summed loss (the original's) and
the mean over the global batch, and with each replica's rows in micro-batches (gradient accumulation).

Two logical CPUs are fixed when TensorFlow starts, so the trials run in a fresh subprocess, one for
all the cases."""

import json
import os
import subprocess
import sys

import pytest

from process_helpers import REPO
from test_finetuning import data_dir, run_cli  # noqa: F401 (data_dir: MRPC and a tiny pretrained model)

# For each case, trains one trial on one device (TF's default strategy) and one under MirroredStrategy
# over two logical CPUs from the same weights; prints RESULT <case> {max |weight difference|, both
# trials' dev scores}.
# Batches of 15 and 25 rows split 7/8 and 12/13 over the replicas; MRPC's 96 training examples
# end each epoch with a smaller batch of 6.
SCRIPT = """
import io, json, sys
from pathlib import Path
import numpy as np
from electra_tf.cli import use_tf_keras_only
use_tf_keras_only()  # as run_finetuning.py, before TensorFlow's import
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import finetune.heads
from electra_tf.training.interruption import Interruption
from finetune.config import FinetuningConfig
from finetune.runner import Trial
from finetune.task_data import load_task_data, make_tokenizer

finetune.heads.HEAD_DROPOUT = 0.0  # the [CLS] heads' dropout (the encoder's is off through the config)
data_dir, cases = sys.argv[1], json.loads(sys.argv[2])
# one strategy for every case: two in one process would reuse the same collective instance keys
mirrored_strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
for case, values in cases.items():
    config = FinetuningConfig.from_hparams("tiny", data_dir, values)
    data = load_task_data(config, make_tokenizer(config))
    trained, start = {}, None
    for name, strategy in (("one", None), ("mirrored", mirrored_strategy)):
        trial = Trial(config, data, 1, io.StringIO(), strategy)
        trial.initialise()
        if start is None:
            start = [v.numpy() for v in trial.model.variables]
        for variable, value in zip(trial.model.variables, start):  # the same head initialisation
            variable.assign(value)
        with Interruption(io.StringIO()) as interrupt:
            scores = trial.train(interrupt)
        answers = {path.name: json.loads(path.read_text())
                   for path in Path(config.results_dir).glob("*_qa/*_preds.json")}
        trained[name] = (trial.strategy.num_replicas_in_sync, [v.numpy() for v in trial.model.variables], scores,
                         answers)
    (n1, one, one_scores, one_answers), (n2, mirrored, mirrored_scores, mirrored_answers) = trained.values()
    print(f"RESULT {case} " + json.dumps({
        "replicas": [n1, n2], "moved": max(float(np.abs(a - b).max()) for a, b in zip(one, start)),
        "difference": max(float(np.abs(a - b).max()) for a, b in zip(one, mirrored)),
        "scores": [one_scores, mirrored_scores], "answers": [one_answers, mirrored_answers]}), flush=True)
"""
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
# float32 rounding: the replicas' gradients are summed in another order than one device's batch
WEIGHT_TOLERANCE = 1e-5


# SQuAD 1.1: 24 questions of each file, in windows of 128 tokens; batches of 15 and 25 windows
# split over the replicas as above. SQuAD comes last: the answers read are its run's alone.
CASES = {"mrpc-sum": {"task_names": ["mrpc"]}, "mrpc-mean": {"task_names": ["mrpc"], "loss_reduction": "mean"},
         # each replica's rows in 3 micro-batches (7 rows: 2, 2, 3; 8: 2, 3, 3; the last batch's 3: 1, 1, 1)
         "mrpc-accumulated": {"task_names": ["mrpc"], "gradient_accumulation_steps": 3},
         "chunk": {"task_names": ["chunk"]},
         "squad": {"task_names": ["squadv1"], "max_seq_length": 128, "max_examples": 24}}
TASK_FILES = {"chunk": {"train.txt": ("conll2000", "train.txt"), "dev.txt": ("conll2000", "test.txt")},
              "squadv1": {"train.json": ("squad", "train-v1.1-subset-44articles.json"),
                          "dev.json": ("squad", "dev-v1.1.json")}}


@pytest.fixture(scope="module")
def two_replica_results(data_dir, shared_data) -> dict:  # noqa: F811
    """{case: the SCRIPT's result}, all the cases in one fresh process."""
    for task, files in TASK_FILES.items():
        folder = data_dir / "finetuning_data" / task
        if not folder.exists():
            folder.mkdir()
            for name, (dataset, source) in files.items():
                (folder / name).symlink_to(shared_data / dataset / source)
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    base = {"model_size": "tiny", "max_seq_length": 32, "train_batch_size": 15, "eval_batch_size": 25,
            "max_examples": 48, "num_train_epochs": 1.0, "learning_rate": 1e-3, "iterations_per_loop": 100,
            "model_hparam_overrides": NO_DROPOUT}
    cases = {case: {**base, **values} for case, values in CASES.items()}
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(data_dir), json.dumps(cases)], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    lines = [line.split(" ", 2)[1:] for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    return {case: json.loads(text) for case, text in lines}


@pytest.mark.parametrize("case", CASES)
def test_two_replicas_train_the_one_device_model(two_replica_results, case):
    values, result = CASES[case], two_replica_results[case]
    assert result["replicas"] == [1, 2]
    assert result["moved"] > 100 * WEIGHT_TOLERANCE  # training changed the weights far more than the tolerance
    assert result["difference"] <= WEIGHT_TOLERANCE, result
    one, mirrored = result["scores"]
    task = values["task_names"][0]
    for metric, value in one[task].items():
        tolerance = 1e-4 if metric == "loss" else 0.0  # the same predictions: the same counts
        assert mirrored[task][metric] == pytest.approx(value, abs=tolerance), (metric, one, mirrored)
    one_answers, mirrored_answers = result["answers"]
    assert one_answers == mirrored_answers
    assert len(one_answers.get(f"{task}_preds.json", {})) == (24 if task == "squadv1" else 0)


def test_the_strategy_hparam_runs_a_trial_or_is_one_clear_error(data_dir, capsys):  # noqa: F811
    code, out, err = run_cli(data_dir, capsys, task_names=["mrpc"], strategy="one_device")
    assert code == 0, err
    assert "[trial 1] epoch 1.00 dev: mrpc accuracy" in out
    code, _, err = run_cli(data_dir, capsys, task_names=["mrpc"], strategy="tpu")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert ("strategy 'tpu' is not one of: None, auto, one_device, mirrored, multi_worker (tpu fine-tuning is "
            "not supported yet)") in err
    os.environ.pop("TF_CONFIG", None)
    code, _, err = run_cli(data_dir, capsys, task_names=["mrpc"], strategy="multi_worker")
    assert code == 2 and err == ("error: strategy multi_worker needs the TF_CONFIG environment variable (cluster "
                                 "and task of this worker)\n")
