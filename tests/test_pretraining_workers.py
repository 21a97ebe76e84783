"""Multi-worker pretraining with real processes: two run_pretraining.py workers of one
MultiWorkerMirroredStrategy run (TF_CONFIG on 127.0.0.1, free ports). Apart from
test_resume_and_workers.py (the one-device killed run) so the two files run on both pytest workers.

- Two local workers end with identical weights, and only the chief writes checkpoints.
- One of two workers signalled: both save the same step and stop; one killed: the other stops with
  an error instead of hanging; restarted, both resume.
"""

import re
import signal
import subprocess
import sys

import numpy as np

from process_helpers import REPO, Cluster, free_ports, tf_config
from test_resume_and_workers import environment, hparams

WORKER = REPO / "tests" / "scripts" / "pretrain_worker.py"


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
