"""The benchmarks' helpers (no timing): how peers are grouped in pairs, the per-pair ratios, that
worker processes end whatever ends a benchmark, the float32 fact the HF peers' export
(benchmarks/hf_peer_models.py) rests on, and that this export gives the trial's own logits, as
does the ONNX Runtime peer built on it."""

import os
import time

import numpy as np
import pytest

from benchmarks.finetune_throughput import pair_ratios
from benchmarks.peers import Worker, pair_groups, run_groups
from benchmarks.hf_peer_models import SHIFT, write_hf_classifier

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
    """HF's classifier head is dense -> GELU -> dense; hf_peer_models writes the first dense as the
    identity plus SHIFT, which GELU must pass unchanged for any [CLS] feature above -10."""
    import torch  # a test extra: missing, the test fails
    x = torch.linspace(-9.99, 60.0, 200001, dtype=torch.float32) + SHIFT
    np.testing.assert_array_equal(torch.nn.functional.gelu(x).numpy(), x.numpy())


def test_hf_classifier_of_a_trial_gives_its_logits(tmp_path, shared_data, vocab_file):
    """serving.py's HF peer (hf_peer_models): a fine-tuned trial written as ElectraForSequenceClassification (its head
    dense(H, C) as HF's dense -> GELU -> dense with the shift) gives the trial's own logits."""
    import json
    import torch
    import transformers
    import run_finetuning
    from finetune.saved_model import load_finetuned
    hparams = dict(task_names=["sst"], model_size="tiny", random_init=True, do_eval=False, vocab_file=str(vocab_file),
                   raw_data_dir=str(shared_data / "glue"), max_examples=32, num_train_epochs=1.0, max_seq_length=32,
                   keep_all_models=True)
    assert run_finetuning.main(["--data-dir", str(tmp_path), "--model-name", "bench",
                                "--hparams", json.dumps(hparams)]) == 0
    trial = next((tmp_path / "models").rglob("sst_model_1"))
    write_hf_classifier(trial, tmp_path / "hf")
    model, _, _ = load_finetuned(trial)
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 20000, size=(4, 12)).astype(np.int32)
    ids[:, 0], ids[:, -1] = 101, 102
    mask = np.ones_like(ids)
    mask[1, 8:] = 0  # one padded row
    ours = model({"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}, training=False)["sst"]
    hf_model = transformers.ElectraForSequenceClassification.from_pretrained(str(tmp_path / "hf")).eval()
    with torch.no_grad():
        theirs = hf_model(input_ids=torch.tensor(ids, dtype=torch.long),
                          attention_mask=torch.tensor(mask, dtype=torch.long)).logits.numpy()
    np.testing.assert_allclose(theirs, ours.numpy(), atol=1e-4)


def test_turns_time_every_step_but_the_first_of_each_turn(monkeypatch):
    """--turn: each side answers `turn` timed requests in a row after `settle_s` idle and an untimed
    one, `steps` in all."""
    calls = []

    class Recording:
        ready_s = peak_rss_gb = 0.0

        def __init__(self, variant):
            self.variant, self.answers = variant, 0

        def receive(self):
            return 0.0

        def step(self):
            self.answers += 1
            calls.append(self.variant)
            return float(self.answers)

        def close(self):
            pass

    monkeypatch.setattr(time, "sleep", lambda seconds: calls.append(seconds))
    results = run_groups([["ours", "peer"]], Recording, steps=3, label="test", gemm_peak=False, turn=2, settle_s=0.2)
    turn = lambda side, timed: [0.2, side] + [side, 0.0] * timed  # settle, untimed, timed steps and their pauses
    assert calls == turn("ours", 2) + turn("peer", 2) + turn("ours", 1) + turn("peer", 1)
    assert results[0]["times"] == {"ours": [2.0, 3.0, 5.0], "peer": [2.0, 3.0, 5.0]}  # answers 1 and 4 untimed


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


def test_onnx_peer_serves_the_trials_probabilities_on_raw_text(tmp_path, shared_data, vocab_file):
    """serving.py's ONNX Runtime peer: the HF dir of a fine-tuned trial through torch.onnx.export and
    ORT float32, behind HF's fast tokenizer, gives our server's probabilities on SST-2 dev sentences;
    the int8 model (quantize_dynamic) gives probabilities too, close to them."""
    import json
    import run_finetuning
    from benchmarks import onnx_peer
    from benchmarks.serving import dev_sentences
    from finetune.saved_model import build_server
    hparams = dict(task_names=["sst"], model_size="tiny", random_init=True, do_eval=False, vocab_file=str(vocab_file),
                   raw_data_dir=str(shared_data / "glue"), max_examples=32, num_train_epochs=1.0, keep_all_models=True)
    assert run_finetuning.main(["--data-dir", str(tmp_path), "--model-name", "bench",
                                "--hparams", json.dumps(hparams)]) == 0
    trial = next((tmp_path / "models").rglob("sst_model_1"))
    write_hf_classifier(trial, tmp_path / "hf")
    onnx_peer.export(tmp_path / "hf", tmp_path / "onnx")
    texts = dev_sentences()[:64]
    served = build_server(trial).serve(np.array(texts, object))
    ours = served["probabilities"].numpy().max(axis=1)  # [64]: the predicted label's probability
    labels = [label.decode() for label in served["label"].numpy()]
    for variant, tolerance in (("ort", 1e-5), ("ort_int8", 0.05)):
        predict = onnx_peer.build(tmp_path / "hf", tmp_path / "onnx", variant)
        answers = [answer for start in range(0, len(texts), 7) for answer in predict(texts[start:start + 7])]
        np.testing.assert_allclose([p for _, p in answers], ours, atol=tolerance, err_msg=variant)
        if variant == "ort":  # int8 may flip a sentence near 0.5
            assert [label for label, _ in answers] == labels
