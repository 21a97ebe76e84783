"""What a training run prints, read as it prints: each progress line's step (for the step rate)
and the training metrics it shows (for the segment's `train_log`).

The line is electra_tf.training.reporting's: "step N/M (p%) loss x name value ... | ... examples/s | ...".
"""

import io
import math
import re
import sys
from typing import Callable, Optional

PROGRESS_STEP = re.compile(r"^step (\d+)/")
PROGRESS_METRICS = re.compile(r"^step (\d+)/\d+ \([\d.]+%\) ([^|]*)\|")


def _finite(text: str) -> Optional[float]:
    """A logged value as a float; None for nan / inf (strict JSON has neither) or an unreadable word,
    which must not stop training: the log is read from inside its print."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class Tee(io.TextIOBase):
    """Writes to stdout and notes, for each progress line, its step and `clock()` then, and the
    training metrics it shows (loss parts, accuracies, AUC, grad_norm over the last interval)."""

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self.marks = []  # (step, clock)
        self.log = []  # {"step": N, metric: value or None, ...} per progress line

    def write(self, text):
        sys.stdout.write(text)
        for line in text.splitlines():
            found = PROGRESS_STEP.match(line)
            if found:
                self.marks.append((int(found.group(1)), self.clock()))
            found = PROGRESS_METRICS.match(line)
            if found:
                words = found.group(2).split()
                self.log.append({"step": int(found.group(1)),
                                 **{name: _finite(value) for name, value in zip(words[::2], words[1::2])}})
        return len(text)

    def flush(self):
        sys.stdout.flush()

    def steps_per_second(self, start: int = 0):
        """Steps per clock second of each logged interval from mark `start` on."""
        pairs = zip(self.marks[start:], self.marks[start + 1:])
        return [(b[0] - a[0]) / (b[1] - a[1]) for a, b in pairs if b[1] > a[1] and b[0] > a[0]]
