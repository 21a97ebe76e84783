"""The exception for bad user input, and the one for a training run stopped by a signal.

Every stage raises `InputError` when a file, line, flag or field is wrong; its message names
the culprit. The CLIs print it as a single line and exit with status 2 instead of a traceback.
"""


class InputError(ValueError):
    """Bad user input: the message names the file, line, flag or field at fault."""


class TrainingInterrupted(Exception):
    """Training stopped on SIGTERM / SIGINT after saving a checkpoint; the same command resumes.

    `exit_status` is 128 + the signal's number, what a shell or scheduler sees from a process
    that the signal ended, so that a preemptible job is restarted rather than taken for finished."""

    def __init__(self, message: str, exit_status: int):
        super().__init__(message)
        self.exit_status = exit_status


class WorkerLost(RuntimeError):
    """Another worker of a multi-worker run died or became unreachable; all must be restarted."""
