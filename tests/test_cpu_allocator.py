"""The run scripts' pooled CPU allocator: on unless the user chose, and it stops the per-step page
faults of TensorFlow's default CPU allocator (13 % of an ELECTRA-Small step's CPU time)."""

import os
import subprocess
import sys
from pathlib import Path

from electra_tf.cli import use_pooled_cpu_allocator

REPO = Path(__file__).resolve().parents[1]
VARIABLE = "TF_CPU_ALLOCATOR_USE_BFC"


def test_on_by_default_and_the_users_choice_wins(monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    use_pooled_cpu_allocator()
    assert os.environ[VARIABLE] == "true"
    monkeypatch.setenv(VARIABLE, "false")
    use_pooled_cpu_allocator()
    assert os.environ[VARIABLE] == "false"


def page_faults_per_step(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    env.pop(VARIABLE, None)
    out = subprocess.run([sys.executable, str(REPO / "tests" / "scripts" / "allocator_page_faults.py"), *args],
                         env=env, capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1])


def test_pooled_allocator_stops_the_page_faults_of_each_step():
    default, pooled = page_faults_per_step(), page_faults_per_step("pooled")
    # Default: thousands of fresh 4 KB pages per step (about 20k seen); pooled: the pool's pages are reused.
    assert default > 2000, default
    assert pooled < default / 20, (pooled, default)
