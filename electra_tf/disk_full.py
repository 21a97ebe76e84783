"""A write that failed for lack of space, as one line: which file or directory, the free space
there, and what is intact.

Python reports a full disk as an OSError with errno ENOSPC (or EDQUOT, a full quota) and the file's
name; TensorFlow's file system layer reports it as an `OpError` (mostly ResourceExhaustedError)
whose message ends in "<path>; No space left on device"; other libraries (safetensors) pass on the
OS's words without a path, and their caller names the file. `reported()` turns either into a
`DiskFull` that the scripts print as one line (`electra_tf.cli.exit_code`).

A TensorFlow checkpoint that fails mid-save leaves files that are not a checkpoint: `<prefix>_temp/`
(its shards, written first) and, when the merge that follows failed, a half-written
`<prefix>.index` / `<prefix>.data-*`. `remove_unfinished_checkpoint` deletes them; a failure while
the shards were written leaves an earlier save's `<prefix>.*` as it was.
"""

import contextlib
import errno
import glob
import re
import shutil
from pathlib import Path
from typing import Callable, Iterator, Optional

from electra_tf.errors import DiskFull

NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
NO_SPACE_TEXT = re.compile(r"No space left on device|Disk quota exceeded")  # the OS's words, as libraries pass them on
NAMED_FILE = re.compile(r"(?:^|\s)([^\s;]+); (?:No space left on device|Disk quota exceeded)")  # TensorFlow's form
TEMP_SHARD = re.compile(r"^(.*)_temp/part-\d+-of-\d+\.")  # a shard TensorFlow's saver writes first
CHECKPOINT_FILE = re.compile(r"^(.*)\.(?:index|data-\d+-of-\d+)$")


def is_no_space(error: BaseException) -> bool:
    """Whether `error` is a write that failed because the file system (or quota) is full."""
    if isinstance(error, OSError) and error.errno in NO_SPACE_ERRNOS:
        return True
    return NO_SPACE_TEXT.search(_message(error)) is not None


def failed_path(error: BaseException) -> Optional[str]:
    """The file whose write failed, as the error names it (None if it names none)."""
    if isinstance(error, OSError) and error.filename is not None:
        return str(error.filename)
    found = NAMED_FILE.search(_message(error))
    return found.group(1) if found else None


def free_space(path) -> str:
    """The free space of the file system holding `path` (or its nearest existing parent), in words."""
    existing = Path(path).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if free >= size:
            return f"{free / size:.1f} {unit} free"
    return f"{free} bytes free"


def disk_full(path, intact: str) -> DiskFull:
    """The one-line error for a write of `path` that found no space; `intact` says what is kept."""
    return DiskFull(f"no space left on the device for {path} ({free_space(path)} there); {intact}")


@contextlib.contextmanager
def reported(intact: Callable[[], str], path=None) -> Iterator[None]:
    """Turns a write inside the block that fails for lack of space into a `DiskFull` naming `path`
    (default: the file the error names; a checkpoint's shard is named by its checkpoint, whose
    unfinished files are removed) and `intact()`, called then. Other errors pass unchanged."""
    try:
        yield
    except DiskFull:
        raise
    except Exception as error:
        if not is_no_space(error):
            raise
        if path is not None:
            raise disk_full(path, intact()) from None
        named = failed_path(error)
        shard = TEMP_SHARD.match(named or "")
        merged = CHECKPOINT_FILE.match(named or "")
        if shard or merged:
            prefix = (shard or merged).group(1)
            message = disk_full(prefix, intact())  # the free space before the cleanup: what the save met
            # a shard: the save failed before touching the prefix's files, which stay (an earlier save's)
            remove_unfinished_checkpoint(prefix, with_final_files=merged is not None)
            raise message from None
        if named is None:  # the library did not say which file: the caller did not either
            raise DiskFull(f"no space left on the device ({_message(error).strip().splitlines()[0]}); "
                           f"{intact()}") from None
        raise disk_full(named, intact()) from None


def remove_unfinished_checkpoint(prefix, with_final_files: bool) -> None:
    """Deletes what a failed save of the checkpoint `prefix` left: `<prefix>_temp/`, and, when the
    save had got to merging its shards into them (or the caller knows them to be unfinished), the
    prefix's `.index` / `.data-*` files. Call it only for a save that failed."""
    prefix = Path(prefix)
    shutil.rmtree(prefix.with_name(prefix.name + "_temp"), ignore_errors=True)
    for leftover in prefix.parent.glob(glob.escape(prefix.name) + ".*") if with_final_files else ():
        if CHECKPOINT_FILE.match(leftover.name):
            leftover.unlink(missing_ok=True)


def remove_stale_temp_dirs(directory) -> list:
    """Deletes the `<prefix>_temp/` dirs of checkpoint saves that never finished (a run killed or
    out of space mid-save); call it only while no other process saves there. Returns their paths."""
    stale = [path for path in Path(directory).glob("*_temp")
             if path.is_dir() and all(TEMP_SHARD.match(f"{path}/{part.name}") for part in path.iterdir())]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


def _message(error: BaseException) -> str:
    return str(getattr(error, "message", None) or error)
