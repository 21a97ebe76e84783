"""A pretraining run's training log, as the library writes it for machines: the TensorBoard scalars
that electra_tf's Reporter writes under `<model_dir>/train` at each logged step (the loss and its
parts, the training batches' accuracies and AUC, grad_norm, the learning rate, examples/s)."""

import math
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from electra_tf.training.reporting import event_files, logged_points


def _value(value: float) -> Optional[float]:
    """A logged value for a JSON record: 6 significant digits; None for nan / inf (strict JSON has neither)."""
    return float(f"{value:.6g}") if math.isfinite(value) else None


class TrainingLog:
    """The logging points that this process's training writes to a model dir from now on: the events
    files there already are earlier processes' (a run resumed), and each process writes its own."""

    def __init__(self, model_dir):
        self.directory = Path(model_dir) / "train"
        self.earlier = set(event_files(self.directory))
        self.read: Dict[Path, Tuple[int, list]] = {}  # path: (its size when read, its points)

    def points(self) -> List[Tuple[int, Dict[str, float]]]:
        """(step, {tag: value}) per logging point so far, in the order written."""
        points = []
        for path in event_files(self.directory):
            if path in self.earlier:
                continue
            size = path.stat().st_size
            if self.read.get(path, (None,))[0] != size:  # grown since the last read
                self.read[path] = (size, logged_points(path))
            points += self.read[path][1]
        return points

    def entries(self) -> List[dict]:
        """{"step": N, tag: value or None, ...} per logging point: a pretraining segment's `train_log`."""
        return [{"step": step, **{tag: _value(value) for tag, value in values.items()}}
                for step, values in self.points()]
