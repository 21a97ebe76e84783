"""Crash-safe resume, with real processes: a deterministic run killed with SIGKILL after its first
checkpoint, then restarted, ends with exactly the weights of a run that was never interrupted; the
restart takes over the dead run's model-dir lock with a notice (the one-writer refusal itself:
test_second_writer.py). Multi-worker pretraining: test_pretraining_workers.py."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf

from process_helpers import REPO, pretraining_hparams


def hparams(**values):
    return pretraining_hparams(**{"num_train_steps": 30, "deterministic": True, **values})


def environment(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO), **extra)
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def run_pretraining(data_dir, name, stderr=subprocess.STDOUT):
    command = [sys.executable, str(REPO / "run_pretraining.py"), "--data-dir", str(data_dir),
               "--model-name", name, "--hparams", hparams()]
    return subprocess.Popen(command, env=environment(), stdout=subprocess.PIPE, stderr=stderr, text=True)


def model_variables(checkpoint_prefix):
    """{name: value} of the model's variables in a checkpoint (optimizer slots and iterator aside)."""
    reader = tf.train.load_checkpoint(checkpoint_prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.startswith("model/") and "OPTIMIZER_SLOT" not in name}


def test_killed_run_resumes_to_the_same_weights_and_takes_over_its_lock(pretraining_data_dir):
    models = pretraining_data_dir / "models"
    full = run_pretraining(pretraining_data_dir, "uninterrupted")
    output = full.communicate(timeout=600)[0]
    assert full.returncode == 0, output

    crashed = run_pretraining(pretraining_data_dir, "crashed")
    model_dir = models / "crashed"
    state = model_dir / "checkpoint"  # names a checkpoint only once it is complete

    def saved():
        return state.exists() and 'model_checkpoint_path: "ckpt-' in state.read_text()

    deadline = time.monotonic() + 300
    while not saved() and crashed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    crashed.send_signal(signal.SIGKILL)
    crashed.communicate(timeout=60)
    assert crashed.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    assert not (model_dir / "ckpt-30.index").exists()
    holder = json.loads((model_dir / ".lock").read_text())  # left behind, naming the dead process
    assert holder["pid"] == crashed.pid

    resumed = run_pretraining(pretraining_data_dir, "crashed", stderr=subprocess.PIPE)  # stdout alone
    output, errors = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, output + errors
    assert (f"taking over the lock of model dir {model_dir} from a process that is gone (pid {crashed.pid} "
            f"on {holder['host']}, started {holder['started']}): it was killed or its machine restarted") in output
    assert int(re.search(rf"resuming from {re.escape(str(model_dir))}/ckpt-(\d+)", output).group(1)) >= 10
    assert not (model_dir / ".lock").exists()
    expected = model_variables(str(models / "uninterrupted" / "ckpt-30"))
    actual = model_variables(str(model_dir / "ckpt-30"))
    assert expected.keys() == actual.keys() and len(expected) > 20
    for name, value in expected.items():
        np.testing.assert_array_equal(actual[name], value, err_msg=name)
