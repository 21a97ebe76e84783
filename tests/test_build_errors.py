"""build_pretraining_dataset.py: flags, and one clear error per bad input with nothing half-written."""

import pytest

import build_pretraining_dataset as cli
from electra_tf.errors import InputError
from pretrain_data import build as build_lib
from pretrain_data.build import BuildOptions, build_pretraining_dataset


@pytest.fixture
def small_corpus(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("The first sentence is here.\nAnd a second one follows it.\n\n"
                                  "A new document starts.\nIt has two lines.\n")
    return corpus


def options(corpus, vocab, out, **overrides):
    values = dict(corpus_dir=str(corpus), vocab_file=str(vocab), output_dir=str(out), quiet=True)
    values.update(overrides)
    return BuildOptions(**values)


def leftovers(parent):
    return [p.name for p in parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_boolean_flags_are_real_booleans():
    base = ["--corpus-dir", "c", "--vocab-file", "v", "--output-dir", "o"]
    args = cli.parse_args(base)
    assert args.blanks_separate_docs is True and args.do_lower_case and args.do_strip_accents
    args = cli.parse_args(base + ["--no-blanks-separate-docs", "--no-lower-case", "--no-strip-accents"])
    assert args.blanks_separate_docs is False and not args.do_lower_case and not args.do_strip_accents
    assert cli.parse_args(base + ["--input-format", "wikiextractor"]).input_format == "wikiextractor"


def test_cli_builds_and_reports(small_corpus, vocab_file, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["--corpus-dir", str(small_corpus), "--vocab-file", str(vocab_file),
                     "--output-dir", str(out), "--max-seq-length", "16", "--quiet"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert (out / "pretrain_data.tfrecord-0-of-1").stat().st_size > 0
    assert (out / "stats.json").exists()


def test_blank_lines_separate_documents_or_not(small_corpus, vocab_file, tmp_path):
    with_docs = build_pretraining_dataset(options(small_corpus, vocab_file, tmp_path / "a"))
    one_doc = build_pretraining_dataset(options(small_corpus, vocab_file, tmp_path / "b",
                                                blanks_separate_docs=False))
    assert with_docs["documents"] == 2 and one_doc["documents"] == 1


@pytest.mark.parametrize("length", [7, 513])
def test_max_seq_length_out_of_range(small_corpus, vocab_file, tmp_path, length):
    with pytest.raises(InputError, match=r"--max-seq-length .*\[8, 512\]"):
        build_pretraining_dataset(options(small_corpus, vocab_file, tmp_path / "out", max_seq_length=length))
    assert not (tmp_path / "out").exists()


def test_missing_and_empty_corpus(vocab_file, tmp_path):
    with pytest.raises(InputError, match="not a directory"):
        build_pretraining_dataset(options(tmp_path / "absent", vocab_file, tmp_path / "out"))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "zero.txt").write_text("")
    with pytest.raises(InputError, match="no non-empty files"):
        build_pretraining_dataset(options(empty, vocab_file, tmp_path / "out"))
    (empty / "dangling.txt").symlink_to(tmp_path / "gone.txt")
    with pytest.raises(InputError, match="dangling.txt: cannot read"):
        build_pretraining_dataset(options(empty, vocab_file, tmp_path / "out"))
    assert not (tmp_path / "out").exists() and not leftovers(tmp_path)


def test_an_output_overlapping_the_corpus_or_holding_the_vocab_is_refused(small_corpus, vocab_file, tmp_path):
    """Inside the corpus the build would read its own records as text on the next run; around the
    corpus or the vocab, --overwrite would delete them."""
    for out in (small_corpus / "out", small_corpus, tmp_path):
        with pytest.raises(InputError, match="overlap: the build would read its own records"):
            build_pretraining_dataset(options(small_corpus, vocab_file, out, overwrite=True))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "vocab.txt").symlink_to(vocab_file)
    with pytest.raises(InputError, match="holds --vocab-file"):
        build_pretraining_dataset(options(small_corpus, tmp_path / "data" / "vocab.txt", tmp_path / "data",
                                          overwrite=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "data"] and (small_corpus / "a.txt").is_file()


def test_a_symlinked_folder_of_the_corpus_is_read_once(small_corpus, vocab_file, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "b.txt").write_text("Another document, kept in a linked folder.\n")
    for name in ("linked", "linked_again"):
        (small_corpus / name).symlink_to(elsewhere)
    (elsewhere / "loop").symlink_to(small_corpus)  # followed, it would never end
    stats = build_pretraining_dataset(options(small_corpus, vocab_file, tmp_path / "out"))
    assert stats["documents"] == 3  # a.txt's two and b.txt's one


def test_corpus_without_usable_text(vocab_file, tmp_path):
    corpus = tmp_path / "junk"
    corpus.mkdir()
    (corpus / "blank.txt").write_text("\n   \n\t\n" * 50)
    with pytest.raises(InputError, match="no usable text"):
        build_pretraining_dataset(options(corpus, vocab_file, tmp_path / "out"))
    assert not (tmp_path / "out").exists() and not leftovers(tmp_path)


def test_unreadable_vocab(small_corpus, tmp_path):
    with pytest.raises(InputError, match="missing_vocab.txt"):
        build_pretraining_dataset(options(small_corpus, tmp_path / "missing_vocab.txt", tmp_path / "out"))
    bad = tmp_path / "bad_vocab.txt"
    bad.write_text("[UNK]\n[PAD]\n[CLS]\n[SEP]\n[MASK]\n")
    with pytest.raises(InputError, match="bad_vocab.txt"):
        build_pretraining_dataset(options(small_corpus, bad, tmp_path / "out"))


def test_non_empty_output_needs_overwrite_and_survives_failure(small_corpus, vocab_file, tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    with pytest.raises(InputError, match="--overwrite"):
        build_pretraining_dataset(options(small_corpus, vocab_file, out))
    # a build that fails midway leaves the old output untouched and no staging directory behind
    calls = []

    def failing_pack_file(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("disk full")
        return real_pack_file(*args, **kwargs)

    (small_corpus / "b.txt").write_text("More text in a second file.\n")
    real_pack_file = build_lib.pack_file
    monkeypatch.setattr(build_lib, "pack_file", failing_pack_file)
    with pytest.raises(RuntimeError, match="disk full"):
        build_pretraining_dataset(options(small_corpus, vocab_file, out, overwrite=True))
    monkeypatch.undo()
    assert (out / "precious.txt").read_text() == "keep me" and not leftovers(tmp_path)
    stats = build_pretraining_dataset(options(small_corpus, vocab_file, out, overwrite=True))
    assert stats["train"]["examples"] > 0 and not (out / "precious.txt").exists()


def test_invalid_utf8_is_replaced_and_counted(vocab_file, tmp_path):
    corpus = tmp_path / "dirty"
    corpus.mkdir()
    (corpus / "a.txt").write_bytes(b"Good line here.\nBad \xff\xfe bytes here.\nAnother good line.\n")
    stats = build_pretraining_dataset(options(corpus, vocab_file, tmp_path / "out"))
    assert stats["invalid_utf8_lines_replaced"] == 1 and stats["lines"] == 3


def test_sentence_rules_are_checked_and_recorded(vocab_file, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "wiki_00").write_text('<doc id="1" url="u" title="Rain">\nRain\n'
                                    "今天下雨了。我们在家看书。你呢？我在学校学习。\n</doc>\n", encoding="utf-8")
    built = {rules: build_pretraining_dataset(options(corpus, vocab_file, tmp_path / rules, input_format="wikiextractor",
                                                      max_seq_length=16, sentence_rules=rules))
             for rules in ("all", "english")}
    assert {rules: stats["sentence_rules"] for rules, stats in built.items()} == {"all": "all", "english": "english"}
    # The English rule leaves the paragraph one sentence, cut at the first segment's end; the CJK
    # full stops give four, packed into two-segment examples.
    assert built["english"]["train"]["examples"] != built["all"]["train"]["examples"]
    assert cli.parse_args(["--corpus-dir", "c", "--vocab-file", "v", "--output-dir", "o",
                           "--sentence-rules", "english"]).sentence_rules == "english"
    with pytest.raises(InputError, match=r"--sentence-rules 'latin': expected one of all, english"):
        build_pretraining_dataset(options(corpus, vocab_file, tmp_path / "bad", sentence_rules="latin"))
    assert not (tmp_path / "bad").exists()
