"""A SQuAD context: its words, and its sub-tokens with the characters each came from.

Words (the original's `QATask._add_examples`): the context split on SQuAD whitespace (space, tab,
CR, LF, U+202F); each character maps to the word it lies in, which is how an answer's
`answer_start` (a character offset) finds its words.

Sub-tokens (the original's `QATask.featurize`): every word is WordPiece-tokenized on its own.
Unlike the original, every sub-token also keeps the character range of the context it came from
(`DocTokens.char_start/char_end`), so a predicted token span maps back to the exact context
substring, and the gold token span is the tokens overlapping the answer's characters. The
original takes the answer's whole words and narrows them to the answer's own tokens where they
occur (`_improve_answer_span`): the same span unless the answer starts or ends inside a sub-token
("Japan" in "Japanese,": here `japanese`, there `japanese ,`), 43 of the 11,877 answerable
questions of the shared SQuAD 1.1 train subset (docs/fidelity.md#known-quirks).
"""

import dataclasses
import unicodedata
from typing import Dict, List, Sequence, Tuple

import numpy as np

from electra_tf.tokenization import SUFFIX_INDICATOR, Tokenizer
from finetune.inputs import _tokenize


def is_whitespace(char: str) -> bool:
    """SQuAD's word separators (the original's `is_whitespace`; U+00A0 stays inside words)."""
    return char in " \t\r\n" or ord(char) == 0x202F


@dataclasses.dataclass
class Paragraph:
    """A context, its whitespace words and each word's [start, end) character range."""

    context: str
    words: List[str]
    word_start: np.ndarray  # int32 [W]
    word_end: np.ndarray  # int32 [W]
    char_to_word: np.ndarray  # int32 [len(context)]: the word a character is in (or precedes)

    @classmethod
    def split(cls, context: str) -> "Paragraph":
        words, starts, ends, char_to_word = [], [], [], []
        previous_is_space = True
        for index, char in enumerate(context):
            if is_whitespace(char):
                previous_is_space = True
            else:
                if previous_is_space:
                    words.append(char)
                    starts.append(index)
                    ends.append(index + 1)
                else:
                    words[-1] += char
                    ends[-1] = index + 1
                previous_is_space = False
            char_to_word.append(len(words) - 1)
        return cls(context, words, np.asarray(starts, np.int32), np.asarray(ends, np.int32),
                   np.asarray(char_to_word, np.int32))


def _normalized_chars(word: str, lower: bool, strip_accents: bool) -> Tuple[str, List[int]]:
    """The word as WordPiece sees it (cleaned; lower-cased if `lower`, and then accent-stripped if
    `strip_accents`) and, for each of its characters, the index of the word character it came from."""
    if word.isascii():
        return (word.lower() if lower else word), list(range(len(word)))
    text, origin = [], []
    for index, char in enumerate(word):
        if char in "\x00\ufffd" or unicodedata.category(char).startswith("C"):
            continue
        piece = char.lower() if lower else char
        if lower and strip_accents:
            piece = "".join(c for c in unicodedata.normalize("NFD", piece) if unicodedata.category(c) != "Mn")
        text.append(piece)
        origin += [index] * len(piece)
    return "".join(text), origin


@dataclasses.dataclass
class DocTokens:
    """A context's sub-tokens: ids, the word each came from, and its [start, end) characters."""

    ids: np.ndarray  # int32 [T]
    word: np.ndarray  # int32 [T]
    char_start: np.ndarray  # int32 [T]
    char_end: np.ndarray  # int32 [T]

    def text(self, context: str, first: int, last: int) -> str:
        """The context substring that sub-tokens first..last (inclusive) cover."""
        return context[self.char_start[first]:self.char_end[last]]

    def span_of(self, start_char: int, end_char: int) -> Tuple[int, int]:
        """First and last sub-token overlapping the characters [start_char, end_char)."""
        inside = np.nonzero((self.char_end > start_char) & (self.char_start < end_char))[0]
        return int(inside[0]), int(inside[-1])


def align_tokens(paragraph: Paragraph, word_ids: Sequence[np.ndarray], tokenizer: Tokenizer) -> DocTokens:
    """Each sub-token's character range: its text (without "##") matched in the normalized word;
    a token that does not match ([UNK], ...) and those after it span the rest of the word."""
    ids, words, starts, ends = [], [], [], []
    for w, (word, pieces) in enumerate(zip(paragraph.words, word_ids)):
        offset, word_end = int(paragraph.word_start[w]), int(paragraph.word_end[w])
        normalized, origin = _normalized_chars(word, tokenizer.do_lower_case, tokenizer.strip_accents)
        position, aligned = 0, True
        for token_id in pieces:
            piece = tokenizer.vocab[int(token_id)]
            piece = piece[len(SUFFIX_INDICATOR):] if piece.startswith(SUFFIX_INDICATOR) else piece
            aligned = aligned and normalized.startswith(piece, position) and len(piece) > 0
            if aligned:
                start, end = offset + origin[position], offset + origin[position + len(piece) - 1] + 1
                position += len(piece)
            else:
                start = offset + origin[position] if position < len(origin) else offset
                end = word_end
            ids.append(int(token_id))
            words.append(w)
            starts.append(start)
            ends.append(end)
    as_array = lambda values: np.asarray(values, np.int32)  # noqa: E731
    return DocTokens(as_array(ids), as_array(words), as_array(starts), as_array(ends))


def tokenize_paragraphs(paragraphs: Sequence[Paragraph], tokenizer: Tokenizer) -> Dict[int, DocTokens]:
    """{id(paragraph): DocTokens} for the distinct paragraphs (each tokenized once)."""
    paragraphs = list({id(p): p for p in paragraphs}.values())
    pieces = _tokenize(tokenizer, [word for p in paragraphs for word in p.words])
    tokens, cursor = {}, 0
    for paragraph in paragraphs:
        tokens[id(paragraph)] = align_tokens(paragraph, pieces[cursor:cursor + len(paragraph.words)], tokenizer)
        cursor += len(paragraph.words)
    return tokens
