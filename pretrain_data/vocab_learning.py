"""Learning a BERT-format WordPiece vocab from a raw corpus (what `build_vocab.py` runs).

The released ELECTRA models reuse BERT's uncased vocab; for another language or domain a vocab
has to be learned (original issue #58). Three stages:
  1. count words: the corpus is streamed in batches of lines through the project's own
     `Tokenizer.basic_tokenize`, so the words are split exactly as tokenization will split them
     later (same cleaning, casing, accent stripping and punctuation/CJK splitting);
  2. learn: tensorflow-text's WordPiece learner (`wordpiece_tokenizer_learner_lib`) keeps every
     subword whose count reaches a threshold. Its own binary search over the threshold runs the
     (pure Python, seconds per call) learner about a dozen times; here the threshold is found by
     interpolating in log-log space between runs, which takes 2 or 3 of them on Wikipedia;
  3. write: `[PAD]` (id 0), `[UNK] [CLS] [SEP] [MASK]`, optional `[unused0]..`, then every
     character `x`, then the learned subwords by decreasing count, which always include `##x`
     for every character (so any word made of known characters has a tokenization); one token
     per line, written atomically.
"""

import collections
import dataclasses
import io
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence

import tensorflow as tf
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

from electra_tf import disk_full
from electra_tf.errors import InputError
from electra_tf.progress import Progress
from electra_tf.tokenization import MAX_CHARS_PER_WORD, SPECIAL_TOKENS, SUFFIX_INDICATOR, Tokenizer
from pretrain_data import corpus as corpus_lib
from pretrain_data.stop_signals import stopped_by_signals

COUNT_BATCH_LINES = 4096
SLACK_RATIO = 0.05  # accept any size in [vocab_size * (1 - SLACK_RATIO), vocab_size], as tf_text
NUM_ITERATIONS = 4  # tf_text learner's default refinement passes
MAX_TOKEN_LENGTH = 50  # tf_text learner's default: longer words are not counted for learning
MAX_EVALUATIONS = 20  # each narrows the threshold range, so this is a bound never reached in practice
GUESS_SLOPE = 0.9  # learned subwords ~ threshold ** -0.9 (measured on English Wikipedia)
WORDS_PER_SUBWORD = 1.6  # learned subwords ~ 1.6 x whole words reaching the threshold (same data)


@dataclasses.dataclass
class VocabOptions:
    """Every setting of a vocab build; the CLI flags map onto these fields one to one."""

    corpus: Sequence[str]  # corpus files and/or directories (searched recursively)
    output: str
    vocab_size: int = 30522
    input_format: str = "lines"
    do_lower_case: bool = True
    do_strip_accents: bool = True
    num_unused: int = 0
    max_unique_chars: int = 1000  # alphabet cap; the rarest characters beyond it become [UNK]
    max_lines: Optional[int] = None
    overwrite: bool = False
    quiet: bool = False


@dataclasses.dataclass
class LearnedVocab:
    """A learned vocab and how it was reached."""

    tokens: List[str]  # reserved tokens first, [PAD] at id 0
    threshold: int  # minimum subword count of the final learner run
    evaluations: int  # learner runs the threshold search took
    alphabet_size: int  # characters in the vocab (each as `x` and `##x`)
    characters_seen: int  # distinct characters of the counted words
    unk_rate: float  # share of the corpus words that will tokenize to [UNK]


def reserved_tokens(num_unused: int) -> List[str]:
    """[PAD] [UNK] [CLS] [SEP] [MASK] [unused0] .. [unused<num_unused - 1>]."""
    return list(SPECIAL_TOKENS) + [f"[unused{i}]" for i in range(num_unused)]


def corpus_files(paths: Sequence[str]) -> List[corpus_lib.CorpusFile]:
    """Files named directly plus the files below named directories; InputError for a bad path."""
    if not paths:
        raise InputError("no corpus file or directory given")
    files = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            files.extend(corpus_lib.list_corpus_files(path))
        elif path.is_file():
            files.append(corpus_lib.CorpusFile(path, path.name, path.stat().st_size))
        else:
            raise InputError(f"corpus {path}: no such file or directory")
    if not any(f.size for f in files):
        raise InputError(f"corpus {' '.join(map(str, paths))}: all corpus files are empty")
    return files


def iter_lines(files: Sequence[corpus_lib.CorpusFile], input_format: str,
               on_file_done: Callable[[int], None] = lambda size: None) -> Iterator[str]:
    """The text lines of the corpus, file by file (one file in memory at a time)."""
    for corpus_file in files:
        docs = corpus_lib.read_documents(corpus_file.path, input_format, blanks_separate_docs=False)
        for document in docs.documents:
            yield from document
        on_file_done(corpus_file.size)


