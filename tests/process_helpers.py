"""Shared by the tests that run the CLIs as real processes: a tiny pretraining config, and a process
signalled once its output shows it is working."""

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, List, Tuple

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


def report_then_sleep(seconds: float) -> None:
    """A data-build worker's job (`pretrain_data.build`'s pool) that says its pid on the build's
    progress queue, once the worker's initializer has run, then sleeps."""
    import os
    from pretrain_data import build
    build._progress_queue.put(os.getpid())
    time.sleep(seconds)
