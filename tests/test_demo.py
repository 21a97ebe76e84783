"""`make demo` runs on nothing but a Python install: corpus, vocab and data appear and make sense."""

import json

import demo
from electra_tf.tokenization import load_vocab
from pretrain_data.default_corpus import documents


def test_default_corpus_is_english_prose():
    docs = [d for d in documents() if d]
    sentences = [s for d in docs for s in d]
    assert len(docs) > 100 and len(sentences) > 5000
    assert sum(" the " in s for s in sentences) > 0.3 * len(sentences)


def test_demo_builds_vocab_and_data(tmp_path, capsys):
    assert demo.main(["--output-dir", str(tmp_path), "--vocab-size", "2000"]) == 0
    out = capsys.readouterr().out
    vocab = load_vocab(tmp_path / "vocab.txt")
    assert 1500 <= len(vocab) <= 2000 and vocab[0] == "[PAD]"
    stats = json.loads((tmp_path / "pretrain_tfrecords" / "stats.json").read_text())
    assert stats["train"]["examples"] > 800 and stats["eval"]["examples"] > 0
    assert (tmp_path / "pretrain_tfrecords" / "eval" / "pretrain_data.tfrecord-0-of-1").exists()
    assert "first example of pretrain_data.tfrecord-0-of-1" in out and "[CLS]" in out
