"""SIGTERM and SIGINT during training: finish the running step, save a checkpoint, stop cleanly.

Preemptible VMs, cluster schedulers and TPU maintenance send SIGTERM and give the process a grace
period; Ctrl-C sends SIGINT. Inside `Interruption()`, either signal only sets `signum`: the
training loop looks at it at its next step boundary, saves a checkpoint and raises
`TrainingInterrupted`. A second Ctrl-C stops at once, without saving. Python runs signal handlers
between bytecodes, so a handler cannot act inside a compiled loop of many steps; `promptly`, if
given, is called the moment a signal arrives, from a thread that Python's wakeup fd wakes, so that
such a loop can end after the step it is in (pretraining's sets a flag its loop condition reads).

Multi-worker runs coordinate the save step across workers with TensorFlow's own
`tf.distribute.experimental.PreemptionCheckpointHandler` (`preemption_handler` for pretraining's
checkpoints, `ClusterStops` for a loop that saves its own state); `notify` passes each signal on to it.
"""

import contextlib
import os
import signal
import sys
import threading
from typing import Callable, Optional

import tensorflow as tf

from electra_tf.errors import TrainingInterrupted

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interruption:
    """A context in which SIGTERM and SIGINT request a checkpoint and a clean stop."""

    def __init__(self, stream=None, notify: Optional[Callable] = None, promptly: Optional[Callable[[], None]] = None):
        self.stream = stream or sys.stderr
        self.notify = notify
        self.promptly = promptly
        self.signum: Optional[int] = None
        self._previous = {}
        self._wakeup = None  # (the previous wakeup fd, our pipe's write end, the watcher thread)
        self._sigints = 0  # SIGINTs the watcher saw: Python runs the handler once for two in one step

    def __enter__(self) -> "Interruption":
        try:
            for number in SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
            if self.promptly is not None:
                read_end, write_end = os.pipe()
                os.set_blocking(write_end, False)  # the C-level handler must never block
                previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
                watcher = threading.Thread(target=self._watch, args=(read_end, previous),
                                           name="InterruptionWatcher", daemon=True)
                self._wakeup = (previous, write_end, watcher)
                watcher.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}
        if self._wakeup is not None:
            previous, write_end, watcher = self._wakeup
            signal.set_wakeup_fd(previous)
            os.close(write_end)  # the watcher reads the end of the pipe and returns
            if watcher.is_alive():
                watcher.join()
            self._wakeup = None

    def _watch(self, read_end: int, previous: int) -> None:
        """Calls `promptly` for each SIGTERM or SIGINT as it arrives (Python writes a byte per
        signal); every byte goes on to the wakeup fd set before ours, if any (an event loop's)."""
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            while numbers := pipe.read(64):
                if previous >= 0:
                    with contextlib.suppress(OSError):  # its reader gone or full: as Python itself would drop it
                        os.write(previous, numbers)
                self._sigints += numbers.count(signal.SIGINT)
                if any(number in SIGNALS for number in numbers):
                    self.promptly()

    def _handle(self, signum, frame) -> None:
        if signum == signal.SIGINT and (self.signum is not None or self._sigints > 1):
            raise KeyboardInterrupt  # a second Ctrl-C: stop now, without saving
        self.signum = signum
        print(f"received {signal.Signals(signum).name}: stopping at the next step boundary, with what was done "
              "saved (Ctrl-C again stops at once, without saving)", file=self.stream, flush=True)
        if self.notify is not None:
            self.notify(signum, frame)

    @property
    def requested(self) -> bool:
        return self.signum is not None

    requested_here = requested  # whether this process decides alone to stop (`ClusterStops`: never)

    def after_step(self, step: int, save: Callable[[], str]) -> None:
        """In a loop that saves its own state: raises `TrainingInterrupted` after `save()` (which
        returns the checkpoint's path) when a signal came."""
        if self.requested:
            raise self.stop(step, save())

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
    """TensorFlow's `PreemptionCheckpointHandler` for a multi-worker pretraining run: when any worker
    is signalled, every worker saves at the same step (`checkpoints.save`: the chief into the model
    dir) and stops by raising `TrainingInterrupted`."""
    saved = {}

    def save(step):
        checkpoints.save(step)
        saved["step"] = step

    def stop():
        raise interrupt.stop(saved["step"], checkpoints.path(saved["step"]))

    return _tensorflow_handler(strategy, checkpoints.manager, interrupt, save, stop)


def _tensorflow_handler(strategy, manager, interrupt: Interruption, save_fn, exit_fn):
    """`tf.distribute.experimental.PreemptionCheckpointHandler` saving through `save_fn` and stopping
    through `exit_fn`. It installs its SIGTERM handler itself; `interrupt` calls that one for
    SIGTERM and SIGINT, and SIGTERM's previous handler is put back, so that outside training SIGTERM
    ends the process as usual. `manager` is what the handler restores from when it is made."""
    previous = signal.getsignal(signal.SIGTERM)
    _quiet_watcher_errors()
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, manager,
        termination_config=tf.distribute.experimental.TerminationConfig(exit_fn=exit_fn, save_fn=save_fn))
    interrupt.notify = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, previous)
    return handler


def _quiet_watcher_errors() -> None:
    """Keeps the handler's peer-watching thread from printing a traceback when the coordination
    service goes down with the chief: its error (UnavailableError) reaches the main thread too, in
    the next collective, which reports the lost worker in one line
    (`distribution.lost_workers_reported`). Other threads' errors are printed as before."""
    if getattr(threading.excepthook, "quiet_watcher", False):
        return
    previous = threading.excepthook

    def hook(args):
        watcher = args.thread is not None and args.thread.name.startswith("PeerTerminationWatcher")
        if not (watcher and issubclass(args.exc_type, tf.errors.OpError)):
            previous(args)

    hook.quiet_watcher = True
    threading.excepthook = hook


class ClusterStops:
    """`Interruption`'s `after_step` and `requested_here` for the workers of a multi-worker run, in a
    training loop that saves its own state (fine-tuning's trials): TF's `PreemptionCheckpointHandler`
    picks a step that every worker reaches (the one after the signalled worker's next check), and
    all of them save and stop there, whichever was signalled. Every worker must call `after_step`
    equally often (the same steps of the same trials). One serves the whole run: the handler's
    agreement lives in the coordination service's key-value store, where a second handler of the
    same process would find its keys already used."""

    def __init__(self, interrupt: Interruption, strategy, scratch_dir: str):
        """`scratch_dir`: a directory without checkpoints, where the handler looks for one to restore
        when it is made (it finds none: the loop saves through `after_step`'s `save`)."""
        self.interrupt = interrupt
        self._saved = {}
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(), scratch_dir, max_to_keep=1)
        self.handler = _tensorflow_handler(strategy, manager, interrupt, self._save, self._stop)

    def _save(self, step: int, save: Callable[[], str]) -> None:
        self._saved.update(step=step, path=save())

    def _stop(self):
        raise self.interrupt.stop(self._saved["step"], self._saved["path"])

    def after_step(self, step: int, save: Callable[[], str]) -> None:
        """Raises `TrainingInterrupted` after `save()` (which returns the checkpoint's path) when the
        cluster is to stop at `step`."""
        quietly(self.handler.save_checkpoint_if_preempted, step=step, save=save)

    requested_here = False  # the workers never stop alone, only together at a step of `after_step`
