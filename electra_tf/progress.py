"""Progress lines with rate and ETA for long work (data building, training, evaluation)."""

import sys
import time


def format_duration(seconds: float) -> str:
    """Seconds as `1h02m`, `3m05s` or `12s`."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


class Progress:
    """Prints `label: done/total (pct) rate unit/s, ETA` at most every `interval` seconds.

    `update(done)` takes the absolute amount done so far; `finish()` prints the final line.
    """

    def __init__(self, total: float, label: str, unit: str = "", interval: float = 2.0, stream=None):
        self.total = float(total)
        self.label = label
        self.unit = unit
        self.interval = interval
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self._last_print = float("-inf")
        self.done = 0.0

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rate = self.done / elapsed
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        eta_text = format_duration(eta) if eta != float("inf") else "?"
        return (f"{self.label}: {self.done:,.0f}/{self.total:,.0f}{self.unit} ({pct:5.1f}%) "
                f"{rate:,.1f}{self.unit}/s, elapsed {format_duration(elapsed)}, ETA {eta_text}")

    def update(self, done: float) -> None:
        self.done = float(done)
        now = time.monotonic()
        if now - self._last_print >= self.interval:
            self._last_print = now
            print(self.line(), file=self.stream, flush=True)

    def finish(self) -> None:
        print(self.line(), file=self.stream, flush=True)
