"""The exceptions the scripts turn into one line and an exit status: bad user input, a training
run stopped by a signal, a lost worker, a full disk, a directory another process writes to.

Every stage raises `InputError` when a file, line, flag or field is wrong; its message names
the culprit. The CLIs print it as a single line and exit with status 2 instead of a traceback.
"""


class InputError(ValueError):
    """Bad user input: the message names the file, line, flag or field at fault."""


class Interrupted(Exception):
    """A stage stopped by SIGTERM / SIGINT; the message says what was kept or removed.

    `exit_status` is 128 + the signal's number, what a shell or scheduler sees from a process
    that the signal ended, so that a preemptible job is restarted rather than taken for finished."""

    def __init__(self, message: str, exit_status: int):
        super().__init__(message)
        self.exit_status = exit_status


class TrainingInterrupted(Interrupted):
    """Training stopped on SIGTERM / SIGINT after saving a checkpoint; the same command resumes."""


class WorkerLost(RuntimeError):
    """Another worker of a multi-worker run (or a build's worker process) died or became
    unreachable; all must be restarted."""


class DiskFull(Exception):
    """A write found no space left; the message names the file, the free space there and what is
    intact (`electra_tf.disk_full`). Nothing half-written is left under a final name."""


class DirectoryInUse(RuntimeError):
    """Another live process holds the writer's lock of a directory (`electra_tf.dir_lock`); the
    message names the directory and the holder (pid, host, start time)."""
