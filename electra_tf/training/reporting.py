"""What a run tells its user: console progress lines, TensorBoard scalars and results files."""

import glob
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import tensorflow as tf
import tf_keras

from electra_tf import atomic_files
from electra_tf.optimization import gradient_norm
from electra_tf.progress import format_duration


# A TFRecord (an events file's record) is its data framed by a length (8 bytes), the length's CRC (4)
# and the data's CRC (4).
RECORD_FRAMING = 16


class GradientNorm:
    """The mean global norm of the gradients given to the optimizer (before clipping: clip_norm 1.0
    divides every step whose norm exceeds 1 by it) over the steps since the last `take`. A float16
    step whose gradients overflowed, which the loss-scale optimizer skips, is left out. Under a
    strategy, each replica's own gradient; create it in the strategy's scope."""

    def __init__(self):
        self.mean = tf_keras.metrics.Mean("grad_norm")

    def record(self, grads) -> None:
        """`make_train_step`'s `on_gradients`: runs inside the traced step."""
        norm = gradient_norm(grads)
        finite = tf.math.is_finite(norm)
        self.mean.update_state(tf.where(finite, norm, 0.0), sample_weight=tf.cast(finite, tf.float32))

    def take(self) -> Dict[str, float]:
        """{"grad_norm": the mean} ({} when no step was recorded), and a fresh start."""
        result = {"grad_norm": float(self.mean.result())} if float(self.mean.count.read_value()) > 0 else {}
        self.mean.reset_state()
        return result


class Reporter:
    """Progress lines with throughput and ETA, plus TensorBoard scalars under `model_dir/{train,eval}`.

    Only the chief writes summaries; every worker prints.
    """

    def __init__(self, model_dir, total_steps: int, batch_size: int, chief: bool, stream=None):
        self.total_steps = total_steps
        self.batch_size = batch_size
        self.stream = stream or sys.stdout
        self.writers = {}
        self.directories = [os.path.join(model_dir, split) for split in ("train", "eval")] if chief else []
        for split in ("train", "eval"):
            self.writers[split] = (tf.summary.create_file_writer(os.path.join(model_dir, split)) if chief
                                   else tf.summary.create_noop_writer())
        self._last_time = time.monotonic()
        self._last_step = None
        self._start = time.monotonic()
        self._start_step = None

    def start(self, step: int) -> None:
        self._last_step = self._start_step = step
        self._last_time = self._start = time.monotonic()

    def throughput(self, step: int) -> float:
        """Examples per second over the steps since the last call (or `start`)."""
        now = time.monotonic()
        steps = max(step - self._last_step, 1)
        examples_per_second = steps * self.batch_size / max(now - self._last_time, 1e-9)
        self._last_time, self._last_step = now, step
        return examples_per_second

    def train_progress(self, step: int, loss: float, metrics: Dict[str, float], learning_rate: float) -> None:
        """One console line and the training scalars for the steps since the last call."""
        examples_per_second = self.throughput(step)
        now = self._last_time
        done = step - self._start_step
        eta = (self.total_steps - step) * (now - self._start) / max(done, 1)
        shown = " ".join(f"{name} {metrics[name]:.4f}" for name in
                         ("masked_lm_loss", "masked_lm_accuracy", "masked_lm_accuracy_at_mask", "disc_loss",
                          "disc_auc", "grad_norm") if name in metrics)
        print(f"step {step}/{self.total_steps} ({100.0 * step / self.total_steps:.1f}%) loss {loss:.4f} "
              f"{shown} | {examples_per_second:,.1f} examples/s | lr {learning_rate:.3g} | "
              f"elapsed {format_duration(now - self._start)} ETA {format_duration(eta)}",
              file=self.stream, flush=True)
        self.scalars("train", step, {"loss": loss, **metrics, "learning_rate": learning_rate,
                                     "examples_per_second": examples_per_second})

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()

    def __enter__(self) -> "Reporter":
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        """Closes the writers. After a failure (a flush that found the disk full, a kill signal) their
        files may end in a record's first bytes: they are cut back to their whole records."""
        if error_type is None:
            self.close()
            return
        try:
            self.close()
        except Exception:  # the failure in flight is the one to report (often the same full disk)
            pass
        for directory in self.directories:
            drop_torn_records(directory)

    def scalars(self, split: str, step: int, values: Dict[str, float]) -> None:
        with self.writers[split].as_default():
            for name, value in values.items():
                tf.summary.scalar(name, value, step=step)
        self.writers[split].flush()


