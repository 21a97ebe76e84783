"""Vocab learning: BERT file format, coverage of real Wikipedia text, casing, CLI and bad input."""

import math
import unicodedata

import numpy as np
import pytest

import build_vocab
from electra_tf.errors import InputError
from electra_tf.tokenization import SPECIAL_TOKENS, Tokenizer, load_vocab
from pretrain_data import corpus as corpus_lib
from pretrain_data import vocab_learning as vl

VOCAB_SIZE = 2000
TINY_TEXT = "The cat sat on the mat.\nA dog barked at the cat!\n\nCafé au lait, s'il vous plaît.\n" * 20


def read_lines(path, input_format="wikiextractor"):
    return [line for doc in corpus_lib.read_documents(path, input_format, False).documents for line in doc]


def learn_cli(*args):
    return build_vocab.main([*map(str, args), "--quiet"])


@pytest.fixture(scope="module")
def uncased_vocab(corpus_dir, tmp_path_factory):
    """A 2000-token uncased vocab learned by the CLI from ~2 MB of Wikipedia (wiki_00, wiki_01)."""
    output = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    assert learn_cli("--corpus", corpus_dir / "wiki_00", corpus_dir / "wiki_01", "--input-format",
                     "wikiextractor", "--vocab-size", VOCAB_SIZE, "--output", output) == 0
    return output


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny.txt"
    path.write_text(TINY_TEXT, encoding="utf-8")
    return path


def test_cli_writes_a_bert_format_vocab(uncased_vocab):
    text = uncased_vocab.read_text(encoding="utf-8")
    tokens = text.split("\n")
    assert tokens.pop() == ""  # every token line ends with a newline
    assert tokens[:5] == list(SPECIAL_TOKENS)  # [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4
    assert VOCAB_SIZE * 0.95 <= len(tokens) <= VOCAB_SIZE
    assert len(set(tokens)) == len(tokens)
    assert all(t and t == t.strip() and " " not in t for t in tokens)
    assert load_vocab(uncased_vocab) == tokens
    chars = [t for t in tokens[5:] if len(t) == 1]
    assert len(chars) > 100 and all(f"##{c}" in tokens for c in chars)  # every character, alone and as suffix
    assert not any(t.startswith("##") and len(t) == 2 for t in tokens)  # no bare joiner
    assert not list(uncased_vocab.parent.glob(".*"))  # the temporary file was renamed away
    assert uncased_vocab.stat().st_mode & 0o777 == 0o644


def test_uncased_vocab_covers_held_out_wikipedia(uncased_vocab, corpus_dir):
    tokenizer = Tokenizer(uncased_vocab)
    lines = read_lines(corpus_dir / "wiki_79")  # not learned from
    ids, splits = tokenizer.tokenize_batch(lines)
    words = tokenizer.basic_tokenize(lines).flat_values.shape[0]
    assert len(lines) > 2000 and words > 150_000
    assert np.mean(ids == tokenizer.unk_id) < 0.005  # measured: 0.03%
    assert len(ids) / words < 2.0  # most words stay whole or in two pieces (measured: 1.84)
    for word in ("the", "of", "and", "in", "was", "first", "city"):
        assert word in tokenizer.vocab
    assert tokenizer.convert_ids_to_tokens(tokenizer.tokenize_batch(["The history of the city."])[0]) == [
        "the", "history", "of", "the", "city", "."]
    assert not any(c.isupper() for t in tokenizer.vocab[5:] for c in t)
    assert not any(unicodedata.category(c) == "Mn" for t in tokenizer.vocab for c in unicodedata.normalize("NFD", t))


def test_training_lines_tokenize_without_unk(uncased_vocab, corpus_dir):
    tokenizer = Tokenizer(uncased_vocab)
    ids, _ = tokenizer.tokenize_batch(read_lines(corpus_dir / "wiki_01"))
    assert np.count_nonzero(ids == tokenizer.unk_id) <= 2  # measured: 0


def test_cased_learning_keeps_case_and_accents(corpus_dir):
    lines = read_lines(corpus_dir / "wiki_00")
    counts = vl.count_words(iter(lines), vl.basic_tokenizer(do_lower_case=False, do_strip_accents=True))
    learned = vl.learn_vocab(counts, VOCAB_SIZE, vl.reserved_tokens(0))
    assert VOCAB_SIZE * 0.95 <= len(learned.tokens) <= VOCAB_SIZE
    assert {"The", "the", "In", "of"} <= set(learned.tokens)
    assert {"A", "##A", "é", "##é"} <= set(learned.tokens)  # no lower-casing means no accent stripping
    assert learned.unk_rate == 0.0 and learned.alphabet_size > 200
    assert 1 <= learned.evaluations <= 5  # tf_text's own binary search: 12 here


def test_word_counting_follows_casing_and_accent_flags(tiny_corpus):
    lines = read_lines(tiny_corpus, "lines")

    def count(lower, strip, max_lines=None):
        return vl.count_words(iter(lines), vl.basic_tokenizer(lower, strip), max_lines)

    uncased, accented, cased = count(True, True), count(True, False), count(False, True)
    assert uncased["the"] == 60 and uncased["cafe"] == 20 and uncased["."] == 40 and uncased["'"] == 20
    assert accented["café"] == 20 and "cafe" not in accented
    assert cased["The"] == 20 and cased["the"] == 40 and cased["Café"] == 20
    assert sum(count(True, True, max_lines=2).values()) == 14  # the first two lines only


