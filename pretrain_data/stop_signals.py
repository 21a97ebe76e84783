"""SIGTERM and SIGINT during the data build and vocab learning: stop at once, with nothing written.

Unlike training, these stages keep nothing worth saving mid-way, so a signal stops them where
they are: inside `stopped_by_signals(...)` either signal raises `Interrupted` in the main thread,
whose `finally` blocks then stop the worker processes and remove the temporary output, and the
script prints one line and exits 128 + the signal's number (143 / 130). Further signals are
ignored until the block is left, so that a second Ctrl-C cannot cut that cleanup short.
"""

import contextlib
import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import sys
from typing import Iterator

from electra_tf.errors import Interrupted

SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stopped_by_signals(what: str, kept: str) -> Iterator[None]:
    """Within the block, SIGTERM / SIGINT raise `Interrupted`: "`what` stopped by SIGTERM; `kept`"."""

    def stop(signum, frame):
        for number in SIGNALS:
            signal.signal(number, signal.SIG_IGN)
        raise Interrupted(f"{what} stopped by {signal.Signals(signum).name}; {kept}", 128 + signum)

    previous = {number: signal.signal(number, stop) for number in SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def ignore_sigint() -> None:
    """For a worker process: Ctrl-C reaches the whole process group, and the parent stops the workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


def end_with_parent() -> None:
    """For a worker process: SIGTERM when the parent dies, even by SIGKILL, which leaves the parent
    no chance to stop its workers (Linux only; elsewhere a killed build may leave them running).
    The temporary output they were writing is removed by the next build of the same output dir."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        parent = multiprocessing.parent_process()
        if parent is not None and os.getppid() != parent.pid:  # it died before the call above
            os.kill(os.getpid(), signal.SIGTERM)
