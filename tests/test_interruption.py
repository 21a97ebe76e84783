"""`Interruption`'s `promptly`: called as a signal arrives, while the main thread is still inside
a call that runs no Python (as a compiled training loop is), without taking the signal from
whoever set Python's wakeup fd before; two Ctrl-C in that time still stop at once."""

import hashlib
import io
import os
import signal
import threading
import time

import pytest

from electra_tf.training.interruption import Interruption


def busy_in_c(seconds: float) -> None:
    """Holds the main thread in one C call (hashing, which releases the GIL) for at least about
    `seconds`: Python runs no signal handler until it returns."""
    start = time.monotonic()
    hashlib.pbkdf2_hmac("sha256", b"key", b"salt", 20_000)
    per_iteration = (time.monotonic() - start) / 20_000
    hashlib.pbkdf2_hmac("sha256", b"key", b"salt", int(2 * seconds / per_iteration))


def send_later(*signums, gap: float = 0.2) -> threading.Thread:
    def send():
        for signum in signums:
            time.sleep(gap)
            os.kill(os.getpid(), signum)
    thread = threading.Thread(target=send)
    thread.start()
    return thread


def test_promptly_runs_while_the_main_thread_is_busy_and_the_previous_wakeup_fd_gets_its_byte():
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    os.set_blocking(read_end, False)  # an empty pipe fails the test rather than hanging it
    before = signal.set_wakeup_fd(write_end)
    called = []
    try:
        with Interruption(io.StringIO(), promptly=lambda: called.append(time.monotonic())) as interrupt:
            sender = send_later(signal.SIGTERM)
            busy_in_c(0.6)  # signalled 0.2 s into it; the handler has not run yet
            returned = time.monotonic()
            sender.join()
            assert interrupt.requested  # the handler ran once the call returned
        assert len(called) == 1 and called[0] < returned
        try:
            forwarded = os.read(read_end, 16)
        except BlockingIOError:
            forwarded = b""
        assert forwarded == bytes([signal.SIGTERM])
        assert signal.set_wakeup_fd(write_end) == write_end  # ours is back
    finally:
        signal.set_wakeup_fd(before)
        os.close(read_end)
        os.close(write_end)


def test_two_ctrl_c_while_busy_stop_at_once():
    """Python runs the handler once for both: the watcher counted two, so it does not save."""
    with pytest.raises(KeyboardInterrupt):
        with Interruption(io.StringIO(), promptly=lambda: None):
            sender = send_later(signal.SIGINT, signal.SIGINT)
            busy_in_c(1.0)  # both 0.2 and 0.4 s into it
            sender.join()
            time.sleep(0.1)  # a bytecode boundary, where the handler runs


def test_one_ctrl_c_asks_for_a_save():
    with Interruption(io.StringIO(), promptly=lambda: None) as interrupt:
        sender = send_later(signal.SIGINT)
        busy_in_c(0.6)
        sender.join()
        time.sleep(0.1)
        assert interrupt.signum == signal.SIGINT
