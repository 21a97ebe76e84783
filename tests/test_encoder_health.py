"""benchmarks/encoder_health.py: on a tiny ELECTRA whose first FFN output is 30 times the residual
stream (what the replication's collapsed `electra` showed), it reports that LayerNorm's input grown
about 30x, the gradient below it shrunk, and the tokens and sentences more alike; a discriminator dir and an MLM
model's dir of the same encoder read the same; its TSV reader names a bad file."""

import pytest
import torch
from transformers import ElectraConfig, ElectraModel

from benchmarks.encoder_health import block_of, health, main, read_batch

CONFIG = dict(vocab_size=50, embedding_size=16, hidden_size=32, num_hidden_layers=2,
              num_attention_heads=2, intermediate_size=64, max_position_embeddings=16)


def _model(ffn_output_scale: float = 0.0) -> ElectraModel:
    """A seeded tiny model; with `ffn_output_scale`, layer 0's FFN adds the same vector of that
    scale to every token, far larger than the residual stream (about 1)."""
    torch.manual_seed(0)
    model = ElectraModel(ElectraConfig(**CONFIG))
    with torch.no_grad():
        model.encoder.layer[0].output.dense.bias.add_(ffn_output_scale * torch.randn(CONFIG["hidden_size"]))
    return model


def _batch():
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 50, (4, 12), generator=generator)
    mask = torch.ones_like(ids)
    mask[2:, 8:] = 0  # two padded rows: their padding is not counted
    features = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    return features, torch.tensor([0, 1, 0, 1])


def test_an_inflated_sublayer_shows_in_all_four_figures():
    features, labels = _batch()
    plain, inflated = health(_model(), features, labels), health(_model(30.0), features, labels)
    name = "encoder.layer.0.output.LayerNorm"
    assert plain["layernorm_input_scale"][name] == pytest.approx(1.0, abs=0.3)  # residual + FFN at init
    assert inflated["layernorm_input_scale"][name] == pytest.approx(30.0, rel=0.2)
    assert inflated["gradient_norm"]["embeddings"] < plain["gradient_norm"]["embeddings"] / 10
    assert plain["token_similarity"]["layer 0"] < 0.3 and inflated["token_similarity"]["layer 0"] > 0.95
    assert inflated["token_similarity"]["embeddings"] == pytest.approx(plain["token_similarity"]["embeddings"])
    assert plain["sentence_similarity"]["layer 0"] < 0.9 and inflated["sentence_similarity"]["layer 0"] > 0.99
    assert list(plain["sentence_similarity"]) == ["embeddings", "layer 0", "layer 1"]
    assert set(plain["gradient_norm"]) == {"embeddings", "layer 0", "layer 1", "head"}
    assert list(plain["token_similarity"]) == ["embeddings", "layer 0", "layer 1"]


def test_the_figures_are_exact_and_repeatable():
    """Dropout is off and the head is seeded: the same model and batch give the same numbers."""
    features, labels = _batch()
    assert health(_model(), features, labels) == health(_model(), features, labels)


def test_parameters_map_to_their_blocks():
    assert block_of("encoder.embeddings.word_embeddings.weight") == "embeddings"
    assert block_of("encoder.embeddings_project.weight") == "embeddings"
    assert block_of("encoder.encoder.layer.11.output.dense.weight") == "layer 11"
    assert block_of("head.weight") == "head"


def test_a_tsv_without_integer_labels_is_refused_by_name(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text("sentence\tlabel\na fine film\tpositive\n")
    with pytest.raises(SystemExit, match="bad.tsv: the last column must be an integer label"):
        read_batch(path, 4)
    path.write_text("sentence\tlabel\n")
    with pytest.raises(SystemExit, match="bad.tsv: no rows after the header"):
        read_batch(path, 4)
    path.write_text("sentence\tlabel\na fine film\t1\nflat\t0\nmore\t1\n")
    assert read_batch(path, 2) == (["a fine film", "flat"], [1, 0])


def test_a_discriminator_and_an_mlm_dir_of_one_encoder_read_the_same(tmp_path, capsys):
    """The same encoder saved under ElectraForPreTraining and ElectraForMaskedLM (the export of an
    `electra` run and of a `bert` one) prints the same figures, random init included: loading the
    MLM dir draws its missing head, which must not change the random-init model."""
    from transformers import ElectraForMaskedLM, ElectraForPreTraining
    words = [f"w{i}" for i in range(45)]
    sentences = tmp_path / "s.tsv"
    sentences.write_text("sentence\tlabel\n" + "".join(f"{' '.join(words[i:i + 5])}\t{i % 2}\n" for i in range(8)))
    torch.manual_seed(3)
    discriminator = ElectraForPreTraining(ElectraConfig(**CONFIG))
    mlm = ElectraForMaskedLM(ElectraConfig(**CONFIG))
    mlm.electra.load_state_dict(discriminator.electra.state_dict())
    printed = []
    for name, model in (("discriminator", discriminator), ("mlm", mlm)):
        model.save_pretrained(tmp_path / name)
        (tmp_path / name / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words))
        main([str(tmp_path / name), "--sentences", str(sentences), "--batch", "8", "--probe-examples", "8",
              "--probe-train", str(sentences), "--probe-dev", str(sentences)])
        out = capsys.readouterr().out
        printed.append(out[out.index("LayerNorm input scale"):])
    assert printed[0] == printed[1] and "encoder.layer.1.output.LayerNorm" in printed[0]
    assert "linear probe on the frozen last layer, dev %" in printed[0] and "token mean" in printed[0]


def test_one_sentence_is_refused(tmp_path, capsys):
    """The sentence similarity compares two sentences: --batch 1 is one clear error, before loading."""
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing"), "--batch", "1"])
    assert "--batch 1: the sentence similarity needs at least 2 sentences" in capsys.readouterr().err


def test_the_linear_probe_reads_a_label_hidden_in_a_tiny_spread():
    """Standardised features: a label carried by a spread of 1e-3 beside a shared offset of 30 (a
    cosine near 1 between any two sentences) is read as well as a plain one; labels that the
    features do not carry score about chance. Deterministic."""
    from benchmarks.encoder_health import linear_probe
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 2, (600,), generator=generator)
    noise = torch.randn(600, 16, generator=generator)
    signal = noise.clone()
    signal[:, 0] += 2.0 * (2 * labels - 1)  # class means 4 standard deviations apart on one feature
    squeezed = 30.0 + 1e-3 * signal  # what an inflated, shared direction leaves of it
    cosines = torch.nn.functional.normalize(squeezed, dim=-1) @ torch.nn.functional.normalize(squeezed, dim=-1).T
    assert cosines.min() > 0.999
    train, dev = slice(0, 400), slice(400, 600)
    plain = linear_probe(signal[train], labels[train], signal[dev], labels[dev])
    assert plain > 95 and linear_probe(squeezed[train], labels[train], squeezed[dev], labels[dev]) == pytest.approx(plain)
    shuffled = labels[torch.randperm(600, generator=generator)]
    assert 35 < linear_probe(noise[train], shuffled[train], noise[dev], shuffled[dev]) < 65
    assert linear_probe(signal[train], labels[train], signal[dev], labels[dev]) == plain