def basic_tokenizer(do_lower_case: bool, do_strip_accents: bool) -> Callable[[tf.Tensor], tf.RaggedTensor]:
    """The project tokenizer's word splitting as a compiled function: tf.string [B] -> [B, (words)].

    `Tokenizer` needs a vocab file, whose content word splitting never uses: a throwaway one
    holding only the special tokens is enough.
    """
    with tempfile.TemporaryDirectory() as tmp:
        vocab_file = Path(tmp) / "vocab.txt"
        vocab_file.write_text("\n".join(SPECIAL_TOKENS) + "\n", encoding="utf-8")
        tokenizer = Tokenizer(vocab_file, do_lower_case=do_lower_case, strip_accents=do_strip_accents)
    return tf.function(tokenizer.basic_tokenize, input_signature=[tf.TensorSpec([None], tf.string)],
                       autograph=False)


def count_words(lines: Iterator[str], split_words: Callable, max_lines: Optional[int] = None,
                batch_lines: int = COUNT_BATCH_LINES) -> collections.Counter:
    """Word -> number of occurrences over the first `max_lines` lines (all if None), batch by batch."""
    counts = collections.Counter()
    batch: List[str] = []
    seen = 0
    for line in lines:
        if max_lines is not None and seen >= max_lines:
            break
        batch.append(line)
        seen += 1
        if len(batch) == batch_lines:
            counts.update(split_words(tf.constant(batch)).flat_values.numpy())
            batch = []
    if batch:
        counts.update(split_words(tf.constant(batch)).flat_values.numpy())
    return collections.Counter({word.decode("utf-8"): n for word, n in counts.items()})


def learn_vocab(word_counts: Dict[str, int], vocab_size: int, reserved: Sequence[str],
                max_unique_chars: int = 1000, log: Callable[[str], None] = lambda line: None) -> LearnedVocab:
    """Learns a WordPiece vocab of at most `vocab_size` tokens (and at least 95% of it if the corpus allows).

    The alphabet is every character of the counted words, the most frequent `max_unique_chars`
    if there are more; words with a character outside it cannot be tokenized and become [UNK].
    Raises InputError when `vocab_size` cannot hold the reserved tokens plus the alphabet twice
    (`x` and `##x`).
    """
    reserved = list(reserved)
    candidates = learner.get_input_words(list(word_counts.items()), reserved, MAX_TOKEN_LENGTH)
    num_chars = len(learner.extract_char_tokens(candidates))
    allowed = learner.get_allowed_chars(candidates, max_unique_chars)
    words = learner.filter_input_words(candidates, allowed, -1)  # by decreasing count
    alphabet = learner.extract_char_tokens(words)  # exactly the characters the vocab will hold
    floor = len(reserved) + 2 * len(alphabet)  # the vocab before any multi-character subword
    if floor > vocab_size:
        raise InputError(
            f"--vocab-size {vocab_size} cannot hold the {len(reserved)} reserved tokens plus 2 x "
            f"{len(alphabet)} character tokens (x and ##x for the {len(alphabet)} characters kept of "
            f"{num_chars} seen): raise --vocab-size to at least {floor} or lower --max-unique-chars")
    params = learner.Params(
        upper_thresh=None, lower_thresh=None, num_iterations=NUM_ITERATIONS, max_input_tokens=-1,
        max_token_length=MAX_TOKEN_LENGTH, max_unique_chars=max_unique_chars, vocab_size=vocab_size,
        slack_ratio=SLACK_RATIO, include_joiner_token=True, joiner=SUFFIX_INDICATOR, reserved_tokens=reserved)
    min_size = max(floor, math.ceil(vocab_size * (1 - SLACK_RATIO)))

    evaluations = 0

    def evaluate(threshold: int) -> List[str]:
        nonlocal evaluations
        evaluations += 1
        start = time.monotonic()
        tokens = learner.learn_with_thresh(words, threshold, params)
        log(f"learning: count threshold {threshold:,} -> {len(tokens):,} tokens (target {min_size:,}.."
            f"{vocab_size:,}), {time.monotonic() - start:.1f}s")
        return tokens

    counts_desc = [count for _, count in words]
    guess_index = int((vocab_size - floor) / WORDS_PER_SUBWORD)
    first_guess = counts_desc[guess_index] if guess_index < len(counts_desc) else 1
    threshold, tokens = _search_threshold(
        evaluate, first_guess, counts_desc[0] + 1 if counts_desc else 1, floor, min_size, vocab_size)
    total = sum(word_counts.values())
    unknown = sum(count for word, count in word_counts.items()
                  if len(word) > MAX_CHARS_PER_WORD or not alphabet.issuperset(word))
    return LearnedVocab(tokens, threshold, evaluations, len(alphabet), num_chars,
                        unknown / total if total else 0.0)


