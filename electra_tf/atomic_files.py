"""Files written whole or not at all: into a hidden temporary file beside the target, renamed over
it only once complete, and deleted if the write fails (a full disk), so that neither a reader nor a
later run ever sees half a file under the final name, and no temporary file is left behind."""

import os
import shutil
from pathlib import Path


def write_text(path, text: str) -> Path:
    """Writes `text` (UTF-8) to `path`, creating its folder; returns the path."""
    return _staged(Path(path), lambda staged: staged.write_text(text, encoding="utf-8"))


def copy_file(source, path) -> Path:
    """Copies `source` to `path`."""
    return _staged(Path(path), lambda staged: shutil.copyfile(source, staged))


def _staged(path: Path, write) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(staged)
        os.replace(staged, path)
    finally:
        staged.unlink(missing_ok=True)
    return path
