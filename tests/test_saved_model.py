"""The discriminator SavedModel on raw text: its signature, and in a fresh process the same
ids, mask and replaced-token probabilities as the Keras model."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import convert_checkpoint
from checkpoint_helpers import mrpc_pairs, randomize
from electra_tf.checkpoints import model_dir
from electra_tf.config import PretrainingConfig
from electra_tf.tokenization import Tokenizer

MAX_SEQ_LENGTH = 32  # short, so the longer GLUE sentences are cut

LOAD_AND_RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # registers the WordPiece op the graph uses
    serving = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
    texts = [line for line in open(sys.argv[2], encoding="utf-8").read().split("\\n") if line]
    spec = serving.structured_input_signature[1]["text"]
    assert spec.dtype == tf.string and spec.shape.as_list() == [None], spec
    out = serving(text=tf.constant(texts))
    np.savez(sys.argv[3], **{name: value.numpy() for name, value in out.items()})
""")


@pytest.fixture(scope="module")
def exported(tmp_path_factory, vocab_file):
    root = tmp_path_factory.mktemp("saved_model")
    config = PretrainingConfig.from_hparams("m", str(root), {"model_size": "tiny",
                                                             "max_seq_length": MAX_SEQ_LENGTH})
    built = model_dir.build(config, vocab_file)
    randomize(built.model.variables, seed=3)
    source = root / "models" / "m"
    model_dir.save_built(built, config, vocab_file, source)
    out = root / "served"
    assert convert_checkpoint.main(["saved-model", "--model-dir", str(source), "--output-dir", str(out)]) == 0
    return built, source, out


def test_fresh_process_gives_the_keras_models_outputs(exported, shared_data, vocab_file, tmp_path):
    built, _, out = exported
    texts = [text for pair in mrpc_pairs(shared_data, 6) for text in pair] + ["Héllo, WORLD!"]
    (tmp_path / "texts.txt").write_text("\n".join(texts), encoding="utf-8")
    (tmp_path / "run.py").write_text(LOAD_AND_RUN)
    subprocess.run([sys.executable, str(tmp_path / "run.py"), str(out), str(tmp_path / "texts.txt"),
                    str(tmp_path / "out.npz")], check=True, capture_output=True)
    served = dict(np.load(tmp_path / "out.npz"))
    assert served["input_ids"].dtype == np.int32 and served["input_mask"].dtype == np.int32
    assert served["replaced_probability"].dtype == np.float32

    tokenizer = Tokenizer(vocab_file)
    flat, splits = tokenizer.tokenize_batch(texts)
    rows = [[tokenizer.cls_id] + flat[splits[i]:splits[i + 1]].tolist()[:MAX_SEQ_LENGTH - 2] + [tokenizer.sep_id]
            for i in range(len(texts))]
    length = max(len(row) for row in rows)
    assert length == MAX_SEQ_LENGTH and served["input_ids"].shape == (len(texts), length)
    ids = np.zeros([len(texts), length], np.int32)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, :len(row)], mask[i, :len(row)] = row, 1
    np.testing.assert_array_equal(served["input_ids"], ids)
    np.testing.assert_array_equal(served["input_mask"], mask)
    logits = built.model.network.discriminator_logits(ids, mask, np.zeros_like(ids)).numpy()
    expected = 1 / (1 + np.exp(-logits.astype(np.float64))) * mask
    np.testing.assert_allclose(served["replaced_probability"], expected, atol=1e-6, rtol=0)
    assert served["replaced_probability"][mask == 1].std() > 0.01  # not a constant: real weights


def test_existing_output_needs_overwrite(exported, capsys):
    _, source, out = exported
    assert convert_checkpoint.main(["saved-model", "--model-dir", str(source), "--output-dir", str(out)]) == 2
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert (out / "saved_model.pb").exists()
