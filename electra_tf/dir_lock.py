"""One writer per directory: the lock that a training run holds on its model dir and a data build on
its output dir, so that a second process started on it (a scheduler restarting a job whose first
copy still runs, a command typed twice) is refused at once instead of interleaving its files.

The lock is a `flock` on a lock file, which also records the holder (pid, host, start time) for the
refusal's message. The kernel drops a `flock` when its process ends in any way, SIGKILL and reboots
included, so a lock whose holder is gone is simply free again: the next run takes it over and says
whose it was. A clean exit deletes the lock file. Reading (evaluation only, export) takes no lock.
`flock` reaches other hosts only where the file system passes it on (Linux's NFS client does, as a
whole-file POSIX lock: flock(2)); elsewhere the lock covers the processes of one machine.
"""

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Callable, Optional

from electra_tf.disk_full import is_no_space
from electra_tf.errors import DirectoryInUse, InputError


class DirLock:
    """`with DirLock(directory, lock_file, what):` holds the writer's lock of `directory`.

    `lock_file` is where the lock lives (inside `directory`, or beside it when the directory is
    replaced as a whole, as the data build's output is); `report` receives the one-line notice
    when the lock of a process that is gone is taken over. Entering raises `DirectoryInUse`, naming
    `what` and `directory` ("model dir data/models/x") and the holder, while another live process
    holds it, and `InputError` when the lock file cannot be made there (a read-only directory)."""

    def __init__(self, directory, lock_file, what: str, report: Callable[[str], None] = print):
        self.directory, self.lock_file, self.what, self.report = Path(directory), Path(lock_file), what, report
        self._fd: Optional[int] = None

    def __enter__(self) -> "DirLock":
        while self._fd is None:
            try:
                self.lock_file.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as error:
                if is_no_space(error):
                    raise
                raise InputError(f"{self.what} {self.directory} is not writable: {error.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(fd)
                os.close(fd)
                raise DirectoryInUse(f"{self.what} {self.directory} is in use by another process "
                                     f"({_describe(holder)}); this one stopped without writing there. Wait "
                                     "for it to end, or stop it and run this command again") from None
            if _same_file(fd, self.lock_file):
                self._fd = fd
            else:  # its holder ended and deleted it between our open and flock: lock the new one
                os.close(fd)
        previous = _read(self._fd)
        if previous:
            self.report(f"taking over the lock of {self.what} {self.directory} from a process that is gone "
                        f"({_describe(previous)}): it was killed or its machine restarted")
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")})
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, record.encode(), 0)
        except BaseException:  # a full disk: release, and let the caller report it
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.lock_file.unlink(missing_ok=True)  # while still locked: see _same_file
        os.close(self._fd)
        self._fd = None


def _same_file(fd: int, path: Path) -> bool:
    """Whether `path` still names the file open as `fd` (a releasing holder deletes it first)."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _read(fd: int) -> dict:
    """The holder recorded in the lock file, or {} when it is empty or unreadable."""
    try:
        return json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (ValueError, UnicodeDecodeError):
        return {}


def _describe(holder: dict) -> str:
    if not holder:
        return "holder unknown"
    return f"pid {holder.get('pid')} on {holder.get('host')}, started {holder.get('started')}"
