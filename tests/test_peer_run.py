"""The peer's full run across sessions (experiments/electra_vs_mlm/diagnostics/peer_run.py, through
pretrain_peer_curve.py --output-dir): a run stopped and resumed takes exactly the steps of one that
went on; a saved run with other settings is refused; at the schedule's end its held-out metrics are
the replication's (the constant predictor's loss beside its own) and its discriminator is an HF dir
that our importer reads weight for weight."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from experiments.electra_vs_mlm.diagnostics import pretrain_peer_curve as peer_curve

STEPS = 8
EVAL_RECORDS = 45  # over 40, and a short last batch of 4


@pytest.fixture(scope="module")
def peer_data_dir(pretraining_data_dir, tmp_path_factory):
    """The replication's data layout (train/, eval/) over the shared 64-token Wikipedia records; eval/
    holds the first EVAL_RECORDS held-out ones (all 367, at batch 4, made the fixture 46 s instead of 22)."""
    import tensorflow as tf
    root = tmp_path_factory.mktemp("peer_data")
    records = pretraining_data_dir / "pretrain_tfrecords"
    (root / "train").mkdir()
    for path in sorted(records.glob("*.tfrecord*")):
        (root / "train" / path.name).symlink_to(path)
    (root / "eval").mkdir()
    held_out = sorted(str(path) for path in (records / "eval").glob("*.tfrecord*"))
    with tf.io.TFRecordWriter(str(root / "eval" / "held_out.tfrecord")) as writer:
        for record in tf.data.TFRecordDataset(held_out).take(EVAL_RECORDS):
            writer.write(record.numpy())
    return root


def run(data_dir, vocab_file, output, steps, **overrides):
    settings = {"objective": "electra", "data-dir": data_dir, "vocab-file": vocab_file, "steps": steps,
                "total-steps": STEPS, "warmup": 2, "batch": 4, "window": 2, "checkpoint-every": 4,
                "init": "original", "output-dir": output, **overrides}
    peer_curve.main([word for name, value in settings.items() for word in (f"--{name}", str(value))])


def saved(output):
    import torch
    return torch.load(output / peer_curve.peer_run.STATE, map_location="cpu", weights_only=False)


@pytest.fixture(scope="module")
def runs(peer_data_dir, vocab_file, tmp_path_factory):
    """(one go, stopped at step 4 and resumed): output dirs of the same 8-step run."""
    one_go, resumed = tmp_path_factory.mktemp("one_go"), tmp_path_factory.mktemp("resumed")
    run(peer_data_dir, vocab_file, one_go, STEPS)
    run(peer_data_dir, vocab_file, resumed, 4)
    assert saved(resumed)["step"] == 4 and not (resumed / peer_curve.peer_run.DISCRIMINATOR).exists()
    run(peer_data_dir, vocab_file, resumed, STEPS)
    return one_go, resumed


def test_a_resumed_run_takes_the_same_steps(runs):
    """Weights, optimizer moments, windows and the held-out metrics: equal to the last bit."""
    one_go, resumed = (saved(path) for path in runs)
    assert one_go["step"] == resumed["step"] == STEPS
    for model in ("generator", "discriminator"):
        for name, value in one_go["models"][model].items():
            assert np.array_equal(value.numpy(), resumed["models"][model][name].numpy()), name
    for name, (m, v) in one_go["moments"].items():
        assert np.array_equal(m.numpy(), resumed["moments"][name][0].numpy()), name
        assert np.array_equal(v.numpy(), resumed["moments"][name][1].numpy()), name
    assert one_go["moments"]["discriminator.electra.encoder.layer.0.attention.self.query.weight"][1].abs().sum() > 0
    files = [[(path / name).read_text() for name in ("windows.jsonl", "held_out.json")] for path in runs]
    assert files[0] == files[1]
    windows = [json.loads(line) for line in files[0][0].splitlines()]
    assert [w["step"] for w in windows] == [2, 4, 6, 8]
    assert set(windows[0]) == {"step", "masked_lm_loss", "masked_lm_accuracy", "disc_loss", "disc_auc"}


def test_held_out_metrics_are_the_replications(runs, peer_data_dir):
    """Every held-out real token once; the constant predictor's loss is the binary entropy of the
    replaced share, as electra_tf/objectives/metrics.py computes ours."""
    metrics = json.loads((runs[0] / "held_out.json").read_text())
    p = metrics["replaced_fraction"]
    assert 0.0 < p < 0.2
    assert metrics["disc_loss_constant_predictor"] == pytest.approx(-(p * math.log(p) + (1 - p) * math.log(1 - p)))
    assert 0.0 <= metrics["disc_auc"] <= 1.0 and 0.0 <= metrics["masked_lm_accuracy"] <= 1.0
    assert metrics["step"] == STEPS and metrics["disc_loss"] > 0
    import tensorflow as tf
    files = sorted(str(path) for path in (peer_data_dir / "eval").glob("*.tfrecord*"))
    records = list(tf.data.TFRecordDataset(files).map(lambda record: tf.io.parse_single_example(
        record, {"input_mask": tf.io.VarLenFeature(tf.int64)})["input_mask"].values))
    assert len(records) == EVAL_RECORDS and len(records) % 4 != 0  # the last batch is short: it counts too
    assert metrics["tokens"] == sum(int(mask.numpy().sum()) for mask in records)


def test_the_exported_discriminator_is_what_our_importer_reads(runs, vocab_file):
    """HF's own save_pretrained, read by electra_tf's from-hf path (`init_checkpoint` of a
    fine-tuning run): the same weights, the replication's shape, the run's vocab."""
    from electra_tf.checkpoints.hf import read_hf
    export = runs[0] / "discriminator"
    weights = read_hf(export)
    state = saved(runs[0])["models"]["discriminator"]
    query = "electra.encoder.layer.0.attention.self.query.weight"
    np.testing.assert_array_equal(weights.values["electra/encoder/layer_0/attention/self/query/kernel"],
                                  state[query].numpy().T)
    np.testing.assert_array_equal(weights.values["electra/embeddings/word_embeddings"],
                                  state["electra.embeddings.word_embeddings.weight"].numpy())
    model = weights.config.model_hparam_overrides
    assert (model["hidden_size"], model["num_hidden_layers"], weights.config.embedding_size) == (256, 4, 128)
    assert Path(weights.vocab_file).read_bytes() == vocab_file.read_bytes()


def test_a_saved_run_with_other_settings_is_refused(runs, peer_data_dir, vocab_file):
    """Resuming under another learning rate would splice two runs: refused, naming the file and the setting."""
    with pytest.raises(SystemExit, match=r"state\.pt: saved with learning_rate 0\.001, this run has 0\.0005"):
        run(peer_data_dir, vocab_file, runs[1], STEPS, **{"learning-rate": 5e-4})
