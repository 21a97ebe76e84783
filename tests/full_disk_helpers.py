"""A directory whose file system runs full: a small tmpfs of its own where the test may mount one
(as root, which CI is), else ENOSPC injected at the write the test names. INJECT_ENOSPC=1 in the
environment takes the second way as root too, so that it can be checked there."""

import os
import subprocess
from pathlib import Path
from typing import Callable

import tensorflow as tf

Injection = Callable[[object], None]  # given pytest's monkeypatch, makes the chosen write fail with ENOSPC


class SmallDisk:
    """`path`: an empty dir on a tmpfs of `size` bytes (`real`), or on the test's own disk (not `real`).

    `fill(leave, inject)` leaves `leave` bytes free: a filler file on the tmpfs, or `inject` applied
    when there is no tmpfs; `free()` undoes it, as a user who made room."""

    def __init__(self, path: Path, size: int, monkeypatch):
        self.path, self.monkeypatch = path, monkeypatch
        path.mkdir(parents=True)
        mounted = os.geteuid() == 0 and not os.environ.get("INJECT_ENOSPC") and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
            capture_output=True).returncode == 0
        self.real = mounted
        self.filler = path / "filler"

    def fill(self, leave: int, inject: Injection) -> None:
        if not self.real:
            inject(self.monkeypatch)
            return
        free = os.statvfs(self.path).f_bavail * os.statvfs(self.path).f_frsize
        with open(self.filler, "wb") as handle:
            handle.truncate(0)
            handle.write(b"\0" * max(free - leave, 0))

    def free(self) -> None:
        if self.real:
            self.filler.unlink()
        else:
            self.monkeypatch.undo()

    def unmount(self) -> None:
        if self.real:
            subprocess.run(["umount", "-l", str(self.path)], check=True)


def no_space(path) -> tf.errors.ResourceExhaustedError:
    """The error TensorFlow's file system layer raises for a write of `path` on a full disk."""
    return tf.errors.ResourceExhaustedError(None, None, f"{path}; No space left on device")


def files_under(directory: Path) -> dict:
    """{relative path: size} of every file under `directory`, dirs ending in a slash."""
    return {str(p.relative_to(directory)) + ("/" if p.is_dir() else ""): (0 if p.is_dir() else p.stat().st_size)
            for p in sorted(directory.rglob("*"))}
