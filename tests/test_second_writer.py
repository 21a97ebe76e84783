"""One writer per model dir, with real run_pretraining.py processes: the same command started while
a run trains is refused at once with one line naming the dir and the holder, and the first run goes
on unharmed, its checkpoints one lineage. After a run is killed with SIGKILL, its lock is taken over
with a notice and the same command resumes: test_resume_and_workers.py's killed run checks that (a
killed run resumed to an uninterrupted run's weights, the same processes)."""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from process_helpers import REPO, pretraining_hparams


class Run:
    """A run_pretraining.py process whose stdout and stderr lines are collected as they come."""

    def __init__(self, data_dir, name, **values):
        command = [sys.executable, str(REPO / "run_pretraining.py"), "--data-dir", str(data_dir), "--model-name",
                   name, "--hparams", pretraining_hparams(**values)]
        env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_CONFIG")}
        self.process = subprocess.Popen(command, env=dict(env, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        self.out, self.err = [], []
        self.readers = [threading.Thread(target=lines.extend, args=(stream,), daemon=True)
                        for lines, stream in ((self.out, self.process.stdout), (self.err, self.process.stderr))]
        for reader in self.readers:
            reader.start()

    def steps(self):
        return [int(m) for m in re.findall(r"^step (\d+)/", "".join(self.out), flags=re.M)]

    def wait_for_step(self, step):
        deadline = time.monotonic() + 300
        while not [s for s in self.steps() if s >= step]:
            assert self.process.poll() is None and time.monotonic() < deadline, "".join(self.out + self.err)[-3000:]
            time.sleep(0.05)

    def finish(self, signum=None):
        if signum is not None:
            self.process.send_signal(signum)
        try:
            self.process.wait(timeout=300)
        finally:
            self.process.kill()
        for reader in self.readers:
            reader.join(timeout=10)
        return self.process.returncode, "".join(self.out), "".join(self.err)


LONG = dict(num_train_steps=100000, save_checkpoints_steps=10, log_every=5, keep_checkpoint_max=0)


def test_a_second_run_on_the_same_model_dir_is_refused_and_the_first_goes_on(pretraining_data_dir):
    model_dir = pretraining_data_dir / "models" / "twice"
    first = Run(pretraining_data_dir, "twice", **LONG)
    try:
        first.wait_for_step(10)
        code, out, err = Run(pretraining_data_dir, "twice", **LONG).finish()
        assert code == 1 and out == "", out + err
        refusal = re.fullmatch(rf"error: model dir {re.escape(str(model_dir))} is in use by another process \(pid "
                               rf"(\d+) on {re.escape(socket.gethostname())}, started (\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d "
                               r"\w+)\); this one stopped without writing there. Wait for it to end, or stop it and run "
                               r"this command again\n", err)
        assert refusal and int(refusal.group(1)) == first.process.pid, err
        reached = max(first.steps())
        first.wait_for_step(reached + 10)  # still training: a checkpoint later
    finally:
        code, out, err = first.finish(signal.SIGTERM)
    assert code == 128 + signal.SIGTERM, err
    stopped = int(re.search(r"training stopped by SIGTERM at step (\d+);", err).group(1))
    # a line every 5 steps, and the partial window's at the stop (it lands after any step, not only a 5th)
    assert "resuming" not in out and first.steps() == sorted({*range(5, stopped + 1, 5), stopped})
    # one lineage: the first run's checkpoints, every 10 steps and the one of the stop, listed in order
    saved = sorted({*range(10, stopped + 1, 10), stopped})
    state = (model_dir / "checkpoint").read_text()
    assert re.findall(r'all_model_checkpoint_paths: "ckpt-(\d+)"', state) == [str(s) for s in saved]
    assert sorted(int(p.name[5:-6]) for p in model_dir.glob("ckpt-*.index")) == saved
    assert not (model_dir / ".lock").exists()
