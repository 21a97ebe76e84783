"""Fill-mask with the generator (electra_tf/fill_mask.py, fill_mask.py): the candidates and their
probabilities are HF's fill-mask pipeline's for the same weights, on a trained MLM and on an ELECTRA
model dir whose generator shares the discriminator's embeddings; bad input names the file and line
and writes nothing."""

import json

import numpy as np
import pytest
import torch  # noqa: F401  (the test extras install it: HF's pipeline runs on it)
import transformers

import fill_mask
from checkpoint_helpers import mrpc_pairs, randomize
from electra_tf.checkpoints import model_dir
from electra_tf.checkpoints.convert import to_hf
from electra_tf.config import PretrainingConfig
from electra_tf.errors import InputError
from electra_tf.fill_mask import FillMask, fill_file

REPLICATION_HF = fill_mask.__file__.rsplit("/", 1)[0] + "/experiments/electra_vs_mlm/results/hf"
TOP_K = 5


def masked_sentences(shared_data, count):
    """MRPC dev sentences with their middle word replaced by [MASK]."""
    sentences = []
    for first, _ in mrpc_pairs(shared_data, count):
        words = first.split()
        words[len(words) // 2] = "[MASK]"
        sentences.append(" ".join(words))
    return sentences


def assert_as_hf(ours: FillMask, hf_dir, sentences):
    """Top-k tokens equal, in order, and probabilities within 1e-5 of HF's float32 pipeline."""
    pipe = transformers.pipeline("fill-mask", model=str(hf_dir), dtype="float32", device="cpu", top_k=TOP_K)
    filled = ours(sentences, top_k=TOP_K)
    for sentence, masks in zip(sentences, filled):
        assert len(masks) == 1
        theirs = pipe(sentence)
        assert [c["token_id"] for c in masks[0]["candidates"]] == [c["token"] for c in theirs], sentence
        np.testing.assert_allclose([c["probability"] for c in masks[0]["candidates"]], [c["score"] for c in theirs],
                                   atol=1e-5)
        assert [c["token"] for c in masks[0]["candidates"]] == [c["token_str"].replace(" ", "") for c in theirs]


def test_fill_mask_is_hfs_on_the_replications_trained_mlm(shared_data):
    """The committed `bert` export (an ElectraForMaskedLM trained 5,840 steps): the same candidates
    as HF's pipeline on eight MRPC sentences, and a trained model's, not noise: on "the capital of
    [MASK]" every candidate is a country or region word of the learned vocab."""
    sentences = masked_sentences(shared_data, 8)
    ours = FillMask(f"{REPLICATION_HF}/bert")
    assert_as_hf(ours, f"{REPLICATION_HF}/bert", sentences)
    two = ours(["[MASK] is the capital of [MASK] ."], top_k=3)[0]
    assert [mask["position"] for mask in two] == [1, 6]  # [CLS] [MASK] is the capital of [MASK] . [SEP]
    assert all(len(mask["candidates"]) == 3 for mask in two)
    probabilities = [c["probability"] for c in two[1]["candidates"]]
    assert probabilities == sorted(probabilities, reverse=True) and 0 < sum(probabilities) < 1


def test_fill_mask_reads_the_generator_of_an_electra_model_dir(tmp_path, vocab_file, shared_data):
    """Our model dir (a quarter-width generator sharing the discriminator's embedding block, random
    weights) gives what HF's pipeline gives on its to-hf generator export."""
    config = PretrainingConfig.from_hparams("m", str(tmp_path), {"model_size": "small", "max_seq_length": 64})
    built = model_dir.build(config, vocab_file)
    randomize(built.model.variables, 3)
    directory = tmp_path / "models" / "m"
    model_dir.save_built(built, config, vocab_file, directory)
    to_hf(directory, tmp_path / "hf")
    assert_as_hf(FillMask(directory), tmp_path / "hf" / "generator", masked_sentences(shared_data, 4))


def test_models_without_a_trained_generator_are_refused(tmp_path, vocab_file):
    """A discriminator alone has no MLM head; a uniform_generator run has one it never trained."""
    with pytest.raises(InputError, match=r"electra: no generator \(MLM head\) to fill masks with"):
        FillMask(f"{REPLICATION_HF}/electra")
    config = PretrainingConfig.from_hparams("u", str(tmp_path), {"model_size": "tiny", "uniform_generator": True})
    model_dir.save_built(model_dir.build(config, vocab_file), config, vocab_file, tmp_path / "u")
    with pytest.raises(InputError, match=r"u: trained with uniform_generator"):
        FillMask(tmp_path / "u")


def test_the_script_writes_a_line_per_text_and_bad_lines_name_the_file_and_line(tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("the [MASK] of the river .\nparis is in [MASK] .\n")
    out = tmp_path / "fills.jsonl"
    assert fill_mask.main(["--model", f"{REPLICATION_HF}/bert", "--input", str(texts), "--output", str(out),
                           "--top-k", "2"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["text"] for line in lines] == texts.read_text().splitlines()
    assert [[len(mask["candidates"]) for mask in line["masks"]] for line in lines] == [[2], [2]]
    assert fill_mask.main(["--model", f"{REPLICATION_HF}/bert", "--input", str(texts), "--output", str(out)]) == 2
    assert "fills.jsonl exists (give --overwrite to replace it)" in capsys.readouterr().err
    bad = tmp_path / "bad.txt"
    bad.write_text("a [MASK] here .\nno mask here .\n")
    with pytest.raises(InputError, match=r"bad\.txt: line 2: no \[MASK\] in 'no mask here \.'"):
        fill_file(f"{REPLICATION_HF}/bert", str(bad), str(tmp_path / "none.jsonl"))
    assert not (tmp_path / "none.jsonl").exists()
    long = tmp_path / "long.txt"
    long.write_text("[MASK] " + "word " * 600 + "\n")
    with pytest.raises(InputError, match=r"long\.txt: line 1: 603 tokens with \[CLS\] and \[SEP\], over max_seq_length"):
        fill_file(f"{REPLICATION_HF}/bert", str(long), str(tmp_path / "none.jsonl"))


def test_the_saved_model_fills_masks_as_the_python_api(tmp_path, vocab_file, shared_data):
    """A model dir's SavedModel has `fill_mask(text, top_k)`: on raw texts (one with two masks, one
    with none) the same positions, tokens and probabilities as `FillMask` (within 1e-5: the served
    encoder's Q/K/V are one matmul), padded with -1, "" and 0 past a text's masks; the generator
    shares the discriminator's stored embedding tables. A model dir whose generator HF never had
    (from a discriminator alone) gets no `fill_mask`, and FillMask refuses it."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (the graph's WordPiece op)
    import convert_checkpoint
    config = PretrainingConfig.from_hparams("m", str(tmp_path), {"model_size": "tiny", "max_seq_length": 64})
    built = model_dir.build(config, vocab_file)
    randomize(built.model.variables, 5)
    directory = tmp_path / "models" / "m"
    model_dir.save_built(built, config, vocab_file, directory)
    assert convert_checkpoint.main(["saved-model", "--model-dir", str(directory), "--output-dir",
                                    str(tmp_path / "served")]) == 0
    texts = masked_sentences(shared_data, 3) + ["[MASK] is the capital of [MASK] .", "no mask here ."]
    served = tf.saved_model.load(str(tmp_path / "served")).signatures["fill_mask"](
        text=tf.constant(texts), top_k=tf.constant(3))
    served = {name: value.numpy() for name, value in served.items()}
    assert served["mask_positions"].tolist()[3:] == [[1, 6], [-1, -1]]
    assert (served["token_ids"][4] == -1).all() and (served["tokens"][4] == b"").all()
    assert (served["probabilities"][4] == 0).all()
    python = FillMask(directory)(texts[:4], top_k=3)
    for row, masks in enumerate(python):
        assert [mask["position"] for mask in masks] == [p for p in served["mask_positions"][row] if p >= 0]
        for slot, mask in enumerate(masks):
            candidates = mask["candidates"]
            assert [c["token_id"] for c in candidates] == served["token_ids"][row, slot].tolist()
            assert [c["token"].encode() for c in candidates] == served["tokens"][row, slot].tolist()
            np.testing.assert_allclose([c["probability"] for c in candidates], served["probabilities"][row, slot],
                                       atol=1e-5)
    shapes = [shape for name, shape in tf.train.list_variables(str(tmp_path / "served" / "variables" / "variables"))
              if name.endswith("VARIABLE_VALUE")]
    vocab = config.vocab_size  # the word table once (shared), and the generator's MLM output bias
    assert shapes.count([vocab, config.embedding_size]) == 1 and shapes.count([vocab]) == 1, shapes

    from electra_tf.checkpoints.convert import from_hf
    from_hf(f"{REPLICATION_HF}/electra", tmp_path / "disc_only")
    assert convert_checkpoint.main(["saved-model", "--model-dir", str(tmp_path / "disc_only"), "--output-dir",
                                    str(tmp_path / "disc_served")]) == 0
    assert sorted(tf.saved_model.load(str(tmp_path / "disc_served")).signatures) == ["embed", "serving_default"]
    with pytest.raises(InputError, match=r"disc_only: its generator was never trained"):
        FillMask(tmp_path / "disc_only")
