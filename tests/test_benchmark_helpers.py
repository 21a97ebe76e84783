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


def peer_batch(lengths):
    """Rows of the given lengths: [CLS] a [SEP] b [SEP] with ids 10-99 for the words."""
    rng = np.random.default_rng(0)
    ids = np.zeros((len(lengths), 128), np.int64)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(10, 100, length)
        ids[row, [0, length // 2, length - 1]] = [1, 2, 2]
    return {"input_ids": ids, "input_mask": (np.arange(128)[None, :] < lengths[:, None]).astype(np.int64)}


@pytest.mark.parametrize("with_replacement", [False, True])
def test_peer_curve_masks_as_the_original(with_replacement):
    """Used slots per row max(1, min(19, round(0.15 x real tokens))), at real non-special tokens
    (distinct ones without replacement, as the pilots pin); only used slots can become [MASK], 85 % of
    them; everything else keeps its token."""
    vocab = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[MASK]": 3}
    lengths = np.array([128, 40, 5] * 200)
    batch = peer_batch(lengths)
    ids = batch["input_ids"]
    masked, positions, targets, weights = mask(batch, vocab, np.random.default_rng(1), with_replacement)
    assert positions.shape == weights.shape == (600, SLOTS) == (600, 19)
    # round(6.0) = 6 and max(1, round(0.75)) = 1 for the 40- and 5-token rows
    np.testing.assert_array_equal(weights.sum(1), np.tile([19, 6, 1], 200))
    used = weights > 0
    rows = np.nonzero(used)[0]
    assert np.all(ids[rows, positions[used]] >= 10)  # never [CLS], [SEP] or padding
    np.testing.assert_array_equal(targets, np.take_along_axis(ids, positions, 1))
    at_used = np.zeros_like(ids, bool)
    at_used[rows, positions[used]] = True
    np.testing.assert_array_equal(masked[~at_used], ids[~at_used])  # unused slots mask nothing
    assert np.all((masked == 3).sum(1) <= weights.sum(1))
    # A position drawn by several slots is [MASK] if any of them chose it (the original scatters
    # [MASK] at the chosen slots only), so count positions drawn once, in the long rows.
    once = [(row, p) for row in range(0, 600, 3) for p in positions[row] if (positions[row] == p).sum() == 1]
    share = np.mean([masked[row, p] == 3 for row, p in once])
    assert len(once) > 3000 and 0.82 < share < 0.88  # 0.85 within 5 sigma
    duplicates = sum(len(set(line[w > 0])) < int(w.sum()) for line, w in zip(positions, weights))
    assert (duplicates > 0) == with_replacement  # 19 draws among 124 candidates repeat now and then


def test_peer_curve_schedule_is_our_optimizers():
    """§7: linear decay from step 0 times min(1, step / warmup), as PolynomialDecayWithWarmup."""
    from electra_tf.optimization import PolynomialDecayWithWarmup
    ours = PolynomialDecayWithWarmup(1e-3, 3312, warmup_steps=199)
    for step in (0, 49, 99, 199, 1000, 3312):
        assert learning_rate(step, 1e-3, 199, 3312) == pytest.approx(float(ours(step)), rel=1e-6, abs=1e-12)


def test_peer_curve_reads_only_one_runs_full_windows(tmp_path):
    """Our metrics restart with each segment, so a segment's first line (and the first after a
    resume) can cover fewer steps than the window: only full windows of the named run count."""
    def line(step, loss):
        return f"step {step}/300 (x%) loss {loss} masked_lm_loss {loss} masked_lm_accuracy 0.1 | x"
    log = tmp_path / "stage1.log"
    log.write_text("\n".join([
        "@@start s1/pilot_b/pretrain/75 0.0", line(50, 9.0), "@@end s1/pilot_b/pretrain/75 1.0",
        "@@start s1/pilot_a/pretrain/75 0.0", line(50, 7.0), "@@end s1/pilot_a/pretrain/75 1.0",
        "@@start s1/pilot_a/pretrain/300 0.0", line(100, 6.9), line(150, 6.8), line(200, 6.7),
        "@@start s1/pilot_a/pretrain/300 0.0", "resuming from /m/pilot_a/ckpt-180", line(200, 6.6), line(250, 6.5),
        "@@end s1/pilot_a/pretrain/300 2.0"]) + "\n")
    assert our_windows(str(log), "s1/pilot_a", 50) == {50: (7.0, 0.1), 150: (6.8, 0.1), 200: (6.7, 0.1),
                                                        250: (6.5, 0.1)}
