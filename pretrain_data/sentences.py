"""A small rule-based English sentence splitter for paragraph-per-line corpora.

The original packer was built for one sentence per line (maintainer, issue #43): it fills the
first segment sentence by sentence and discards what overflows an example. WikiExtractor writes a
whole paragraph per line, which would make most examples single-segment and throw away most of
each paragraph, so paragraphs are split into sentences first. The rule: a break after `.`, `!` or
`?` (plus closing quotes/brackets) followed by whitespace and an upper-case letter, digit or
opening quote, unless the word before the period is a known abbreviation or a single letter
(initials such as "J. R. R. Tolkien").
"""

import re
from typing import List

_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st mt ft gen col lt sgt capt gov rep sen rev hon "
    "vs etc inc ltd co corp bros no nos vol fig figs al approx ca cf ed eds est "
    "jan feb mar apr jun jul aug sep sept oct nov dec u.s u.k e.g i.e a.m p.m".split()
)
# A candidate break: sentence-final punctuation, optional closers, whitespace, then a plausible start.
_BREAK = re.compile(r"""([.!?]['")\]]*)\s+(?=["'(\[]?[A-Z0-9])""")


def split_sentences(paragraph: str) -> List[str]:
    """Splits a paragraph into sentences; text without a break comes back as one sentence."""
    sentences = []
    start = 0
    for match in _BREAK.finditer(paragraph):
        end = match.end(1)
        if match.group(1).startswith("."):
            words = paragraph[start:match.start(1)].rsplit(None, 1)
            last_word = words[-1].lower() if words else ""
            if len(last_word) <= 1 or last_word.strip("(\"'") in _ABBREVIATIONS:
                continue
        sentences.append(paragraph[start:end])
        start = match.end()
    tail = paragraph[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences
