"""Reading raw corpora into documents of lines.

Two input formats:
- `lines`: plain text, one sentence (or sentence group) per line, as the original expects. With
  `blanks_separate_docs` a blank line ends a document; without it blank lines are skipped. The end
  of a file always ends a document.
- `wikiextractor`: WikiExtractor output. `<doc ...>` starts a document and `</doc>` ends it; the
  title line right after `<doc ...>` is dropped (it repeats the `title` attribute) and blank lines
  are skipped.

Bytes that are not valid UTF-8 are replaced with U+FFFD, which the tokenizer then drops: the same
text as the original's decoding, which ignored them. The lines where that happened are counted per
file, so a user sees how dirty the corpus was and where; `strict_utf8` makes the first such line an
error naming the file, the line and the byte.
"""

import dataclasses
import os
import re
from pathlib import Path
from typing import Callable, List, Optional

from electra_tf.errors import InputError

INPUT_FORMATS = ("lines", "wikiextractor")
_DOC_OPEN = re.compile(r'^<doc\b[^>]*\btitle="([^"]*)"[^>]*>$|^<doc\b[^>]*>$')


@dataclasses.dataclass
class CorpusFile:
    """A corpus file and the name it is known by (its path relative to the corpus directory)."""

    path: Path
    name: str
    size: int


@dataclasses.dataclass
class DocumentFile:
    """The documents of one corpus file: each a list of non-empty, stripped lines."""

    documents: List[List[str]]
    lines_replaced: int  # lines that held invalid UTF-8


def list_corpus_files(corpus_dir) -> List[CorpusFile]:
    """All non-hidden files below `corpus_dir` (recursively, into symlinked folders too, each real
    folder once), sorted by relative path.

    Recursion lets WikiExtractor's nested `AA/ AB/ ...` output be used as it is. Raises InputError if
    the directory is missing or holds no non-empty file.
    """
    root = Path(corpus_dir)
    if not root.is_dir():
        raise InputError(f"--corpus-dir {root}: not a directory")
    files, seen = [], {os.path.realpath(root)}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        kept = []
        for name in sorted(d for d in dirnames if not d.startswith(".")):
            real = os.path.realpath(os.path.join(dirpath, name))
            if real not in seen:  # a folder linked twice is read once, a link loop not followed
                seen.add(real)
                kept.append(name)
        dirnames[:] = kept
        for filename in filenames:
            if filename.startswith("."):
                continue
            path = Path(dirpath) / filename
            try:
                size = path.stat().st_size
            except OSError as error:
                raise InputError(f"{path}: cannot read corpus file ({error.strerror})") from error
            files.append(CorpusFile(path, path.relative_to(root).as_posix(), size))
    files.sort(key=lambda f: f.name)
    if not any(f.size for f in files):
        raise InputError(f"--corpus-dir {root}: no non-empty files found")
    return files


def _decode_lines(path: Path, strict_utf8: bool = False):
    """Yields (line_text, was_replaced) for each line of a file, decoding UTF-8 line by line."""
    try:
        handle = open(path, "rb")
    except OSError as error:
        raise InputError(f"{path}: cannot read corpus file ({error.strerror})") from error
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield raw.decode("utf-8"), False
            except UnicodeDecodeError as error:
                if strict_utf8:
                    raise InputError(f"{path}: line {number}: invalid UTF-8 (byte 0x{raw[error.start]:02x} at "
                                     f"byte {error.start} of the line); fix the file, or leave out "
                                     "--strict-utf8 to drop such bytes") from None
                yield raw.decode("utf-8", errors="replace"), True


def read_documents(path: Path, input_format: str = "lines", blanks_separate_docs: bool = True,
                   split_sentences: Optional[Callable[[str], List[str]]] = None,
                   strict_utf8: bool = False) -> DocumentFile:
    """Reads one corpus file into documents; `split_sentences` optionally splits each line further."""
    if input_format not in INPUT_FORMATS:
        raise InputError(f"--input-format {input_format!r}: expected one of {', '.join(INPUT_FORMATS)}")
    documents: List[List[str]] = []
    current: List[str] = []
    replaced = 0
    expect_title = None  # wikiextractor: the title that may follow a <doc> line

    def end_document():
        nonlocal current
        if current:
            documents.append(current)
        current = []

    for text, was_replaced in _decode_lines(path, strict_utf8):
        replaced += was_replaced
        line = text.strip()
        if input_format == "wikiextractor":
            opening = _DOC_OPEN.match(line)
            if opening:
                end_document()
                expect_title = opening.group(1)
                continue
            if line == "</doc>":
                end_document()
                expect_title = None
                continue
            if not line:
                continue
            if expect_title is not None:
                title, expect_title = expect_title, None
                if line == title:
                    continue
        elif not line:
            if blanks_separate_docs:
                end_document()
            continue
        current.extend(split_sentences(line) if split_sentences else [line])
    end_document()
    return DocumentFile(documents, replaced)
