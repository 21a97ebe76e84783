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
    """The script's median page faults a step, with glibc's mmap threshold fixed at 128 KB: TF's
    default allocator then gets every large buffer from a fresh mmap and returns it at free, as it
    does on some machines anyway (glibc's dynamic threshold decides otherwise on others), so the
    unpooled run faults its temporaries in every step wherever the test runs. oneDNN's kernels are
    off, as on CPUs without AVX-512 VNNI or AMX: where TensorFlow turns them on by default, this
    step faulted in no page a step even unpooled (an AVX-512 EPYC, 2026-12-01: 0 against 36,872
    with them off), so the control below would read nothing there."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO), MALLOC_MMAP_THRESHOLD_="131072",
               TF_ENABLE_ONEDNN_OPTS="0")
    env.pop(VARIABLE, None)
    out = subprocess.run([sys.executable, str(REPO / "tests" / "scripts" / "allocator_page_faults.py"), *args],
                         env=env, capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1])


def test_with_the_pool_a_step_faults_in_no_new_pages():
    # After warm-up, the pool's pages are reused step after step. Without it the step's eight
    # temporaries (4-32 MB, 144 MB in all: 36,864 pages of 4 KB) are faulted in again every step
    # (measured: 36,872); the bound alone passed without the pool where glibc kept the buffers.
    unpooled = page_faults_per_step("unpooled")
    pooled = [page_faults_per_step("pooled") for _ in range(2)]
    assert unpooled > 30_000 and max(pooled) < 50, (unpooled, pooled)
