"""Shared by the tests that run the CLIs as real processes: a tiny pretraining config, a process
signalled once its output shows it is working, and a local cluster of workers (TF_CONFIG on
127.0.0.1, free ports)."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, List, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def pretraining_hparams(**values) -> str:
    """--hparams of a tiny pretraining run on the 64-token test records, checkpoints every 10 steps."""
    base = dict(model_size="tiny", max_seq_length=64, train_batch_size=16, num_train_steps=20, num_warmup_steps=5,
                learning_rate=2e-3, save_checkpoints_steps=10, log_every=10, iterations_per_loop=5, do_eval=False)
    base.update(values)
    return json.dumps(base)


def signal_when(command: List[str], env: dict, ready: Callable[[str], bool], signum: int,
                timeout: float = 300, delay: float = 0.0) -> Tuple[int, str, str]:
    """Runs `command`, sends it `signum` `delay` seconds after `ready(stdout line)` holds for a line,
    waits for it to end; returns (exit code, stdout, stderr). The process is killed if anything
    fails on the way."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: List[str] = []
    err: List[str] = []
    readers = [threading.Thread(target=lines.extend, args=(stream,), daemon=True)
               for lines, stream in ((out, process.stdout), (err, process.stderr))]
    for reader in readers:
        reader.start()
    try:
        deadline = time.monotonic() + timeout
        while not any(map(ready, list(out))) and process.poll() is None:
            assert time.monotonic() < deadline, "never ready: " + "".join(out)[-2000:]
            time.sleep(0.05)
        time.sleep(delay)
        process.send_signal(signum)
        process.wait(timeout=timeout)
    finally:
        process.kill()
    for reader in readers:
        reader.join(timeout=10)
    return process.returncode, "".join(out), "".join(err)


def free_ports(count: int) -> List[int]:
    """`count` TCP ports of 127.0.0.1 that were free a moment ago."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def tf_config(workers: List[str], index: int) -> str:
    return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})


class Cluster:
    """Two workers of one MultiWorkerMirroredStrategy run: `command` (where "{index}" becomes the
    worker's index) with TF_CONFIG added to `env`, their output (stdout and stderr) collected."""

    def __init__(self, command: List[str], env: dict, count: int = 2):
        workers = [f"127.0.0.1:{port}" for port in free_ports(count)]
        self.processes, self.outputs = [], [[] for _ in range(count)]
        for index in range(count):
            process = subprocess.Popen([part.replace("{index}", str(index)) for part in command],
                                       env={**env, "TF_CONFIG": tf_config(workers, index)},
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            threading.Thread(target=self.outputs[index].extend, args=(process.stdout,), daemon=True).start()
            self.processes.append(process)

    def output(self, index: int) -> str:
        return "".join(self.outputs[index])

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline and all(p.poll() is None for p in self.processes), \
                f"{what}: {self.output(0)[-2000:]}"
            time.sleep(0.05)

    def exit_codes(self, timeout: float) -> List:
        """Waits for every worker; one still running after `timeout` seconds hangs: it is killed, and
        its returned code is None."""
        codes = []
        for process in self.processes:
            try:
                codes.append(process.wait(timeout=timeout))
            except subprocess.TimeoutExpired:
                process.kill()
                codes.append(None)
        time.sleep(0.5)  # the readers catch the last lines
        return codes

    def kill(self) -> None:
        for process in self.processes:
            process.kill()


def report_then_sleep(seconds: float) -> None:
    """A data-build worker's job (`pretrain_data.build`'s pool) that says its pid on the build's
    progress queue, once the worker's initializer has run, then sleeps."""
    from pretrain_data import build
    build._progress_queue.put(os.getpid())
    time.sleep(seconds)


FRESH_SERVE = """
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # its ops, which the graph uses
assert not any(name.split(".")[0] in ("electra_tf", "finetune") for name in sys.modules)
job = json.load(open(sys.argv[1], encoding="utf-8"))
loaded = tf.saved_model.load(job["model"])
for signature, inputs, output in job["calls"]:
    out = loaded.signatures[signature](**{name: tf.constant(values) for name, values in inputs.items()})
    np.savez(output, **{name: value.numpy().astype(str) if value.dtype == tf.string else value.numpy()
                        for name, value in out.items()})
"""


def serve_signatures_in_fresh_process(saved_model, calls: dict, work_dir: Path) -> dict:
    """{signature: its outputs ({name: array})} of a SavedModel's signatures, each on its inputs
    (`calls`: {signature: {name: list}}), computed in one new process that imports TensorFlow and
    tensorflow-text only (not this project) and loads the SavedModel once."""
    job = work_dir / "fresh_job.json"
    outputs = {signature: work_dir / f"fresh_{signature}.npz" for signature in calls}
    job.write_text(json.dumps({"model": str(saved_model), "calls": [
        [signature, inputs, str(outputs[signature])] for signature, inputs in calls.items()]}), encoding="utf-8")
    subprocess.run([sys.executable, "-c", FRESH_SERVE, str(job)], check=True, capture_output=True, cwd=work_dir,
                   env={**os.environ, "PYTHONPATH": ""})
    return {signature: dict(np.load(output)) for signature, output in outputs.items()}


def served_arrays(outputs: dict) -> dict:
    """A server's outputs ({name: tf.Tensor}) as FRESH_SERVE saves them: numpy arrays, strings as str
    (the fresh process, which imports nothing of this project, does the same in its own lines)."""
    return {name: value.numpy().astype(str) if value.dtype.name == "string" else value.numpy()
            for name, value in outputs.items()}


def serve_in_fresh_process(saved_model, inputs: dict, work_dir: Path, signature: str = "serving_default") -> dict:
    """The outputs ({name: array}) of a SavedModel's `signature` on `inputs` ({name: list}), computed
    in a new process that imports TensorFlow and tensorflow-text only (not this project)."""
    return serve_signatures_in_fresh_process(saved_model, {signature: inputs}, work_dir)[signature]
