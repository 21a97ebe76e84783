"""The benchmarks' pure helpers (no timing): how peers are grouped in pairs, the per-pair ratios,
and the float32 fact serving.py's HF export rests on."""

import numpy as np
import pytest

from benchmarks.finetune_throughput import pair_ratios
from benchmarks.peers import pair_groups
from benchmarks.serving import SHIFT


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
