"""build_pretraining_dataset on real Wikipedia text: packing invariants, determinism, sharding, reading."""

import collections
import json
import random
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.tokenization import load_vocab
from pretrain_data.build import BuildOptions, build_pretraining_dataset
from pretrain_data.input_pipeline import check_build_casing, check_build_vocab, make_dataset
from pretrain_data.records import FEATURE_NAMES, feature_spec

MAX_LEN = 128
NUM_FILES = 4  # ~4 MB of Wikipedia: about 6,000 examples


@pytest.fixture(scope="module")
def corpus_subset(corpus_dir, tmp_path_factory) -> Path:
    """The first NUM_FILES WikiExtractor files, as symlinks in a fresh corpus directory."""
    root = tmp_path_factory.mktemp("corpus")
    for path in sorted(corpus_dir.iterdir())[:NUM_FILES]:
        (root / path.name).symlink_to(path)
    return root


def build(corpus, vocab, out, **overrides):
    options = dict(corpus_dir=str(corpus), vocab_file=str(vocab), output_dir=str(out), max_seq_length=MAX_LEN,
                   input_format="wikiextractor", quiet=True)
    options.update(overrides)
    return build_pretraining_dataset(BuildOptions(**options))


def read_records(pattern) -> dict:
    """Every record of the matching files, parsed with the original's FixedLenFeature spec."""
    files = sorted(tf.io.gfile.glob(pattern))
    dataset = tf.data.TFRecordDataset(files).batch(4096).map(
        lambda r: tf.io.parse_example(r, feature_spec(MAX_LEN)))
    parts = collections.defaultdict(list)
    for batch in dataset:
        for name in FEATURE_NAMES:
            parts[name].append(batch[name].numpy())
    return {name: np.concatenate(parts[name]) for name in FEATURE_NAMES}


