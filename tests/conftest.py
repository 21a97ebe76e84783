"""Shared test fixtures: the real data beside the checkout, quiet TensorFlow logs, and TensorFlow's
process-wide switches reset after each test file."""

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# What the scripts do at start-up (electra_tf.cli.use_tf_keras_only), here before any test imports
# TensorFlow: no Keras 3 in the test processes, nor in the many fresh processes they start, which
# inherit it (1.5-2 s of each one's start). test_tf_keras_only removes it where it tests the default.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# `make test` runs two pytest processes on CI's 2 cores. TensorFlow's default pool (and torch's) gives
# each process one compute thread per core, so four spinning threads share two cores; one per
# process's share of the cores ran a 41-test subset in 345 s instead of 457 (2026-12-03, AVX2 EPYC).
# The processes the tests start inherit it; a lone pytest process (and xdist's controller, whose
# environment the workers inherit) keeps the default, one per core.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    _THREADS = str(max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", _THREADS)
    os.environ.setdefault("OMP_NUM_THREADS", _THREADS)

# The files that take longest (a fresh clone's `make test`, 2026-12-03), started first so that
# neither process is left alone with a long file at the end; the rest keep their order. The
# Makefile's --no-loadscope-reorder makes pytest-xdist hand files out in this order.
LONGEST_FIRST = ("test_replication_runs.py", "test_run_pretraining.py", "test_saved_model_squad.py",
                 "test_saved_model_finetuned.py", "test_peer_run.py", "test_pretraining_workers.py",
                 "test_faults.py", "test_full_disk.py", "test_fill_mask.py", "test_predict.py",
                 "test_pretraining_objectives.py", "test_user_tasks.py", "test_finetuning_workers.py",
                 "test_resume_and_workers.py", "test_checkpoint_hf.py")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(autouse=True, scope="module")
def tensorflow_switches_reset():
    """Each test file leaves TensorFlow's process-wide switches as a process starts: a
    deterministic run (electra_tf.training.distribution.set_determinism) turns on op determinism
    and tf_keras's tf.random.Generator dropout for the whole process, which changed the dropout
    masks, traces and saved variables of whichever file the same pytest worker ran next (a bf16
    test failed so after test_full_disk.py); float16 on CPU (set_precision) turns grappler's
    remapper off. Module scope: set up before, torn down after, the file's own module fixtures."""
    yield
    keras = sys.modules.get("tf_keras")
    if keras is not None and keras.backend.experimental.is_tf_random_generator_enabled():
        keras.backend.experimental.disable_tf_random_generator()
    if "tensorflow" in sys.modules:
        from tensorflow.python.framework import config  # the switch's off side is not in tf.config
        if config.is_op_determinism_enabled():
            config.disable_op_determinism()
        import tensorflow as tf
        tf.config.optimizer.set_experimental_options({"remapping": None})  # None: TensorFlow's default


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the checkout (GLUE, SQuAD, CoNLL-2000, vocab, Wikipedia corpus)."""
    if not SHARED_DATA.is_dir():
        reason = f"real data not found at {SHARED_DATA} (expected ../shared/data beside the checkout)"
        if os.environ.get("CI"):
            pytest.fail(reason)  # CI always has ../shared: a missing copy is a failure, not a skip
        pytest.skip(reason)
    return SHARED_DATA


@pytest.fixture(scope="session")
def vocab_file(shared_data) -> Path:
    """The BERT uncased WordPiece vocab that ELECTRA uses."""
    return shared_data / "vocab" / "vocab.txt"


@pytest.fixture(scope="session")
def corpus_dir(shared_data) -> Path:
    """80 WikiExtractor files of English Wikipedia (about 1 MB each)."""
    return shared_data / "corpus" / "enwiki_2015_wikiextractor" / "AA"


@pytest.fixture(scope="session")
def wikipedia_rows(corpus_dir, vocab_file):
    """[10000, 128] (input_ids, input_mask) packed from Wikipedia with the BERT vocab: 1-2 segments,
    some padding; [PAD], [CLS], [SEP], [MASK] are ids 0, 101, 102, 103."""
    import numpy as np
    from official.nlp.tools.tokenization import FullTokenizer
    PAD, CLS, SEP, MASK = 0, 101, 102, 103
    SEQ_LEN, NUM_ROWS = 128, 10_000
    tokenizer = FullTokenizer(str(vocab_file), do_lower_case=True)
    assert tokenizer.convert_tokens_to_ids(["[PAD]", "[CLS]", "[SEP]", "[MASK]"]) == [
        PAD, CLS, SEP, MASK]
    rng = np.random.default_rng(0)
    rows, stream = [], []

    def emit(tokens):
        if rng.random() < 0.5 and len(tokens) > 1:  # two segments
            cut = int(rng.integers(1, len(tokens)))
            row = [CLS] + tokens[:cut] + [SEP] + tokens[cut:] + [SEP]
        else:
            row = [CLS] + tokens + [SEP]
        rows.append(row[:SEQ_LEN] + [PAD] * (SEQ_LEN - len(row[:SEQ_LEN])))

    for path in sorted(corpus_dir.glob("wiki_*")):
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line.startswith("<doc") or line == "</doc>":  # document boundary
                if stream:
                    emit(stream[: SEQ_LEN - 3])
                stream = []
            elif line:
                stream += tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line))
                while len(stream) >= SEQ_LEN:  # a fifth of the rows get a random short length
                    size = SEQ_LEN - 3 if rng.random() < 0.8 else int(rng.integers(1, SEQ_LEN - 3))
                    emit(stream[:size])
                    stream = stream[size:]
            if len(rows) >= NUM_ROWS:
                ids = np.array(rows[:NUM_ROWS], np.int32)
                return ids, (ids != PAD).astype(np.int32)
    pytest.fail("the corpus gave fewer than 10,000 rows")


@pytest.fixture(scope="session")
def pretraining_data_dir(corpus_dir, vocab_file, tmp_path_factory) -> Path:
    """A data dir laid out as the original's: vocab.txt and pretrain_tfrecords/ (64-token records
    built from two Wikipedia files, 10 % of documents held out in pretrain_tfrecords/eval/)."""
    from pretrain_data.build import BuildOptions, build_pretraining_dataset
    root = tmp_path_factory.mktemp("data_dir")
    corpus = tmp_path_factory.mktemp("corpus")
    for path in sorted(corpus_dir.iterdir())[:2]:
        (corpus / path.name).symlink_to(path)
    (root / "vocab.txt").symlink_to(vocab_file)
    build_pretraining_dataset(BuildOptions(str(corpus), str(vocab_file), str(root / "pretrain_tfrecords"),
                                           max_seq_length=64, input_format="wikiextractor",
                                           eval_fraction=0.1, quiet=True))
    return root


def pytest_collection_modifyitems(items):
    """LONGEST_FIRST's files first, in its order; a stable sort keeps each file's own test order."""
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
