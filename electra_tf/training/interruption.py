"""SIGTERM and SIGINT during training: finish the running step(s), save a checkpoint, stop cleanly.

Preemptible VMs, cluster schedulers and TPU maintenance send SIGTERM and give the process a grace
period; Ctrl-C sends SIGINT. Inside `Interruption()`, either signal only sets `signum`: the
training loop looks at it at its next step boundary (the end of the compiled loop that is running,
at most `iterations_per_loop` steps), saves a checkpoint and raises `TrainingInterrupted`. A
second Ctrl-C stops at once, without saving. Python runs signal handlers between bytecodes, so a
handler cannot act inside a compiled loop anyway; the loop boundary is the first point where it can.

Multi-worker runs coordinate the save step across workers with TensorFlow's own
`tf.distribute.experimental.PreemptionCheckpointHandler` (`preemption_handler`); `notify`
passes each signal on to it.
"""

import signal
import sys
from typing import Callable, Optional

import tensorflow as tf

from electra_tf.errors import TrainingInterrupted

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interruption:
    """A context in which SIGTERM and SIGINT request a checkpoint and a clean stop."""

    def __init__(self, stream=None, notify: Optional[Callable] = None):
        self.stream = stream or sys.stderr
        self.notify = notify
        self.signum: Optional[int] = None
        self._previous = {}

    def __enter__(self) -> "Interruption":
        for number in SIGNALS:
            self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def _handle(self, signum, frame) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now, without saving
        self.signum = signum
        print(f"received {signal.Signals(signum).name}: stopping at the next step boundary, with what was done "
              "saved (Ctrl-C again stops at once, without saving)", file=self.stream, flush=True)
        if self.notify is not None:
            self.notify(signum, frame)

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def stop(self, step: int, saved: Optional[str]) -> TrainingInterrupted:
        """The exception that ends the run after the checkpoint `saved` at `step` (None: another worker
        of the cluster was signalled, and the chief saved)."""
        return self.stop_with(f"at step {step}; the checkpoint is {saved or 'the model dir'}")

    def stop_with(self, where: str) -> TrainingInterrupted:
        """The exception that ends the run at the point `where` ("at step 5; the checkpoint is ...")."""
        name = signal.Signals(self.signum).name if self.signum else "a signal to another worker"
        return TrainingInterrupted(f"training stopped by {name} {where}. Run the same command again to resume",
                                   128 + (self.signum or signal.SIGTERM))


def quietly(function, **kwargs):
    """Calls `function` with TensorFlow's Python warnings off: the preemption handler warns that its
    own `total_run_calls`, which it calls when it saves, is deprecated."""
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        return function(**kwargs)
    finally:
        logger.setLevel(level)


def preemption_handler(strategy, checkpoints, interrupt: Interruption):
    """TensorFlow's `PreemptionCheckpointHandler` for a multi-worker run: when any worker is
    signalled, every worker saves at the same step and stops.

    It saves through `checkpoints.save` (the chief into the model dir) and stops by raising
    `TrainingInterrupted`. It installs its SIGTERM handler itself; `interrupt` calls that one for
    SIGTERM and SIGINT, and SIGTERM's previous handler is put back, so that outside training SIGTERM
    ends the process as usual."""
    saved = {}

    def save(step):
        checkpoints.save(step)
        saved["step"] = step

    def stop():
        raise interrupt.stop(saved["step"], checkpoints.path(saved["step"]))

    previous = signal.getsignal(signal.SIGTERM)
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, checkpoints.manager,
        termination_config=tf.distribute.experimental.TerminationConfig(exit_fn=stop, save_fn=save))
    interrupt.notify = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, previous)
    return handler
