"""An English corpus every Python install already has: the standard library's own documentation.

The demo must run on a fresh machine with nothing downloaded, and the project ships no
third-party corpus. Python carries about 0.5 MB of reference prose in `pydoc_data.topics` (the
language reference behind `help()`), and more in the docstrings of its pure-Python modules.
This module turns both into a `lines`-format corpus: one sentence per line, a blank line between
documents (one document per help topic or module). Indented blocks (code, grammar) and
reStructuredText underlines are dropped; wrapped lines are joined into paragraphs first.
"""

import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Iterator, List

from pretrain_data.sentences import split_sentences

# Pure-Python standard-library modules with substantial English docstrings.
DOCSTRING_MODULES = (
    "argparse", "asyncio", "calendar", "collections", "concurrent.futures", "configparser", "contextlib",
    "csv", "dataclasses", "datetime", "decimal", "difflib", "email", "enum", "fractions", "functools",
    "gettext", "heapq", "http.client", "http.server", "inspect", "ipaddress", "json", "logging",
    "mailbox", "multiprocessing", "optparse", "pathlib", "pickle", "pprint", "pydoc", "random", "shutil",
    "smtplib", "socketserver", "statistics", "string", "subprocess", "tarfile", "tempfile", "textwrap",
    "threading", "tkinter", "typing", "unittest", "urllib.parse", "urllib.request", "uuid", "zipfile",
)
_UNDERLINE = re.compile(r"^\s*([*=~^\-#+])\1{2,}\s*$")


def _paragraphs(text: str) -> Iterator[str]:
    """Joins wrapped prose lines into paragraphs, skipping indented blocks and underlines."""
    current: List[str] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("   ") or _UNDERLINE.match(line):
            if current:
                yield " ".join(current)
            current = []
            continue
        current.append(line.strip())
    if current:
        yield " ".join(current)


def _document(text: str) -> List[str]:
    """The sentences of a help text, keeping only paragraphs that read like prose."""
    sentences = []
    for paragraph in _paragraphs(text):
        if len(paragraph.split()) >= 4:
            sentences.extend(split_sentences(paragraph))
    return sentences


def _module_docstrings(name: str) -> str:
    try:
        module = importlib.import_module(name)
    except Exception:  # an optional module (tkinter without Tk, say) that this Python lacks
        return ""
    texts = [inspect.getdoc(module) or ""]
    for _, member in sorted(vars(module).items()):
        if (inspect.isclass(member) or inspect.isfunction(member)) and member.__module__ == name:
            texts.append(inspect.getdoc(member) or "")
            if inspect.isclass(member):
                texts.extend(method.__doc__ or "" for _, method in sorted(vars(member).items())
                             if inspect.isfunction(method))
    return "\n\n".join(inspect.cleandoc(text) for text in texts)


def documents() -> Iterator[List[str]]:
    """Every document of the corpus, each a list of sentences."""
    from pydoc_data.topics import topics
    for key in sorted(topics):
        yield _document(topics[key])
    for name in DOCSTRING_MODULES:
        yield _document(_module_docstrings(name))


def write_default_corpus(output_dir) -> Path:
    """Writes the corpus as `python_docs.txt` in `output_dir`; returns the file's path."""
    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    path = output / "python_docs.txt"
    temporary = output / ".python_docs.txt.tmp"  # hidden: corpus readers skip it if left behind
    with open(temporary, "w", encoding="utf-8") as handle:
        for document in documents():
            if document:
                handle.write("\n".join(document) + "\n\n")
    temporary.replace(path)
    return path


if __name__ == "__main__":
    print(write_default_corpus(sys.argv[1] if len(sys.argv) > 1 else "default_corpus"))
