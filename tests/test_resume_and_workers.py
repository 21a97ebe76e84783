"""Crash-safe resume and multi-worker training, with real processes.

- A deterministic run killed with SIGKILL after its first checkpoint, then restarted, ends with
  exactly the weights of a run that was never interrupted.
- Two local workers under MultiWorkerMirroredStrategy (TF_CONFIG on 127.0.0.1) end with identical
  weights, and only the chief writes checkpoints.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "scripts" / "pretrain_worker.py"


def hparams(**values):
    base = dict(model_size="tiny", max_seq_length=64, train_batch_size=16, num_train_steps=60,
                num_warmup_steps=5, learning_rate=2e-3, save_checkpoints_steps=10, log_every=10,
                iterations_per_loop=5, deterministic=True, do_eval=False)
    base.update(values)
    return json.dumps(base)


def environment(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO), **extra)
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def run_pretraining(data_dir, name, **kwargs):
    command = [sys.executable, str(REPO / "run_pretraining.py"), "--data-dir", str(data_dir),
               "--model-name", name, "--hparams", hparams()]
    return subprocess.Popen(command, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, **kwargs)


def model_variables(checkpoint_prefix):
    """{name: value} of the model's variables in a checkpoint (optimizer slots and iterator aside)."""
    reader = tf.train.load_checkpoint(checkpoint_prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.startswith("model/") and "OPTIMIZER_SLOT" not in name}


def test_killed_run_resumes_to_the_same_weights(pretraining_data_dir):
    models = pretraining_data_dir / "models"
    full = run_pretraining(pretraining_data_dir, "uninterrupted")
    output = full.communicate(timeout=600)[0]
    assert full.returncode == 0, output

    crashed = run_pretraining(pretraining_data_dir, "crashed")
    state = models / "crashed" / "checkpoint"  # names a checkpoint only once it is complete

    def saved():
        return state.exists() and 'model_checkpoint_path: "ckpt-' in state.read_text()

    deadline = time.monotonic() + 300
    while not saved() and crashed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    crashed.send_signal(signal.SIGKILL)
    crashed.communicate(timeout=60)
    assert crashed.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    assert not (models / "crashed" / "ckpt-60.index").exists()

    resumed = run_pretraining(pretraining_data_dir, "crashed")
    output = resumed.communicate(timeout=600)[0]
    assert resumed.returncode == 0, output
    assert "resuming from" in output
    expected = model_variables(str(models / "uninterrupted" / "ckpt-60"))
    actual = model_variables(str(models / "crashed" / "ckpt-60"))
    assert expected.keys() == actual.keys() and len(expected) > 20
    for name, value in expected.items():
        np.testing.assert_array_equal(actual[name], value, err_msg=name)


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_two_workers_end_with_identical_weights(pretraining_data_dir, tmp_path):
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    values = hparams(strategy="multi_worker", num_train_steps=20, iterations_per_loop=10)
    processes = []
    for index in range(2):
        tf_config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
        processes.append(subprocess.Popen(
            [sys.executable, str(WORKER), str(pretraining_data_dir), "two_workers", values,
             str(tmp_path / f"worker{index}.npz")],
            env=environment(TF_CONFIG=tf_config), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]
    weights = [np.load(tmp_path / f"worker{index}.npz") for index in range(2)]
    assert len(weights[0].files) > 20
    for name in weights[0].files:
        np.testing.assert_array_equal(weights[0][name], weights[1][name], err_msg=name)
    model_dir = pretraining_data_dir / "models" / "two_workers"
    assert (model_dir / "ckpt-20.index").exists()
    assert not list(model_dir.glob(".worker_*"))  # the other worker's scratch copy is gone
    assert "step 20/20" in outputs[0] and "step 20/20" in outputs[1]