def whole_records(events_file) -> Iterator[bytes]:
    """The whole records of one TensorBoard events file, in order. A record cut midway (a write a
    full disk stopped, or a live run's record still being written) ends the file here, where
    TensorFlow's record reader raises a DataLossError."""
    try:
        for record in tf.data.TFRecordDataset(str(events_file)):
            yield record.numpy()
    except tf.errors.DataLossError:
        return


def drop_torn_records(directory) -> List[str]:
    """Cuts each TensorBoard events file under `directory` back to its last whole record, where a
    write stopped midway (a full disk) left part of one: TensorBoard reads such a file up to the cut,
    but TensorFlow's record readers stop there. Returns the files cut."""
    cut = []
    for path in sorted(glob.glob(os.path.join(glob.escape(str(directory)), "events.out.tfevents.*"))):
        whole = sum(RECORD_FRAMING + len(record) for record in whole_records(path))
        if whole < os.path.getsize(path):
            os.truncate(path, whole)
            cut.append(path)
    return cut


def event_files(log_dir) -> List[Path]:
    """The TensorBoard events files a Reporter (or fine-tuning's writer) left in `log_dir`, oldest
    first: one per process that wrote there (a resumed run adds one). Ordered by the wall time of
    each file's first logged value (its opening event has whole seconds only), not by name: a name
    holds whole seconds and then a counter that sorts as text (".10" before ".9"); a file that has
    logged nothing yet (just opened) comes last."""
    from tensorflow.core.util import event_pb2

    def began(path: Path) -> Tuple[float, str]:
        events = (event_pb2.Event.FromString(record) for record in whole_records(path))
        return next((event.wall_time for event in events if event.summary.value), float("inf")), path.name

    return sorted(Path(log_dir).glob("events.out.tfevents.*"), key=began)


def logged_points(events_file) -> List[Tuple[int, Dict[str, float]]]:
    """(step, {tag: value}) per logging point of one events file, in the order written: what the
    console's progress line showed at that step, and every other scalar. A record still being
    written (the file of a live run) ends the reading; the next read gets it whole."""
    from tensorflow.core.util import event_pb2
    points: List[Tuple[int, Dict[str, float]]] = []
    for record in whole_records(events_file):
        event = event_pb2.Event.FromString(record)
        values = {value.tag: float(tf.make_ndarray(value.tensor)) for value in event.summary.value}
        if not values:
            continue  # the file's version record
        if points and points[-1][0] == event.step:
            points[-1][1].update(values)  # one scalar an event: a point's tags arrive one by one
        else:
            points.append((event.step, values))
    return points


def read_scalars(log_dir) -> Dict[str, List[Tuple[int, float]]]:
    """{tag: [(step, value), ...]} of every scalar under `log_dir`, sorted by step."""
    series = defaultdict(list)
    for path in event_files(log_dir):
        for step, values in logged_points(path):
            for tag, value in values.items():
                series[tag].append((step, value))
    return {tag: sorted(points) for tag, points in series.items()}


def write_results(results: Dict[str, float], json_path, txt_path) -> None:
    """`unsup_results.{json,txt}`, the files the original promised and never wrote; atomic."""
    for path, text in ((json_path, json.dumps(results, indent=2, sort_keys=True) + "\n"),
                       (txt_path, "".join(f"{k} = {v}\n" for k, v in sorted(results.items())))):
        atomic_files.write_text(path, text)
