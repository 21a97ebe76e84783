"""The benchmarks' pure helpers (no timing): how peers are grouped in pairs, the per-pair ratios,
that worker processes end whatever ends a benchmark, and the float32 fact serving.py's HF export
rests on, and that mlm_peer_curve.py's masking and schedule are the original's (§5.1, §7)."""

import os

import numpy as np
import pytest

from benchmarks.finetune_throughput import pair_ratios
from benchmarks.mlm_peer_curve import SLOTS, learning_rate, mask, our_windows
from benchmarks.peers import Worker, pair_groups, run_groups
from benchmarks.serving import SHIFT

# A worker in plain Python: ready at once, then answers each step with 0.5 s (or, with --bad, a
# line the driver cannot read).
FAKE_WORKER = """import sys
print("@@ 0 0.01", flush=True)
for line in sys.stdin:
    print("@@ not-a-number" if "--bad" in sys.argv else "@@ 0.5 0.01", flush=True)
"""


def test_pair_groups_put_ours_beside_each_peer_or_run_each_alone():
    assert pair_groups(["ours", "hf", "mg"]) == [["ours", "hf"], ["ours", "mg"]]
    assert pair_groups(["hf", "ours"]) == [["ours", "hf"]]
    assert pair_groups(["hf", "mg"]) == [["hf"], ["mg"]]
    assert pair_groups(["ours"]) == [["ours"]]


def test_pair_ratios_are_the_peers_seconds_over_ours():
    times = {"ours": [1.0, 2.0, 1.0], "hf": [3.0, 4.0, 5.0]}
    ratios = pair_ratios(times, "hf")
    assert ratios["total"] == pytest.approx(12.0 / 4.0)
    assert (ratios["min"], ratios["median"], ratios["max"]) == pytest.approx((2.0, 3.0, 5.0))


def test_gelu_is_the_identity_past_the_shift_in_float32():
    """HF's classifier head is dense -> GELU -> dense; serving.py writes the first dense as the
    identity plus SHIFT, which GELU must pass unchanged for any [CLS] feature above -10."""
    torch = pytest.importorskip("torch")
    x = torch.linspace(-9.99, 60.0, 200001, dtype=torch.float32) + SHIFT
    np.testing.assert_array_equal(torch.nn.functional.gelu(x).numpy(), x.numpy())


@pytest.mark.parametrize("failure", [None, "unreadable answer", "peer cannot start"])
def test_every_started_worker_ends_whatever_ends_the_benchmark(tmp_path, failure):
    script = tmp_path / "benchmarks" / "fake_worker.py"
    script.parent.mkdir()
    script.write_text(FAKE_WORKER)
    workers = []

    def start(variant):
        if failure == "peer cannot start" and variant == "peer":
            raise RuntimeError("the peer's build failed")
        bad = failure == "unreadable answer" and variant == "peer"
        workers.append(Worker(str(script), variant, ["--bad"] if bad else [], dict(os.environ)))
        return workers[-1]

    try:
        if failure is None:
            results = run_groups([["ours", "peer"]], start, steps=2, label="test")
            assert results[0]["times"] == {"ours": [0.5, 0.5], "peer": [0.5, 0.5]} and len(results[0]["gemm"]) == 4
        else:
            with pytest.raises(ValueError if failure == "unreadable answer" else RuntimeError):
                run_groups([["ours", "peer"]], start, steps=2, label="test")
        started = ["gemm", "ours"] if failure == "peer cannot start" else ["gemm", "ours", "peer"]
        assert [worker.variant for worker in workers] == started
        assert all(worker.proc.poll() is not None for worker in workers), "a worker outlived the benchmark"
    finally:
        for worker in workers:
            if worker.proc.poll() is None:
                worker.proc.kill()
                worker.proc.wait()


def test_peer_curve_masks_as_the_original():
    """Slots per row max(1, min(19, round(0.15 x real tokens))), drawn with replacement among the
    real non-special tokens; 85 % of the slots become [MASK], the others keep the token."""
    vocab = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[MASK]": 3}
    rng = np.random.default_rng(0)
    lengths = np.array([128, 40, 5] * 200)
    ids = np.zeros((len(lengths), 128), np.int64)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(10, 100, length)
        ids[row, [0, length // 2, length - 1]] = [1, 2, 2]  # [CLS] a [SEP] b [SEP]
    batch = {"input_ids": ids, "input_mask": (np.arange(128)[None, :] < lengths[:, None]).astype(np.int64)}
    masked, positions, targets, weights = mask(batch, vocab, np.random.default_rng(1))
    assert positions.shape == weights.shape == (len(lengths), SLOTS) == (600, 19)
    np.testing.assert_array_equal(weights.sum(1), np.tile([19, 6, 1], 200))  # round(6.0), max(1, round(0.75))
    assert np.all(np.take_along_axis(ids, positions, 1) >= 10)  # never [CLS], [SEP] or padding
    np.testing.assert_array_equal(targets, np.take_along_axis(ids, positions, 1))
    # A position drawn by several slots is [MASK] if any of them chose it (the original scatters
    # [MASK] at the chosen slots only), so count positions drawn once, in the long rows.
    long = positions[lengths == 128]
    once = [(row, p) for row, line in enumerate(long) for p in line if (line == p).sum() == 1]
    share = np.mean([masked[3 * row, p] == 3 for row, p in once])  # long rows are rows 0, 3, 6, ...
    assert len(once) > 3000 and 0.82 < share < 0.88  # 0.85 within 5 sigma
    untouched = np.ones_like(ids, bool)
    np.put_along_axis(untouched, positions, False, 1)
    np.testing.assert_array_equal(masked[untouched], ids[untouched])
    duplicates = sum(len(row) - len(set(row)) for row in positions[lengths == 5])
    assert duplicates > 0  # with replacement: 19 draws among 2 candidates repeat


def test_peer_curve_schedule_and_log_windows(tmp_path):
    assert learning_rate(0, 1e-3, 199, 3312) == 0.0
    assert learning_rate(99, 1e-3, 199, 3312) == pytest.approx(1e-3 * 99 / 199)
    assert learning_rate(199, 1e-3, 199, 3312) == pytest.approx(1e-3 * (1 - 199 / 3312))
    log = tmp_path / "stage1.log"
    log.write_text("step 50/3312 (1.5%) loss 7.9 masked_lm_loss 7.93 masked_lm_accuracy 0.0433 | x\n"
                   "step 50/40 (9%) loss 1 masked_lm_loss 1.0 masked_lm_accuracy 0.5 | another run\n"
                   "step 50/3312 (1.5%) loss 7.0 masked_lm_loss 7.01 masked_lm_accuracy 0.05 | resumed\n")
    assert our_windows(str(log), 3312) == {50: (7.93, 0.0433)}
