"""The discriminator SavedModel on raw text: its signature, and in a fresh process the same
ids, mask and replaced-token probabilities as the Keras model; exported in mixed_bfloat16, bfloat16
matmuls and probabilities within bfloat16's rounding of the float32 export's."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import convert_checkpoint
from checkpoint_helpers import SERVED_PRECISION, assert_computes_in, mrpc_pairs, randomize
from electra_tf.checkpoints import model_dir
from electra_tf.checkpoints.saved_model import export_saved_model
from electra_tf.config import PretrainingConfig
from electra_tf.errors import InputError
from electra_tf.tokenization import Tokenizer
from finetune.saved_model import export_finetuned
from test_token_offsets import assert_embed_offsets

MAX_SEQ_LENGTH = 32  # short, so the longer GLUE sentences are cut
# The tiny random discriminator's logits are below 0.6 in size; bfloat16 keeps 8 significant bits, so
# each rounding of a number near 1 moves it by up to 2^-8 = 0.004, and the logits come out 0.0035 from
# float32's (probabilities: 0.0009). The bound allows 0.02 on the logits, i.e. 0.005 on the
# probabilities (the sigmoid's slope is at most 1/4).
BF16_PROBABILITY_TOLERANCE = 0.005

LOAD_AND_RUN = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # registers the WordPiece op the graph uses
""") + SERVED_PRECISION + textwrap.dedent("""
    texts = [line for line in open(sys.argv[1], encoding="utf-8").read().split("\\n") if line]
    for saved_model, output in zip(sys.argv[2::2], sys.argv[3::2]):
        loaded = tf.saved_model.load(saved_model)
        serving = loaded.signatures["serving_default"]
        spec = serving.structured_input_signature[1]["text"]
        assert spec.dtype == tf.string and spec.shape.as_list() == [None], spec
        out = serving(text=tf.constant(texts))
        embedded = loaded.signatures["embed"](text=tf.constant(texts))
        out.update({"embed_" + name: value for name, value in embedded.items()})
        np.savez(output, **{name: value.numpy() for name, value in out.items()})
        open(output + ".json", "w").write(json.dumps(served_precision(loaded, serving)))
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
    assert convert_checkpoint.main(["saved-model", "--model-dir", str(source), "--output-dir", str(root / "bf16"),
                                    "--precision", "mixed_bfloat16"]) == 0
    return built, source, out


@pytest.fixture(scope="module")
def served(exported, shared_data, tmp_path_factory):
    """texts, and per export ("float32", "mixed_bfloat16"): its outputs on them and `served_precision`
    facts, all from one fresh process."""
    out = exported[2]
    work = tmp_path_factory.mktemp("served")
    texts = [text for pair in mrpc_pairs(shared_data, 6) for text in pair] + ["Héllo, WORLD!"]
    (work / "texts.txt").write_text("\n".join(texts), encoding="utf-8")
    (work / "run.py").write_text(LOAD_AND_RUN)
    exports = {"float32": out, "mixed_bfloat16": out.parent / "bf16"}
    subprocess.run([sys.executable, str(work / "run.py"), str(work / "texts.txt"),
                    *[str(path) for name, saved in exports.items() for path in (saved, work / f"{name}.npz")]],
                   check=True, capture_output=True)
    return texts, {name: (dict(np.load(work / f"{name}.npz")), json.loads((work / f"{name}.npz.json").read_text()))
                   for name in exports}


def test_fresh_process_gives_the_keras_models_outputs(exported, served, vocab_file):
    built = exported[0]
    texts, (served, facts) = served[0], served[1]["float32"]
    assert_computes_in(facts, "float32")
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
    sequence = built.model.network.discriminator(ids, mask, np.zeros_like(ids)).numpy()  # [B, L, H]
    real = mask[:, :, np.newaxis]
    np.testing.assert_allclose(served["embed_mean"], (sequence * real).sum(1) / real.sum(1), atol=2e-5, rtol=0)
    np.testing.assert_allclose(served["embed_cls"], sequence[:, 0], atol=2e-5, rtol=0)
    np.testing.assert_allclose(served["embed_tokens"], sequence * real, atol=2e-5, rtol=0)
    assert_embed_offsets(tokenizer, {0: texts}, {key: served[f"embed_{key}"] for key in (
        "input_ids", "input_mask", "segment_ids", "token_start", "token_end")})  # each token's characters


def test_the_projection_is_stored_once(exported):
    """The served graph reads each block's Q/K/V from the frozen [H, 3H] copy, and only it is saved:
    the variables hold the encoders' weights once, not once more for the copy."""
    built, _, out = exported
    saved = dict(tf.train.list_variables(str(out / "variables" / "variables")))  # keyed by object path
    encoder = built.model.network.discriminator
    hidden = encoder.config.hidden_size
    assert sum(shape == [hidden, 3 * hidden] for shape in saved.values()) == len(encoder.blocks)  # the copies
    # (a scalar records the served precision)
    size = sum(np.prod(shape) for key, shape in saved.items() if key.endswith("VARIABLE_VALUE") and shape)
    # the discriminator and, for `fill_mask`, the generator and its MLM head, the shared tables once
    network = sum(np.prod(v.shape) for v in built.model.variables
                  if v.name.startswith(("electra/", "discriminator_predictions/", "generator/", "generator_predictions/")))
    assert size == network


def test_existing_output_needs_overwrite(exported, capsys):
    _, source, out = exported
    assert convert_checkpoint.main(["saved-model", "--model-dir", str(source), "--output-dir", str(out)]) == 2
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert (out / "saved_model.pb").exists()
    for inside in (source, source.parent):  # replacing these would delete the model being read
        assert convert_checkpoint.main(["saved-model", "--model-dir", str(source), "--output-dir", str(inside),
                                        "--overwrite"]) == 2
        assert "holds the model being read" in capsys.readouterr().err
    assert (source / "config.json").is_file() and list(source.glob("ckpt-*.index"))


@pytest.mark.parametrize("objective", ["bert", "replace_mlm", "all_tokens_mlm"])
def test_an_objective_without_a_replaced_token_head_is_refused(objective, tmp_path, vocab_file, capsys):
    """Only electra and electra_15 train the head `replaced_probability` serves: replace_mlm's
    is never trained, all_tokens_mlm's is its copy gate, bert has none. One error, nothing written."""
    config = PretrainingConfig.from_hparams("m", str(tmp_path), {"model_size": "tiny", "objective": objective})
    source = tmp_path / "models" / "m"
    model_dir.save_built(model_dir.build(config, vocab_file), config, vocab_file, source)
    assert convert_checkpoint.main(["saved-model", "--model-dir", str(source), "--output-dir",
                                    str(tmp_path / "out")]) == 2
    assert f"objective '{objective}' trains no replaced-token head to serve" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("export", [export_saved_model, export_finetuned])
@pytest.mark.parametrize("precision", ["bfloat16", "mixed_float16"])
def test_unsupported_precision_is_an_input_error_before_any_reading(export, precision, tmp_path):
    # The model dir does not exist: the precision is checked first, before the checkpoint is read.
    with pytest.raises(InputError, match=f"precision '{precision}' is not one of: float32, mixed_bfloat16"):
        export(tmp_path / "missing", tmp_path / "out", precision=precision)
    assert not (tmp_path / "out").exists()


def test_bf16_export_computes_in_bfloat16_close_to_the_float32_export(served):
    exports = served[1]
    assert_computes_in(exports["mixed_bfloat16"][1], "mixed_bfloat16")
    (fp32, _), (bf16, _) = exports["float32"], exports["mixed_bfloat16"]
    np.testing.assert_array_equal(bf16["input_ids"], fp32["input_ids"])
    np.testing.assert_array_equal(bf16["input_mask"], fp32["input_mask"])
    assert bf16["replaced_probability"].dtype == np.float32
    gap = np.abs(bf16["replaced_probability"] - fp32["replaced_probability"])
    assert 0 < gap.max() < BF16_PROBABILITY_TOLERANCE, gap.max()  # bfloat16 ran, and rounded only
    assert (bf16["replaced_probability"][fp32["input_mask"] == 0] == 0).all()
