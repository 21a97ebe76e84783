"""The run scripts' pooled CPU allocator: on unless the user chose, and with it a step faults in no
new pages (TensorFlow's default CPU allocator can: 13 % of an ELECTRA-Small step's CPU time on
the AMD EPYC of benchmarks/RESULTS.md)."""

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


def test_with_the_pool_a_step_faults_in_no_new_pages():
    # After warm-up, the pool's pages are reused step after step. TF's default allocator hands large
    # buffers back to the C library; how many pages it then faults in again each step depends on
    # the C library and the kernel (about 20k per step on the 2-core AMD EPYC of
    # benchmarks/RESULTS.md, 0-200 on a Xeon with glibc 2.36), so that side is not asserted.
    pooled = [page_faults_per_step("pooled") for _ in range(2)]
    assert max(pooled) < 50, pooled
