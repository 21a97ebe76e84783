"""experiments/electra_vs_mlm/diagnostics/chunk_probe.py: the probe scores CoNLL-2000's test words
by conlleval's chunk F1 (100 from features that hold the gold tag, far less from features that
hold a shuffled one), and the words' vectors it reads from a padded batch are those of each
sentence run alone, at each word's first sub-token."""

import numpy as np
import torch
from transformers import ElectraConfig, ElectraModel

from electra_tf.tokenization import Tokenizer
from experiments.electra_vs_mlm.diagnostics.chunk_probe import MAX_SEQ_LENGTH, probe_f1, word_features
from finetune import chunking


def _sentences(shared_data, count):
    return chunking.read_sentences(shared_data / "conll2000" / "test.txt", count, prefixes="BI")


def test_the_probe_reads_chunk_f1_by_conlleval(shared_data):
    """Fitted on 300 sentences' words, scored on their last 150 (every tag seen in training)."""
    sentences = _sentences(shared_data, 300)
    tags = [tag for s in sentences for tag in s.tags]
    names = sorted(set(tags))
    first = sum(len(s.tags) for s in sentences[:150])
    held_out = [list(s.tags) for s in sentences[150:]]
    one_hot = torch.eye(len(names))[[names.index(tag) for tag in tags]]  # [words, tags]: each word's gold tag
    assert probe_f1(one_hot, tags, one_hot[first:], held_out, names) == 100.0
    shuffled = torch.eye(len(names))[[names.index(tag) for tag in np.random.default_rng(0).permutation(tags)]]
    assert probe_f1(shuffled, tags, shuffled[first:], held_out, names) < 40.0


def test_word_vectors_from_a_padded_batch_are_each_sentences_own(shared_data, vocab_file):
    sentences = _sentences(shared_data, 6)
    tokenizer = Tokenizer(vocab_file)
    bioes = sorted({tag for s in sentences for tag in chunking.to_bioes(s.tags)})
    features = chunking.featurize(sentences, tokenizer, MAX_SEQ_LENGTH, {t: i for i, t in enumerate(bioes)})
    torch.manual_seed(0)
    encoder = ElectraModel(ElectraConfig(vocab_size=tokenizer.vocab_size, embedding_size=16, hidden_size=32,
                                         num_hidden_layers=2, num_attention_heads=2, intermediate_size=64))
    states = word_features(encoder, features, batch=4)  # two batches, the first padded to its longest row
    assert len(states) == 3 and all(s.shape == (sum(len(s.words) for s in sentences), 32) for s in states)
    row, cursor = 2, sum(len(s.words) for s in sentences[:2])  # a padded row of the first batch
    with torch.no_grad():
        alone = encoder(input_ids=torch.as_tensor(features.token_ids[row][None].astype("int64")),
                        output_hidden_states=True).hidden_states
    positions = torch.as_tensor(features.labeled_positions[row].astype("int64"))
    for depth, layer in enumerate(alone):
        torch.testing.assert_close(states[depth][cursor:cursor + len(positions)], layer[0, positions],
                                   rtol=1e-5, atol=1e-5)
