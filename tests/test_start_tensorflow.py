"""`electra_tf.cli.start_tensorflow`, what every script does once its flags are parsed."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_sigterm_unwinds_a_prediction_script(tmp_path):
    """`start_tensorflow(sigterm_unwinds=True)` (predict.py, fill_mask.py): SIGTERM exits 143 through
    the job's `finally` blocks, where a staged output file is removed."""
    marker = tmp_path / "unwound"
    script = ("import os, signal, sys, time\n"
              "from electra_tf.cli import start_tensorflow\n"
              "start_tensorflow(sigterm_unwinds=True)\n"
              "try:\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "    time.sleep(30)\n"
              "finally:\n"
              f"    open({str(marker)!r}, 'w').close()\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 143, done.stderr
    assert marker.exists()
