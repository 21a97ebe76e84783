"""Shared by the tests that run the CLIs as real processes: a tiny pretraining config, and a process
signalled once its output shows it is working."""

import json
import os
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
                timeout: float = 300) -> Tuple[int, str, str]:
    """Runs `command`, sends it `signum` once `ready(stdout line)` holds for a line, waits for it to
    end; returns (exit code, stdout, stderr). The process is killed if anything fails on the way."""
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
        process.send_signal(signum)
        process.wait(timeout=timeout)
    finally:
        process.kill()
    for reader in readers:
        reader.join(timeout=10)
    return process.returncode, "".join(out), "".join(err)


FRESH_SERVE = """
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # its ops, which the graph uses
assert not any(name.split(".")[0] in ("electra_tf", "finetune") for name in sys.modules)
job = json.load(open(sys.argv[1], encoding="utf-8"))
signature = tf.saved_model.load(job["model"]).signatures[job["signature"]]
out = signature(**{name: tf.constant(values) for name, values in job["inputs"].items()})
np.savez(job["output"], **{name: value.numpy().astype(str) if value.dtype == tf.string else value.numpy()
                           for name, value in out.items()})
"""


def serve_in_fresh_process(saved_model, inputs: dict, work_dir: Path, signature: str = "serving_default") -> dict:
    """The outputs ({name: array}) of a SavedModel's `signature` on `inputs` ({name: list}), computed
    in a new process that imports TensorFlow and tensorflow-text only (not this project)."""
    job = work_dir / f"fresh_{signature}.json"
    output = work_dir / f"fresh_{signature}.npz"
    job.write_text(json.dumps({"model": str(saved_model), "signature": signature, "inputs": inputs,
                               "output": str(output)}), encoding="utf-8")
    subprocess.run([sys.executable, "-c", FRESH_SERVE, str(job)], check=True, capture_output=True, cwd=work_dir,
                   env={**os.environ, "PYTHONPATH": ""})
    return dict(np.load(output))
