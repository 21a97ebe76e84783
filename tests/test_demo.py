"""`make demo` runs on nothing but a Python install: corpus, vocab and data appear and make sense."""

import json
import re

import demo
from electra_tf.tokenization import load_vocab
from pretrain_data.default_corpus import documents


def test_default_corpus_is_english_prose():
    docs = [d for d in documents() if d]
    sentences = [s for d in docs for s in d]
    assert len(docs) > 100 and len(sentences) > 5000
    assert sum(" the " in s for s in sentences) > 0.3 * len(sentences)


def test_demo_from_nothing_to_replaced_token_detection(tmp_path, capsys):
    assert demo.main(["--output-dir", str(tmp_path), "--vocab-size", "2000", "--train-steps", "20"]) == 0
    out = capsys.readouterr().out
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


def test_training_curves_are_read_back_from_tensorboard_logs(tmp_path):
    import tensorflow as tf
    from electra_tf.training.curves import read_scalars
    with tf.summary.create_file_writer(str(tmp_path)).as_default():
        for step, value in ((10, 3.0), (20, 2.5)):
            tf.summary.scalar("disc_loss", value, step=step)
    assert read_scalars(tmp_path) == {"disc_loss": [(10, 3.0), (20, 2.5)]}
