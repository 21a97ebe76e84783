"""BERT/ELECTRA WordPiece tokenization as batched TensorFlow ops (tensorflow-text).

Reproduces the original `FullTokenizer(vocab_file, do_lower_case, strip_accents)` token for token:
  1. clean: drop NUL, U+FFFD and every "C*" character (control, format, private use, unassigned)
     except \\t \\n \\r; whitespace (\\t \\n \\r and Z*) separates words;
  2. every CJK ideograph is a word of its own;
  3. if do_lower_case: Python's `str.lower()` (ICU full case mapping, final sigma included) and,
     only then, if strip_accents: NFD and removal of "Mn" marks;
  4. every punctuation character (non-alphanumeric ASCII and Unicode "P*") is a word of its own;
  5. greedy longest-match-first WordPiece with "##"; a word of over 200 characters, or one with no
     full match, becomes a single [UNK].
Steps 1-4 are a few whole-line RE2/ICU ops (the ICU ones only on the non-ASCII lines of a batch);
step 5 is tf_text's FastWordpieceTokenizer (linear time, same output as the greedy loop). Its length
cap counts UTF-8 bytes, so the original's 200-*character* rule is applied here, before it.

Known differences from the original run under Python 3.11 (Unicode 14): characters whose Unicode
data is newer or older in TensorFlow's RE2/ICU tables than in Python's `unicodedata` -- the 40
capital letters added in Unicode 14 (Vithkuqi, U+2C2F, U+A7C0, U+A7D0, U+A7D6, U+A7D8) are not
lower-cased, and code points assigned after Unicode 14 are kept where Python drops them as
unassigned. None occurs in the corpus or GLUE; tests/test_tokenization.py checks every code
point that Unicode 14 assigns.
"""

import functools
import re
import types
from pathlib import Path
from typing import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from electra_tf.errors import InputError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
UNK_TOKEN = SPECIAL_TOKENS[1]
MAX_CHARS_PER_WORD = 200  # the original WordpieceTokenizer's max_input_chars_per_word
SUFFIX_INDICATOR = "##"

# RE2 patterns mirroring the original's per-character predicates.
# Control: category C* except \t \n \r, i.e. anything outside L M N P S Z (RE2 cannot name Cn).
_CLEAN = r"[^\p{L}\p{M}\p{N}\p{P}\p{S}\p{Z}\t\n\r]|\x{FFFD}"
_PUNCTUATION = r"!-/:-@\[-`{-~\p{P}"
_CJK = (
    r"\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
    r"\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}"
)
# Rewritten as " \1 ": punctuation and CJK (captured) become words of their own; Z* other than the
# ASCII space becomes a space (tf_text's WhitespaceTokenizer mis-splits multi-byte whitespace).
_SPLIT_OFF = rf"([{_PUNCTUATION}{_CJK}])|[^\P{{Z}} ]"
# The same rules on an ASCII line, where they are plain: the C0 controls and DEL are dropped except
# \t \n \r (whitespace); lower-casing is ASCII's and accent stripping the identity; the punctuation
# is every printable non-alphanumeric character.
_ASCII_CLEAN = str.maketrans({c: None for c in [*range(32), 127] if chr(c) not in "\t\n\r"})
_ASCII_SPLIT_OFF = re.compile(r"([!-/:-@\[-`{-~])")
_WORD_CACHE_SIZE = 1 << 16  # words whose ids `Tokenizer.tokenize_batch` keeps (a few MB)
# Batches of up to this many lines take the Python path: one TensorFlow call costs about 1 ms more
# but then 11 us a line against Python's 27 (SST-2 train, 2 cores), a crossover near 56 lines.
_PYTHON_MAX_LINES = 48
# A SentencePiece .vocab line: the piece, a tab and its log-probability (`<unk>\t0`, `▁the\t-3.1`).
_SENTENCEPIECE_LINE = re.compile(r"^\S+\t-?\d+(\.\d+)?(e-?\d+)?$")


def load_vocab(vocab_file) -> list[str]:
    """Reads a WordPiece vocab: one token per line, stripped as in the original; id = line index.

    Raises InputError naming the file when it is unreadable or empty, when [PAD] is not id 0,
    or when any of [UNK] [CLS] [SEP] [MASK] is missing.
    """
    path = Path(vocab_file)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeError) as e:
        raise InputError(f"vocab file {path}: cannot read it ({e})") from e
    lines = text.split("\n")  # not splitlines(): only \n ends a line, as the original's readline
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line starts no token
    vocab = [line.strip() for line in lines]
    if not vocab:
        raise InputError(f"vocab file {path}: it is empty")
    if _SENTENCEPIECE_LINE.match(vocab[0]):
        raise InputError(f"vocab file {path}: line 1 is {vocab[0]!r}, a SentencePiece vocab's token and score; "
                         "ELECTRA reads WordPiece vocabs (a token a line, [PAD] [UNK] [CLS] [SEP] [MASK] among "
                         "them): learn one from your corpus with build_vocab.py")
    if vocab[0] != "[PAD]":
        raise InputError(f"vocab file {path}: line 1 (id 0) must be [PAD], found {vocab[0]!r}")
    missing = [token for token in SPECIAL_TOKENS[1:] if token not in vocab]
    if missing:
        raise InputError(f"vocab file {path}: missing special token(s) {', '.join(missing)}")
    return vocab