def _search_threshold(evaluate: Callable[[int], List[str]], first_guess: int, above_all: int,
                      floor: int, min_size: int, max_size: int):
    """Smallest-effort search for a count threshold whose vocab size lies in [min_size, max_size].

    Sizes shrink as the threshold grows; `above_all` (a threshold no subword reaches) gives the
    bare alphabet, `floor` tokens. With both sides of the target bracketed, the next threshold
    interpolates log(size - floor) linearly in log(threshold), kept inside the inner 80% of the
    bracket so that each evaluation narrows it; with one side known it extrapolates with
    GUESS_SLOPE. Returns (threshold, tokens); the tokens never exceed max_size.
    """
    big = None  # (log threshold, log excess) of the highest threshold seen giving > max_size
    small = None  # (point, threshold, tokens) of the lowest threshold seen giving <= max_size
    low, high = 0, above_all  # thresholds strictly between them are still worth trying
    target = math.log(max(1.0, (min_size + max_size) / 2 - floor))
    threshold = min(max(first_guess, 1), above_all - 1) if above_all > 1 else 1
    for _ in range(MAX_EVALUATIONS):
        tokens = evaluate(threshold)
        point = (math.log(threshold), math.log(max(1, len(tokens) - floor)))
        if len(tokens) <= max_size:
            small, high = (point, threshold, tokens), threshold
            if len(tokens) >= min_size:
                return threshold, tokens
        else:
            big, low = point, threshold
        if high - low <= 1:
            break
        if big and small:
            (x0, y0), (x1, y1) = big, small[0]
            x = x0 + (target - y0) * (x1 - x0) / (y1 - y0) if y1 != y0 else (x0 + x1) / 2
            x = min(max(x, x0 + 0.1 * (x1 - x0)), x1 - 0.1 * (x1 - x0))
        else:
            x0, y0 = big or small[0]
            x = x0 + (y0 - target) / GUESS_SLOPE
        threshold = min(max(round(math.exp(x)), low + 1), high - 1)
    if small is None:
        return above_all, evaluate(above_all)
    return small[1], small[2]


def check_output(output: Path, overwrite: bool) -> None:
    """InputError unless `output` can be written: not a directory, and absent unless overwriting."""
    if output.is_dir():
        raise InputError(f"--output {output}: is a directory, expected a file path")
    if output.exists() and not overwrite:
        raise InputError(f"--output {output}: already exists (pass --overwrite to replace it)")


def write_vocab(tokens: Sequence[str], path: str, overwrite: bool = False) -> None:
    """Writes one token per line via a temporary sibling file renamed into place."""
    output = Path(path)
    check_output(output, overwrite)
    output.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as f:
            f.write("".join(f"{token}\n" for token in tokens))
        os.chmod(tmp, 0o644)  # mkstemp creates it owner-only
        os.replace(tmp, output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def validate(options: VocabOptions) -> List[corpus_lib.CorpusFile]:
    """Checks every setting before any work; returns the corpus files."""
    if options.input_format not in corpus_lib.INPUT_FORMATS:
        raise InputError(f"--input-format {options.input_format!r}: expected one of "
                         f"{', '.join(corpus_lib.INPUT_FORMATS)}")
    for flag, value, minimum in (("--vocab-size", options.vocab_size, 1), ("--num-unused", options.num_unused, 0),
                                 ("--max-unique-chars", options.max_unique_chars, 1),
                                 ("--max-lines", options.max_lines, 1)):
        if value is not None and value < minimum:
            raise InputError(f"{flag} {value}: must be at least {minimum}")
    if len(reserved_tokens(options.num_unused)) >= options.vocab_size:
        raise InputError(f"--vocab-size {options.vocab_size}: leaves no room beside the "
                         f"{len(reserved_tokens(options.num_unused))} reserved tokens")
    check_output(Path(options.output), options.overwrite)
    return corpus_files(options.corpus)


def build_vocab(options: VocabOptions) -> Dict:
    """Counts, learns and writes a vocab (see the module docstring); returns a summary. SIGTERM /
    SIGINT and a full disk end it with one line, with no file written (`write_vocab`)."""
    output = Path(options.output)
    kept = f"nothing was written to {output}" + (" (the existing file is untouched)" if output.exists() else "")
    with stopped_by_signals(f"learning the vocab {output}", kept), \
            disk_full.reported(lambda: f"{kept}: free space and run the same command again", path=output):
        return _build_vocab(options)


def _build_vocab(options: VocabOptions) -> Dict:
    files = validate(options)
    stream = io.StringIO() if options.quiet else sys.stderr
    start = time.monotonic()
    progress = Progress(sum(f.size for f in files) / 1e6, "counting words", unit=" MB", stream=stream)
    done = 0

    def advance(num_bytes: int) -> None:
        nonlocal done
        done += num_bytes
        progress.update(done / 1e6)

    split_words = basic_tokenizer(options.do_lower_case, options.do_strip_accents)
    counts = count_words(iter_lines(files, options.input_format, advance), split_words, options.max_lines)
    progress.finish()
    if not counts:
        raise InputError(f"corpus {' '.join(map(str, options.corpus))}: no words found")
    learned = learn_vocab(counts, options.vocab_size, reserved_tokens(options.num_unused),
                          options.max_unique_chars, log=lambda line: print(line, file=stream, flush=True))
    write_vocab(learned.tokens, options.output, options.overwrite)
    return {"vocab_size": len(learned.tokens), "threshold": learned.threshold,
            "evaluations": learned.evaluations, "alphabet_size": learned.alphabet_size,
            "characters_seen": learned.characters_seen,
            "unk_rate": learned.unk_rate, "distinct_words": len(counts),
            "words": sum(counts.values()), "seconds": time.monotonic() - start}
