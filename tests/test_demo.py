"""`make demo` runs on nothing but a Python install: corpus, vocab and data appear and make sense."""

import contextlib
import io
import json
import re

import pytest

import demo
from electra_tf.errors import InputError
from electra_tf.tokenization import load_vocab
from pretrain_data.default_corpus import documents


def test_default_corpus_is_english_prose():
    docs = [d for d in documents() if d]
    sentences = [s for d in docs for s in d]
    assert len(docs) > 100 and len(sentences) > 5000
    assert sum(" the " in s for s in sentences) > 0.3 * len(sentences)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The demo with 20 training steps: (output dir, what it printed)."""
    output_dir = tmp_path_factory.mktemp("demo")
    capture = io.StringIO()
    with contextlib.redirect_stdout(capture):
        code = demo.main(["--output-dir", str(output_dir), "--vocab-size", "2000", "--train-steps", "20"])
    assert code == 0
    return output_dir, capture.getvalue()


def test_demo_from_nothing_to_replaced_token_detection(demo_run):
    tmp_path, out = demo_run
    vocab = load_vocab(tmp_path / "vocab.txt")
    assert 1500 <= len(vocab) <= 2000 and vocab[0] == "[PAD]"
    stats = json.loads((tmp_path / "pretrain_tfrecords" / "stats.json").read_text())
    assert stats["train"]["examples"] > 800 and stats["eval"]["examples"] > 0
    assert (tmp_path / "pretrain_tfrecords" / "eval" / "pretrain_data.tfrecord-0-of-1").exists()
    assert "first example of pretrain_data.tfrecord-0-of-1" in out and "[CLS]" in out
    model_dir = tmp_path / "models" / "tiny"
    assert (model_dir / "ckpt-20.index").exists() and list((model_dir / "train").glob("events.out.tfevents.*"))
    png = (model_dir / "training_curves.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10000
    results = json.loads((model_dir / "results" / "unsup_results.json").read_text())
    assert results["global_step"] == 20 and 0.0 <= results["disc_auc"] <= 1.0
    assert "token read by the discriminator" in out and "P(replaced)" in out
    assert re.search(r"\d+ of \d+ tokens replaced; the discriminator labels \d+ of \d+ correctly", out)


def test_demo_keeps_the_paper_recipe_and_reports_every_held_out_example(demo_run):
    tmp_path, out = demo_run
    model_dir = tmp_path / "models" / "tiny"
    config = json.loads((model_dir / "config.json").read_text())
    assert config["temperature"] == 1.0 and not config["uniform_generator"] and config["disc_weight"] == 50.0
    held_out = json.loads((tmp_path / "pretrain_tfrecords" / "stats.json").read_text())["eval"]["examples"]
    results = json.loads((model_dir / "results" / "unsup_results.json").read_text())
    assert results["eval_examples"] == held_out and results["eval_complete"] == 1.0
    # the learning curve as text: a row at step 0 and at the end, real-token AUC first
    curve = out[out.index("[5/7] held-out learning curve"):out.index("[6/7]")]
    assert "real-token AUC" in curve.splitlines()[1]
    rows = [line.split() for line in curve.splitlines()[2:] if re.match(r"^\s+\d+\s", line)]
    assert [row[0] for row in rows] == ["0", "20"]
    assert float(rows[-1][1]) == pytest.approx(results["disc_auc"], abs=1e-4)
    summary = out[out.index("[7/7]"):]
    assert "What it cannot show" in summary and "experiments/electra_vs_mlm/replicate_paper.py" in summary
    assert f"{results['disc_loss_constant_predictor']:.4f}" in summary


def test_demo_refuses_an_objective_without_replaced_token_detection(demo_run):
    tmp_path, _ = demo_run
    args = demo.parse_args(["--output-dir", str(tmp_path), "--train-steps", "5", "--hparams", '{"objective": "bert"}'])
    with pytest.raises(InputError, match="needs objective"):
        demo.pretrain(tmp_path, len(load_vocab(tmp_path / "vocab.txt")), args)


def test_training_curves_are_read_back_from_tensorboard_logs(tmp_path):
    import tensorflow as tf
    from electra_tf.training.reporting import read_scalars
    with tf.summary.create_file_writer(str(tmp_path)).as_default():
        for step, value in ((10, 3.0), (20, 2.5)):
            tf.summary.scalar("disc_loss", value, step=step)
    assert read_scalars(tmp_path) == {"disc_loss": [(10, 3.0), (20, 2.5)]}