def test_alphabet_cap_turns_words_with_rare_characters_into_unk(tiny_corpus, tmp_path):
    lines = read_lines(tiny_corpus, "lines")
    counts = vl.count_words(iter(lines), vl.basic_tokenizer(True, True))
    full = vl.learn_vocab(counts, 100, vl.reserved_tokens(0))
    assert full.alphabet_size == full.characters_seen == 24 and full.unk_rate == 0.0
    capped = vl.learn_vocab(counts, 100, vl.reserved_tokens(0), max_unique_chars=10)
    assert capped.alphabet_size <= 10 and 0.1 < capped.unk_rate < 0.9
    vl.write_vocab(capped.tokens, tmp_path / "capped.txt")
    tokenizer = Tokenizer(tmp_path / "capped.txt")
    ids, _ = tokenizer.tokenize_batch(lines)
    words = tokenizer.basic_tokenize(lines).flat_values.shape[0]
    assert np.count_nonzero(ids == tokenizer.unk_id) / words == pytest.approx(capped.unk_rate)


def test_num_unused_and_overwrite(tiny_corpus, tmp_path):
    output = tmp_path / "vocab.txt"
    assert learn_cli("--corpus", tiny_corpus, "--vocab-size", 80, "--num-unused", 3, "--output", output) == 0
    tokens = load_vocab(output)
    assert tokens[:8] == [*SPECIAL_TOKENS, "[unused0]", "[unused1]", "[unused2]"]
    assert len(tokens) <= 80 and {"the", "cat", "cafe", "##e"} <= set(tokens)
    output.write_text("keep me\n")
    with pytest.raises(InputError, match=r"--output .*already exists"):
        vl.build_vocab(vl.VocabOptions([str(tiny_corpus)], str(output), vocab_size=80, quiet=True))
    assert output.read_text() == "keep me\n"
    with pytest.raises(InputError, match=r"--output .*: is a directory"):
        vl.build_vocab(vl.VocabOptions([str(tiny_corpus)], str(tmp_path), vocab_size=80, quiet=True))
    assert learn_cli("--corpus-dir", tiny_corpus.parent, "--vocab-size", 60, "--output", output, "--overwrite") == 0
    assert load_vocab(output)[0] == "[PAD]" and len(load_vocab(output)) <= 60


@pytest.mark.parametrize("corpus_kind, options, message", [
    ("missing", {}, r"corpus .*missing: no such file"),
    ("empty_dir", {}, r"--corpus-dir .*no non-empty files"),
    ("empty_file", {}, r"corpus .*empty.txt: all corpus files are empty"),
    ("no_words", {}, r"corpus .*blank.txt: no words found"),
    ("tiny", {"vocab_size": 20}, r"--vocab-size 20 cannot hold the 5 reserved tokens plus 2 x \d+ character"),
    ("tiny", {"vocab_size": 5}, r"--vocab-size 5: leaves no room"),
    ("tiny", {"num_unused": -1}, r"--num-unused -1: must be at least 0"),
    ("tiny", {"max_lines": 0}, r"--max-lines 0: must be at least 1"),
    ("tiny", {"input_format": "xml"}, r"--input-format 'xml'"),
])
def test_bad_input_raises_one_input_error(tmp_path, tiny_corpus, corpus_kind, options, message):
    corpus = {"missing": tmp_path / "missing", "empty_dir": tmp_path / "empty", "tiny": tiny_corpus,
              "empty_file": tmp_path / "empty.txt", "no_words": tmp_path / "blank.txt"}[corpus_kind]
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n \n\t\n")
    output = tmp_path / "vocab.txt"
    with pytest.raises(InputError, match=message):
        vl.build_vocab(vl.VocabOptions([str(corpus)], str(output), **{"vocab_size": 100, **options}, quiet=True))
    assert not output.exists()


def test_cli_prints_one_error_line_and_exits_2(tmp_path, capsys):
    assert learn_cli("--corpus", tmp_path / "nope.txt", "--output", tmp_path / "v.txt") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: corpus ") and "nope.txt" in err[0]


def test_threshold_search_lands_in_range_with_few_evaluations():
    """A power-law size curve like real corpora give: the search needs a handful of learner runs."""
    floor, calls = 500, []

    def evaluate(threshold):
        calls.append(threshold)
        return ["t"] * (floor + int(400_000 * threshold ** -0.8))

    for target in (2_000, 8_000, 30_000):
        calls.clear()
        threshold, tokens = vl._search_threshold(evaluate, 7, 100_000, floor, math.ceil(target * 0.95), target)
        assert target * 0.95 <= len(tokens) <= target and calls[-1] == threshold
        assert len(calls) <= 4
    calls.clear()  # a target between two consecutive thresholds: the closest size below it
    threshold, tokens = vl._search_threshold(evaluate, 7, 100_000, floor, 300_000, 300_000)
    assert (threshold, len(tokens)) == (2, floor + int(400_000 * 2 ** -0.8)) and len(calls) <= 6
