"""Multi-worker fine-tuning on MRPC with real processes: two workers of a MultiWorkerMirroredStrategy
run (TF_CONFIG on 127.0.0.1, free ports) as run_finetuning.py runs them.

- They end with identical weights, those a one-device run reaches with the same global batch and
  start (dropout off), and score dev the same; only the chief writes (model dir, results), the
  other leaves nothing behind in its temp dir.
- SIGTERM to one worker: both save the same step through TF's PreemptionCheckpointHandler and
  stop; restarted, both resume there. Then the chief killed: the other stops with one error line
  at once (the connection closes) instead of hanging.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from process_helpers import REPO, Cluster
from test_finetuning import data_dir  # noqa: F401 (MRPC and a tiny pretrained model)

WORKER = REPO / "tests" / "scripts" / "finetune_worker.py"
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
WEIGHT_TOLERANCE = 1e-5  # float32 rounding: the workers' gradients are summed in another order


def hparams(root, **values) -> str:
    """A tiny MRPC run writing under `root`: 64 rows a file, 8 steps of a global batch of 16 (MRPC's
    pairs are trained both ways), dev in batches of 25 (the last, of 14, split 7/7)."""
    return json.dumps({"task_names": ["mrpc"], "model_size": "tiny", "max_seq_length": 32, "train_batch_size": 16,
                       "eval_batch_size": 25, "max_examples": 64, "num_train_epochs": 1.0, "learning_rate": 1e-3,
                       "iterations_per_loop": 1, "model_hparam_overrides": NO_DROPOUT,
                       "finetuning_models_dir": str(root / "models"), "results_dir": str(root / "results"), **values})


def environment(**extra) -> dict:
    """This environment without TF_CONFIG and the log level (the CLI picks it as for a user), plus `extra`."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "-1"}
    env.pop("TF_CONFIG", None)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    return {**env, **extra}


def test_two_workers_train_the_one_device_model(data_dir, tmp_path):  # noqa: F811
    start = tmp_path / "start.npz"
    one_device = subprocess.Popen([sys.executable, str(WORKER), str(data_dir), hparams(tmp_path / "one"), str(start),
                                   str(tmp_path / "one_")], env=environment(TF_CPP_MIN_LOG_LEVEL="2"), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300  # the workers start from its weights, written before it trains
        while not start.exists():
            assert one_device.poll() is None and time.monotonic() < deadline, one_device.communicate()[0][-3000:]
            time.sleep(0.1)
        scratch = tmp_path / "tmp"  # the workers' temp dir
        scratch.mkdir()
        cluster = Cluster([sys.executable, str(WORKER), str(data_dir), hparams(tmp_path / "two", strategy="multi_worker"),
                           str(start), str(tmp_path / "worker{index}_")],
                          environment(TMPDIR=str(scratch), TF_CPP_MIN_LOG_LEVEL="2"))
        codes = cluster.exit_codes(timeout=600)
        output = one_device.communicate(timeout=600)[0]
    finally:
        one_device.kill()
    assert one_device.returncode == 0, output[-3000:]
    assert codes == [0, 0], cluster.output(0)[-3000:] + cluster.output(1)[-3000:]

    one, initial = np.load(tmp_path / "one_1.npz"), np.load(start)
    workers = [np.load(tmp_path / f"worker{index}_1.npz") for index in range(2)]
    assert len(one.files) > 30
    assert max(float(np.abs(one[name] - initial[name]).max()) for name in one.files) > 100 * WEIGHT_TOLERANCE
    for name in one.files:
        np.testing.assert_array_equal(workers[0][name], workers[1][name], err_msg=name)
        np.testing.assert_allclose(workers[0][name], one[name], rtol=0, atol=WEIGHT_TOLERANCE, err_msg=name)

    expected = json.loads((tmp_path / "one" / "results" / "mrpc_results.json").read_text())["trials"][0]["mrpc"]
    scores = json.loads((tmp_path / "two" / "results" / "mrpc_results.json").read_text())["trials"][0]["mrpc"]
    assert scores["accuracy"] == expected["accuracy"] and scores["f1"] == expected["f1"]  # the same predictions
    assert scores["loss"] == pytest.approx(expected["loss"], abs=1e-5)
    for index in range(2):
        assert "[trial 1] train: 8/8 steps" in cluster.output(index)
        assert "mrpc accuracy" in cluster.output(index)
    model_dir = tmp_path / "two" / "models" / "mrpc_model_1"
    assert sorted(path.name for path in model_dir.iterdir()) == sorted(
        path.name for path in (tmp_path / "one" / "models" / "mrpc_model_1").iterdir())
    assert list((model_dir / "tensorboard" / "train").iterdir())  # the chief's events
    assert list(scratch.iterdir()) == []  # the other worker's copies are gone


def test_signalled_or_lost_worker(data_dir, tmp_path):  # noqa: F811
    """SIGTERM to the second worker: TF's PreemptionCheckpointHandler makes both save the same step of
    the trial and stop; both restarted resume there. Then the chief killed: the other stops with one
    error line, at once (its connection to the chief closes), instead of hanging."""
    values = hparams(tmp_path, strategy="multi_worker", max_examples=400)  # 50 steps
    command = [sys.executable, str(REPO / "run_finetuning.py"), "--data-dir", str(data_dir), "--model-name", "tiny",
               "--hparams", values]
    model_dir = tmp_path / "models" / "mrpc_model_1"
    cluster = Cluster(command, environment())
    try:
        cluster.wait_for(lambda: "train: 3/50 steps" in cluster.output(1), "no training step")
        cluster.processes[1].send_signal(signal.SIGTERM)
        codes = cluster.exit_codes(timeout=120)
    finally:
        cluster.kill()
    outputs = [cluster.output(index) for index in range(2)]
    assert codes == [128 + signal.SIGTERM] * 2, outputs[0][-3000:] + outputs[1][-3000:]
    stopped = [re.search(r"^stopped: training stopped by (.+) at step (\d+); the checkpoint is (\S+)\. Run the same "
                         r"command again to resume$", output, flags=re.M) for output in outputs]
    assert stopped[0] and stopped[1], outputs[0][-3000:] + outputs[1][-3000:]
    assert stopped[0].group(1) == "a signal to another worker" and stopped[1].group(1) == "SIGTERM"
    step = int(stopped[0].group(2))
    assert stopped[1].group(2) == str(step) and 3 <= step < 50
    assert stopped[0].group(3) == stopped[1].group(3) == str(model_dir / "interrupted")
    assert json.loads((model_dir / "interrupted.json").read_text())["step"] == step
    assert not (tmp_path / "results" / "mrpc_results.json").exists()

    cluster = Cluster(command, environment())
    try:
        cluster.wait_for(lambda: f"train: {step + 3}/50 steps" in cluster.output(1), "no step after resuming")
        cluster.processes[0].kill()
        codes = cluster.exit_codes(timeout=120)
    finally:
        cluster.kill()
    output = cluster.output(1)
    for index in range(2):
        assert f"[trial 1] resuming at step {step} from {model_dir / 'interrupted'}" in cluster.output(index)
    assert codes == [-signal.SIGKILL, 1], output[-3000:]
    assert re.search(r"^error: another worker of the cluster stopped or became unreachable \(.+\)\. Restart all 2 "
                     r"workers to run again: it starts from its first trial \(only a stop by SIGTERM keeps a point "
                     r"to resume from\)$", output, flags=re.M), output[-3000:]
    assert "Traceback" not in output
    assert len([line for line in output.splitlines() if "error" in line.lower()]) == 1, output[-3000:]