def continuation_ids(vocab: Sequence[str]) -> list[int]:
    """The ids of the WordPiece tokens that continue a word (they start with "##"), which
    whole-word masking keeps with the piece before them."""
    return [i for i, token in enumerate(vocab) if token.startswith("##")]


def special_ids(vocab: Sequence[str]) -> dict[str, int]:
    """The ids pretraining needs ({cls_id, sep_id, mask_id}) of a vocab read by `load_vocab`."""
    return {"cls_id": vocab.index("[CLS]"), "sep_id": vocab.index("[SEP]"), "mask_id": vocab.index("[MASK]")}


def _unique_vocab(vocab: list[str]) -> list[str]:
    """The vocab with each repeated token kept only at its last id (the original's dict keeps the
    last); earlier copies become placeholders no cleaned word can match (FastWordpiece rejects
    repeats; its trie keys end at NUL, hence \x01)."""
    last = {token: i for i, token in enumerate(vocab)}
    return [token if last[token] == i else f"\x01duplicate{i}" for i, token in enumerate(vocab)]


class Tokenizer(tf.Module):
    """ELECTRA's FullTokenizer as TensorFlow ops: strings [B] -> token ids [B, (tokens)].

    Usable eagerly, in tf.function, tf.data and SavedModels (the WordPiece model is a tracked
    resource of this module).
    """

    # tf.Module's `variables` and `submodules` (which a SavedModel's save reads of every module holding
    # this one) would walk the 30k vocab strings each time: a tiny discriminator's export took 6.6 s
    # with them, 4.9 s without (2026-12-07).
    _TF_MODULE_IGNORED_PROPERTIES = tf.Module._TF_MODULE_IGNORED_PROPERTIES | {"vocab", "_token_to_id"}

    def __init__(self, vocab_file, do_lower_case=True, strip_accents=True):
        super().__init__(name="tokenizer")
        # A tuple of strings and a read-only mapping: tf.Module would wrap a list or dict for
        # checkpoint tracking element by element, which costs half a second for a 30k vocab.
        self.vocab = tuple(load_vocab(vocab_file))
        self.vocab_size = len(self.vocab)
        self.do_lower_case = bool(do_lower_case)
        self.strip_accents = bool(strip_accents)  # only acts when lower-casing, as in the original
        self._token_to_id = types.MappingProxyType({token: i for i, token in enumerate(self.vocab)})
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            self._token_to_id[token] for token in SPECIAL_TOKENS
        )
        self._whitespace = tf_text.WhitespaceTokenizer()
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=_unique_vocab(list(self.vocab)),
            suffix_indicator=SUFFIX_INDICATOR,
            max_bytes_per_word=4 * MAX_CHARS_PER_WORD,  # never binding: the char cap comes first
            token_out_type=tf.int32,
            unknown_token=UNK_TOKEN,
            no_pretokenization=True,  # input words are already split
        )
        self._tokenize_flat = tf.function(
            self._flat_ids, input_signature=[tf.TensorSpec([None], tf.string)], autograph=False
        )
        self._ascii_word_ids = functools.lru_cache(_WORD_CACHE_SIZE)(self._greedy_word_ids)

    @classmethod
    def of_config(cls, vocab_file, config) -> "Tokenizer":
        """The tokenizer a pretraining or fine-tuning config's model reads text with: its
        `do_lower_case` and `do_strip_accents`."""
        return cls(vocab_file, do_lower_case=config.do_lower_case, strip_accents=config.do_strip_accents)

    def basic_tokenize(self, texts) -> tf.RaggedTensor:
        """tf.string [B] -> tf.string [B, (words)]: cleaned, cased as configured, punctuation-split.

        These are the words WordPiece sees (the original BasicTokenizer's output), UTF-8 encoded.
        """
        texts = tf.convert_to_tensor(texts, tf.string)  # [B]
        texts = tf.strings.regex_replace(texts, _CLEAN, "")  # before lower: ICU stops at a NUL
        if self.do_lower_case:
            texts = self._lower_case(texts)
        texts = tf.strings.regex_replace(texts, _SPLIT_OFF, r" \1 ")
        return self._whitespace.tokenize(texts)  # [B, (words)]

    def _lower_case(self, texts):
        """tf.string [B] -> [B]: `str.lower()`, then NFD without Mn if strip_accents.

        ASCII lines (most of English text) take the plain byte path; only the others go through ICU.
        """
        is_ascii = tf.strings.length(texts) == tf.strings.length(texts, unit="UTF8_CHAR")  # [B]
        partitions = tf.cast(is_ascii, tf.int32)
        rows = tf.dynamic_partition(tf.range(tf.size(texts)), partitions, 2)
        other, ascii_only = tf.dynamic_partition(texts, partitions, 2)
        other = tf.strings.lower(other, encoding="utf-8")  # ICU full case mapping, like str.lower
        if self.strip_accents:
            other = tf_text.normalize_utf8(other, "NFD")
            other = tf.strings.regex_replace(other, r"\p{Mn}", "")
        return tf.dynamic_stitch(rows, [other, tf.strings.lower(ascii_only)])  # [B]

    def tokenize(self, texts) -> tf.RaggedTensor:
        """tf.string [B] -> int32 token ids [B, (tokens)] (a scalar string gives int32 [tokens])."""
        texts = tf.convert_to_tensor(texts, tf.string)
        if texts.shape.rank == 0:
            return self.tokenize(texts[tf.newaxis])[0]
        words = self.basic_tokenize(texts)  # [B, (words)]
        flat_words = words.flat_values  # [W]
        too_long = tf.strings.length(flat_words, unit="UTF8_CHAR") > MAX_CHARS_PER_WORD  # [W]
        # "[UNK]" is a whole vocab token, hence its own longest match: exactly one [UNK] id.
        flat_words = tf.where(too_long, UNK_TOKEN, flat_words)
        pieces = self._wordpiece.tokenize(flat_words)  # [W, (pieces)]
        return words.with_flat_values(pieces).merge_dims(1, 2)  # [B, (tokens)]

    def _flat_ids(self, texts):
        ids = self.tokenize(texts)  # [B, (tokens)]
        return ids.flat_values, ids.row_splits  # [T], [B + 1]

    def tokenize_batch(self, lines: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Eager fast path: lines -> (flat ids int32 [T], row_splits int64 [len(lines) + 1]).

        Line i's ids are flat[row_splits[i]:row_splits[i + 1]]. In a small batch (a served request)
        ASCII lines are tokenized in Python (`_ascii_ids`: the same ids, without the TensorFlow call
        that took 0.9 of a one-sentence request's 1.0 ms featurizing); the others in one call of
        `tokenize` (traced once for any batch size).
        """
        small = len(lines) <= _PYTHON_MAX_LINES
        ids = [self._ascii_ids(line) if small and line.isascii() else None for line in lines]
        others = [i for i, line_ids in enumerate(ids) if line_ids is None]
        if others:
            flat, row_splits = self._tokenize_flat(tf.constant([lines[i] for i in others], tf.string))
            flat, row_splits = flat.numpy(), row_splits.numpy()
            for k, i in enumerate(others):
                ids[i] = flat[row_splits[k]:row_splits[k + 1]]
        row_splits = np.zeros([len(lines) + 1], np.int64)
        np.cumsum([len(line_ids) for line_ids in ids], out=row_splits[1:])
        flat = np.fromiter((i for line_ids in ids for i in line_ids), np.int32, count=int(row_splits[-1]))
        return flat, row_splits

    def _ascii_ids(self, line: str) -> list[int]:
        """An ASCII line's ids by the original's rules in Python (see `_ASCII_CLEAN`)."""
        line = line.translate(_ASCII_CLEAN)
        if self.do_lower_case:
            line = line.lower()
        return [i for word in _ASCII_SPLIT_OFF.sub(r" \1 ", line).split() for i in self._ascii_word_ids(word)]

    def _greedy_word_ids(self, word: str) -> tuple[int, ...]:
        """The original WordpieceTokenizer on one word: greedy longest match first, "##" after the
        first piece; a word of over 200 characters, or one with no full match, is one [UNK]."""
        if len(word) > MAX_CHARS_PER_WORD:
            return (self.unk_id,)
        ids, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else SUFFIX_INDICATOR + word[start:end]
                if piece in self._token_to_id:
                    ids.append(self._token_to_id[piece])
                    start = end
                    break
            else:
                return (self.unk_id,)
        return tuple(ids)

    def convert_ids_to_tokens(self, ids) -> list[str]:
        return [self.vocab[int(i)] for i in ids]

    def convert_tokens_to_ids(self, tokens) -> list[int]:
        """Raises KeyError for a token not in the vocab, as the original."""
        return [self._token_to_id[token] for token in tokens]

