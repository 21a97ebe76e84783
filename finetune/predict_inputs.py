"""What `predict.py` reads: a file in the task's own format (CSV, TSV, JSONL or CoNLL, with the
columns the model's task card names), plain text (a text a line; for a pair task the two texts
separated by a tab), or standard input (`-`, plain text). Read lazily, a line at a time.

The format is the one given, else the task's own when the file is named as its files are (a
CoNLL `.txt`), else the extension's (.csv, .tsv, .jsonl, .conll); anything else, standard input
included, is plain text. An empty line or text is an error naming the line,
or, with `skip_empty`, skipped and counted (`InputSource.skipped`).
"""

import dataclasses
import os
import sys
from pathlib import Path
from typing import BinaryIO, Iterator, Optional, Tuple

from electra_tf.errors import InputError
from finetune.table_files import decoded_lines

FORMATS = ("text", "csv", "tsv", "jsonl", "conll")
EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".conll": "conll"}


@dataclasses.dataclass
class InputSource:
    path: str  # "-": standard input
    format: str
    skip_empty: bool = False
    skipped: int = 0  # empty lines or texts left out (with skip_empty)
    opened: Optional[BinaryIO] = dataclasses.field(default=None, repr=False)  # the stream being read

    @classmethod
    def open(cls, path: str, format: Optional[str] = None, skip_empty: bool = False, task=None) -> "InputSource":
        """`format`, or the one the task reads files of this suffix in (`Task.own_format`), or the
        suffix's (EXTENSIONS), or plain text."""
        if format is not None and format not in FORMATS:
            raise InputError(f"--input-format {format!r} is not one of: {', '.join(FORMATS)}")
        if path != "-" and not Path(path).is_file():
            raise InputError(f"--input {path}: no such file")
        suffix = Path(path).suffix.lower()
        own = None if path == "-" or task is None else task.own_format(suffix)
        chosen = format or own or ("text" if path == "-" else EXTENSIONS.get(suffix, "text"))
        return cls(path, chosen, skip_empty)

    @property
    def name(self) -> str:
        return "standard input" if self.path == "-" else self.path

    @property
    def size(self) -> Optional[int]:
        """The input's bytes, when known (a file), for the progress line's ETA."""
        return None if self.path == "-" else os.path.getsize(self.path)

    def stream(self) -> BinaryIO:
        """The binary stream to read (its `tell()` is how far the reading got)."""
        self.opened = sys.stdin.buffer if self.path == "-" else open(self.path, "rb")
        return self.opened

    def close(self) -> None:
        if self.opened is not None and self.path != "-":
            self.opened.close()

    @property
    def position(self) -> int:
        """Bytes read so far (0 for standard input, whose size is unknown)."""
        return 0 if self.opened is None or self.path == "-" else self.opened.tell()

    def first_line(self) -> str:
        """The input's first line, left unread (for standard input: what its buffer holds of it)."""
        if self.path == "-":
            peek = getattr(sys.stdin.buffer, "peek", None)  # a pipe or terminal: a BufferedReader
            head = peek(1 << 16) if peek is not None else b""
            return head.split(b"\n", 1)[0].decode("utf-8-sig", errors="replace")  # bad bytes: reported when read
        lines = decoded_lines(self.name)
        try:
            return next(lines, (0, ""))[1]
        finally:
            lines.close()

    def lines(self) -> Iterator[Tuple[int, str]]:
        """(number, text without its line end) of each line."""
        for number, text in decoded_lines(self.name, self.stream()):
            yield number, text.rstrip("\r\n")

    def empty(self, line: int, what: str = "line") -> bool:
        """Whether to skip an empty line or text (counted), or raises the error naming it."""
        if not self.skip_empty:
            raise InputError(f"{self.name}:{line}: empty {what} (pass --skip-empty to leave such lines out)")
        self.skipped += 1
        return True
