"""electra_tf.token_offsets: the in-graph character offsets of every token equal those the SQuAD
featurizer computes in Python (`finetune.squad_context.align_tokens`), and the ids equal the
tokenizer's on the whole text, on real SQuAD contexts, SST-2 sentences and CoNLL-2000 sentences."""

import json

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.token_offsets import tokenize_with_offsets
from electra_tf.tokenization import Tokenizer
from finetune.squad_context import Paragraph, tokenize_paragraphs

EDGES = ["Caf\u00e9 na\u00efve \u2603, \u039f\u0394\u039f\u03a3. x\u00a0y \u0130stanbul \ufb01ne a\x00b c\u200dd",
         "  leading and trailing  ", "\u4e2d\u6587 mixed\u202fspace \t tab\nline"]


@pytest.fixture(scope="module")
def texts(shared_data) -> list:
    data = json.loads((shared_data / "squad" / "dev-v2.0.json").read_text(encoding="utf-8"))["data"]
    contexts = [p["context"] for article in data for p in article["paragraphs"]][:200]
    sst = [line.split("\t")[0] for line in (shared_data / "glue/SST-2/dev.tsv").read_text().splitlines()[1:201]]
    conll = " ".join(line.split(" ")[0] if line else "\n" for line in
                     (shared_data / "conll2000/test.txt").read_text().splitlines()).split("\n")[:200]
    return contexts + sst + conll + EDGES


@pytest.mark.parametrize("lower", [True, False])
def test_offsets_equal_the_squad_featurizers(texts, vocab_file, lower):
    tokenizer = Tokenizer(vocab_file, do_lower_case=lower)
    ids, starts, ends = (t.to_list() for t in tokenize_with_offsets(tokenizer, tf.constant(texts)))
    whole = tokenizer.tokenize(tf.constant(texts)).to_list()
    paragraphs = [Paragraph.split(text) for text in texts]
    expected = tokenize_paragraphs(paragraphs, tokenizer)
    for i, (text, paragraph) in enumerate(zip(texts, paragraphs)):
        tokens = expected[id(paragraph)]
        assert ids[i] == whole[i] == tokens.ids.tolist(), text
        assert starts[i] == tokens.char_start.tolist() and ends[i] == tokens.char_end.tolist(), text
    # an SST-2 sentence (lower-case English): every token is the text it spans, without "##"
    sentence = texts[200]
    assert [sentence[s:e] for s, e in zip(starts[200], ends[200])] == [tokenizer.vocab[t].lstrip("#") for t in ids[200]]
    edge = texts[-3]  # "Café": one token ("cafe", or [UNK] cased) spanning its four characters
    assert (starts[-3][0], ends[-3][0]) == (0, 4)


def expected_offsets(tokenizer, text: str):
    """(ids, starts, ends) of `text`'s tokens as the SQuAD featurizer aligns them (Python)."""
    paragraph = Paragraph.split(text)
    tokens = tokenize_paragraphs([paragraph], tokenizer)[id(paragraph)]
    return tokens.ids.tolist(), tokens.char_start.tolist(), tokens.char_end.tolist()


def assert_embed_offsets(tokenizer, texts, embedded):
    """An `embed` signature's token_start / token_end on `texts` ({segment: [text per row]}) are the
    featurizer's offsets of each segment's tokens (those kept: a prefix), -1 elsewhere."""
    for row in range(len(embedded["input_ids"])):
        ids, mask = embedded["input_ids"][row], embedded["input_mask"][row]
        segments = embedded["segment_ids"][row]
        real = np.arange(len(ids))[mask == 1]
        starts, ends = embedded["token_start"][row], embedded["token_end"][row]
        special = [0] + [i for i in real[1:] if ids[i] == tokenizer.sep_id]
        assert all(starts[i] == ends[i] == -1 for i in special) and (starts[mask == 0] == -1).all()
        for segment, rows in texts.items():
            where = [i for i in real if segments[i] == segment and i not in special]
            want_ids, want_starts, want_ends = expected_offsets(tokenizer, rows[row])
            take = len(where)
            assert take > 0 and ids[where].tolist() == want_ids[:take]
            assert starts[where].tolist() == want_starts[:take] and ends[where].tolist() == want_ends[:take]
