"""Crash-safe resume and multi-worker training, with real processes.

- A deterministic run killed with SIGKILL after its first checkpoint, then restarted, ends with
  exactly the weights of a run that was never interrupted.
- Two local workers under MultiWorkerMirroredStrategy (TF_CONFIG on 127.0.0.1) end with identical
  weights, and only the chief writes checkpoints.
- One of two workers signalled: both save the same step and stop; one killed: the other stops with
  an error instead of hanging; restarted, both resume.
"""

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf

from process_helpers import REPO, Cluster, free_ports, pretraining_hparams, tf_config

WORKER = REPO / "tests" / "scripts" / "pretrain_worker.py"


def hparams(**values):
    return pretraining_hparams(**{"num_train_steps": 60, "deterministic": True, **values})


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


def test_two_workers_end_with_identical_weights(pretraining_data_dir, tmp_path):
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    values = hparams(strategy="multi_worker", num_train_steps=20, iterations_per_loop=10)
    processes = []
    for index in range(2):
        processes.append(subprocess.Popen(
            [sys.executable, str(WORKER), str(pretraining_data_dir), "two_workers", values,
             str(tmp_path / f"worker{index}.npz")],
            env=environment(TF_CONFIG=tf_config(workers, index)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True))
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


def pretraining_cluster(data_dir, name, values) -> Cluster:
    """Two run_pretraining.py workers of one MultiWorkerMirroredStrategy run."""
    return Cluster([sys.executable, str(REPO / "run_pretraining.py"), "--data-dir", str(data_dir), "--model-name",
                    name, "--hparams", hparams(strategy="multi_worker", **values)], environment())


def test_signalled_or_lost_worker(pretraining_data_dir):
    """SIGTERM to one worker: TF's PreemptionCheckpointHandler makes both save the same step and stop;
    both restarted resume there. A killed worker: the other stops with one error instead of hanging
    (at once when the connection closes, as here; a silent peer within the coordination service's
    heartbeat timeout, measured at 12 s with SIGSTOP); the checkpoints stay for the next restart."""
    model_dir = pretraining_data_dir / "models" / "preempted"
    state = model_dir / "checkpoint"
    values = dict(num_train_steps=100000, save_checkpoints_steps=10, log_every=5, deterministic=False)
    cluster = pretraining_cluster(pretraining_data_dir, "preempted", values)
    try:
        cluster.wait_for(lambda: state.exists() and "ckpt-10" in state.read_text(), "no first checkpoint")
        cluster.processes[1].send_signal(signal.SIGTERM)
        assert cluster.exit_codes(timeout=120) == [128 + signal.SIGTERM] * 2, cluster.output(0)[-3000:]
    finally:
        cluster.kill()
    stopped = [re.search(r"^stopped: training stopped by (.+) at step (\d+); the checkpoint is (\S+)\.",
                         cluster.output(index), flags=re.M) for index in range(2)]
    assert stopped[0] and stopped[1], cluster.output(0)[-3000:] + cluster.output(1)[-3000:]
    assert stopped[0].group(1) == "a signal to another worker" and stopped[1].group(1) == "SIGTERM"
    step = int(stopped[0].group(2))
    assert stopped[1].group(2) == str(step)
    assert stopped[0].group(3) == stopped[1].group(3) == str(model_dir / f"ckpt-{step}")
    assert (model_dir / f"ckpt-{step}.index").exists() and not list(model_dir.glob(".worker_*"))

    cluster = pretraining_cluster(pretraining_data_dir, "preempted", values)
    later = f"ckpt-{(step // 10 + 1) * 10}"
    try:
        cluster.wait_for(lambda: later in state.read_text(), "no checkpoint after the restart")
        cluster.processes[1].kill()
        codes = cluster.exit_codes(timeout=120)
    finally:
        cluster.kill()
    output = cluster.output(0)
    assert f"resuming from {model_dir / f'ckpt-{step}'}" in output
    assert codes == [1, -signal.SIGKILL], output[-3000:]
    assert re.search(r"^error: another worker of the cluster stopped or became unreachable \(.+\)\. Restart all 2 "
                     r"workers to resume from the last checkpoint, \S+ckpt-\d+$", output, flags=re.M), output[-3000:]
    assert "Traceback" not in output
    assert (model_dir / f"{later}.index").exists()  # and restarting resumes from there, as above
