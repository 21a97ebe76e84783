"""Shared test fixtures: the real data beside the checkout, and quiet TensorFlow logs."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


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