@pytest.fixture(scope="module")
def built(corpus_subset, vocab_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("build") / "single"
    stats = build(corpus_subset, vocab_file, out)
    return out, stats, read_records(str(out / "pretrain_data.tfrecord*"))


def test_packing_invariants(built, vocab_file):
    out, stats, records = built
    vocab = load_vocab(vocab_file)
    cls_id, sep_id, mask_id = vocab.index("[CLS]"), vocab.index("[SEP]"), vocab.index("[MASK]")
    ids, mask, segments = records["input_ids"], records["input_mask"], records["segment_ids"]
    assert ids.shape[0] >= 5000 and ids.shape[1] == MAX_LEN
    assert ids.shape[0] == stats["train"]["examples"]
    lengths = mask.sum(axis=1)
    assert int(lengths.sum()) == stats["train"]["tokens"]
    single = 0
    for row_ids, row_mask, row_segments, length in zip(ids, mask, segments, lengths):
        assert list(row_mask) == [1] * length + [0] * (MAX_LEN - length)
        assert not row_ids[length:].any() and not row_segments[length:].any()
        assert row_ids[0] == cls_id and row_ids[length - 1] == sep_id
        seps = np.flatnonzero(row_ids[:length] == sep_id)
        assert len(seps) in (1, 2) and mask_id not in row_ids and 0 not in row_ids[:length]
        first_sep = seps[0]
        assert first_sep >= 2  # a segment is never empty
        assert not row_segments[:first_sep + 1].any()
        assert row_segments[first_sep + 1:length].all()
        single += len(seps) == 1
    assert single / len(ids) == pytest.approx(stats["train"]["single_segment_share"])
    # The 10 % single-segment draw; on top of it the original's rules leave B empty at document
    # ends, after a first sentence that fills the example, and under short targets (~3 % here).
    assert 0.08 <= stats["train"]["single_segment_draw_share"] <= 0.12
    excess = stats["train"]["single_segment_share"] - stats["train"]["single_segment_draw_share"]
    assert 0.0 < excess < 0.06
    assert 0.035 <= stats["train"]["short_example_share"] <= 0.065
    assert stats["documents"] > 100 and stats["invalid_utf8_lines_replaced"] == 0
    # most examples fill the length: packing, not one sentence per example
    assert np.mean(lengths == MAX_LEN) > 0.7
    assert json.loads((out / "stats.json").read_text()) == stats


def test_same_seed_gives_byte_identical_shards(built, corpus_subset, vocab_file, tmp_path):
    out, stats, _ = built
    again = tmp_path / "again"
    build(corpus_subset, vocab_file, again)
    names = sorted(p.name for p in out.glob("pretrain_data.tfrecord*"))
    assert names == sorted(p.name for p in again.glob("pretrain_data.tfrecord*"))
    for name in names:
        assert (out / name).read_bytes() == (again / name).read_bytes()
    other = tmp_path / "other_seed"
    build(corpus_subset, vocab_file, other, seed=7)
    assert (out / names[0]).read_bytes() != (other / names[0]).read_bytes()


def test_two_processes_give_the_same_examples(built, corpus_subset, vocab_file, tmp_path):
    _, stats, records = built
    out = tmp_path / "multi"
    multi_stats = build(corpus_subset, vocab_file, out, num_processes=2, num_out_files=4)
    assert len(list(out.glob("pretrain_data.tfrecord-*-of-4"))) == 4
    multi = read_records(str(out / "pretrain_data.tfrecord*"))

    def multiset(r):
        return collections.Counter(map(bytes, np.concatenate([r[n] for n in FEATURE_NAMES], axis=1)))

    assert multiset(multi) == multiset(records)
    assert multi_stats["train"] == stats["train"]


def test_each_job_packs_its_files_in_a_seeded_shuffled_order(vocab_file, tmp_path):
    """As the original's jobs shuffle their file lists (here seeded: --seed and the job): one file
    per fruit, one example each, read back in the order written."""
    fruits = ["apple", "banana", "cherry", "grape", "lemon", "mango", "orange", "peach"]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for fruit in fruits:
        (corpus / f"{fruit}.txt").write_text(f"the {fruit} is ripe .\n")
    build(corpus, vocab_file, tmp_path / "out", input_format="lines", num_out_files=1, seed=7)
    index = {token: i for i, token in enumerate(load_vocab(vocab_file))}
    ids = read_records(str(tmp_path / "out" / "pretrain_data.tfrecord-*"))["input_ids"]
    written = [next(f for f in fruits if index[f] in row) for row in ids]
    expected = list(fruits)
    random.Random("7:job0").shuffle(expected)
    assert written == expected != fruits


def test_eval_fraction_holds_out_whole_documents(corpus_subset, vocab_file, tmp_path):
    out = tmp_path / "with_eval"
    stats = build(corpus_subset, vocab_file, out, eval_fraction=0.1)
    assert (out / "eval" / "pretrain_data.tfrecord-0-of-1").exists()
    eval_records = read_records(str(out / "eval" / "pretrain_data.tfrecord*"))
    train_records = read_records(str(out / "pretrain_data.tfrecord*"))
    assert len(eval_records["input_ids"]) == stats["eval"]["examples"] > 0
    assert 0.03 < stats["eval_documents"] / stats["documents"] < 0.2
    train_rows = set(map(bytes, train_records["input_ids"]))
    assert not any(bytes(row) in train_rows for row in eval_records["input_ids"])


def test_reader_round_trip_and_sharding(built):
    out, stats, records = built
    pattern = str(out / "pretrain_data.tfrecord*")
    batch = 64
    dataset = make_dataset(pattern, MAX_LEN, batch, is_training=False)
    seen = [b["input_ids"].numpy() for b in dataset]
    assert all(s.dtype == np.int32 and s.shape == (batch, MAX_LEN) for s in seen[:-1])
    assert 0 < len(seen[-1]) <= batch  # evaluation keeps the last partial batch: every record, in order
    np.testing.assert_array_equal(np.concatenate(seen), records["input_ids"])

    # two input pipelines (replicas/workers) split the records between them, each half the global batch
    contexts = [tf.distribute.InputContext(2, i, 2) for i in range(2)]
    halves = [next(iter(make_dataset(pattern, MAX_LEN, batch, False, ctx)))["input_ids"].numpy()
              for ctx in contexts]
    assert halves[0].shape == (batch // 2, MAX_LEN)
    assert not set(map(bytes, halves[0])) & set(map(bytes, halves[1]))

    # training mode shuffles but a deterministic run repeats itself exactly
    def first_batches(seed):
        ds = make_dataset(pattern, MAX_LEN, batch, True, deterministic=True, seed=seed, shuffle_buffer=500)
        return np.concatenate([b["input_ids"].numpy() for b in ds.take(3)])

    np.testing.assert_array_equal(first_batches(1), first_batches(1))
    assert not np.array_equal(first_batches(1), first_batches(2))


def test_reads_records_written_in_the_original_schema(tmp_path):
    """A tf.train.Example written by hand exactly as the original's ExampleWriter does."""
    path = tmp_path / "pretrain_data.tfrecord-0-of-1"
    ids = [101, 2023, 2003, 102, 2178, 102] + [0] * (MAX_LEN - 6)
    feature = {
        "input_ids": ids,
        "input_mask": [1] * 6 + [0] * (MAX_LEN - 6),
        "segment_ids": [0, 0, 0, 0, 1, 1] + [0] * (MAX_LEN - 6),
    }
    example = tf.train.Example(features=tf.train.Features(feature={
        k: tf.train.Feature(int64_list=tf.train.Int64List(value=v)) for k, v in feature.items()}))
    with tf.io.TFRecordWriter(str(path)) as writer:
        for _ in range(4):
            writer.write(example.SerializeToString())
    batch = next(iter(make_dataset(str(path), MAX_LEN, 4, is_training=False)))
    for name, values in feature.items():
        np.testing.assert_array_equal(batch[name].numpy(), np.array([values] * 4, np.int32))


def test_reader_errors(built, tmp_path):
    from electra_tf.errors import InputError
    out, _, _ = built
    with pytest.raises(InputError, match="no TFRecord file matches"):
        make_dataset(str(tmp_path / "nothing*"), MAX_LEN, 8, True)
    with pytest.raises(InputError, match="records hold 128 tokens but max_seq_length is 256"):
        make_dataset(str(out / "pretrain_data.tfrecord*"), 256, 8, True)


def test_a_run_with_another_vocab_than_the_builds_is_refused(built, vocab_file, tmp_path):
    """stats.json's vocab_sha256 against the run's vocab_file: the same line count passes
    run_pretraining's size check, but the ids would index other rows."""
    from electra_tf.errors import InputError
    out, _, _ = built
    files = sorted(str(path) for path in out.glob("pretrain_data.tfrecord*"))
    check_build_vocab(files, str(vocab_file))  # its own vocab
    swapped = tmp_path / "vocab.txt"
    lines = Path(vocab_file).read_text(encoding="utf-8").splitlines()
    swapped.write_text("\n".join(lines[:1000] + [lines[1001], lines[1000]] + lines[1002:]) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=rf"records were built with another vocab than vocab_file {swapped}"):
        check_build_vocab(files, str(swapped))


def test_a_run_with_other_casing_than_the_builds_is_refused(built):
    """stats.json's do_lower_case and do_strip_accents against the run's: the model's config.json
    records the run's, and fine-tuning normalises text as it says, so a cased build pretrained as
    uncased is refused, and a build that kept accents pretrained as stripping them (German's
    umlauts, say); accents are compared only where both lower-case (no effect otherwise)."""
    import types
    from electra_tf.errors import InputError
    out, stats, _ = built
    assert stats["do_lower_case"] is True and stats["do_strip_accents"] is True
    files = sorted(str(path) for path in out.glob("pretrain_data.tfrecord*"))
    run = lambda lower, strip: types.SimpleNamespace(do_lower_case=lower, do_strip_accents=strip)  # noqa: E731
    check_build_casing(files, run(True, True))
    with pytest.raises(InputError, match=r'built with do_lower_case true .*set "do_lower_case": true in --hparams'):
        check_build_casing(files, run(False, True))
    with pytest.raises(InputError, match=r'built with do_strip_accents true .*set "do_strip_accents": true in'):
        check_build_casing(files, run(True, False))
    stats_file = out / "stats.json"
    original = stats_file.read_text()
    try:
        stats_file.write_text(json.dumps({**stats, "do_lower_case": False, "do_strip_accents": False}))
        check_build_casing(files, run(False, True))  # a cased build: accents are not stripped either way
    finally:
        stats_file.write_text(original)


def test_fast_serialization_parses_like_tf_train_example():
    """The hand-assembled protobuf bytes decode to exactly the padded features, for any id size."""
    from pretrain_data.records import serialize_examples
    examples = [([101, 7, 127, 128, 16383, 16384, 30521, 2 ** 21 + 5, 102], [0, 0, 0, 0, 0, 1, 1, 1, 1]),
                ([101, 1, 102], [0, 0, 0]),
                ([101] + [5000] * (MAX_LEN - 2) + [102], [0] * MAX_LEN)]
    ids = np.zeros([3, MAX_LEN], np.int64)
    segments = np.zeros([3, MAX_LEN], np.int64)
    for row, (row_ids, row_segments) in enumerate(examples):
        ids[row, :len(row_ids)] = row_ids
        segments[row, :len(row_segments)] = row_segments
    lengths = np.array([len(e[0]) for e in examples])
    records = list(serialize_examples(ids, segments, lengths))
    assert len(records) == len(examples)
    for (row_ids, row_segments), record in zip(examples, records):
        parsed = tf.train.Example.FromString(record).features.feature
        padding = [0] * (MAX_LEN - len(row_ids))
        assert list(parsed["input_ids"].int64_list.value) == row_ids + padding
        assert list(parsed["input_mask"].int64_list.value) == [1] * len(row_ids) + padding
        assert list(parsed["segment_ids"].int64_list.value) == row_segments + padding
        assert set(parsed) == set(FEATURE_NAMES)
