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
    config = PretrainingConfig.from_hparams("u", str(tmp_path), {"model_size": "small", "uniform_generator": True})
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
