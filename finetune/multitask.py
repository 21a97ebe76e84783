"""Batches of a run's tasks together: the union of their batch keys, and training batches that mix
examples of different tasks, as the original's multi-task runs do (its examples of every task are
shuffled into one training set; every head runs on every example and each example's loss is its
own task's, `finetune.model`).

Each task makes the rows of its own examples (`Task.make_batch`); a mixed batch puts them back in
the batch's order, padded to the batch's longest row, and a key of another task gets zeros in a
task's rows (its loss there is masked out by `task_id`). For GLUE tasks alone this gives the same
batch as padding the concatenated examples did.
"""

import dataclasses
from typing import Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from finetune.inputs import Features

COMMON_SPEC = {"input_ids": tf.TensorSpec([None, None], tf.int32), "input_mask": tf.TensorSpec([None, None], tf.int32),
               "segment_ids": tf.TensorSpec([None, None], tf.int32), "task_id": tf.TensorSpec([None], tf.int32),
               "label_ids": tf.TensorSpec([None], tf.int32), "targets": tf.TensorSpec([None], tf.float32)}


def batch_spec(tasks) -> Dict[str, tf.TensorSpec]:
    """Every key a batch of the run carries: the common ones and each task's own."""
    spec = dict(COMMON_SPEC)
    for task in tasks:
        spec.update(task.batch_spec)
    return spec


def _filler_shape(spec: tf.TensorSpec, rows: int) -> List[int]:
    """Zeros for a key a batch lacks: [rows], and 1 for each free axis beyond (fixed axes kept)."""
    return [rows] + [1 if size is None else size for size in spec.shape[1:]]


def complete(batch: dict, spec: Dict[str, tf.TensorSpec]) -> dict:
    """`batch` with zeros for the keys of the spec it lacks (another task's)."""
    rows = len(batch["input_ids"])
    for key, own in spec.items():
        if key not in batch:
            batch[key] = np.zeros(_filler_shape(own, rows), own.dtype.as_numpy_dtype)
    return batch


@dataclasses.dataclass
class MixedFeatures:
    """The training examples of several tasks as one set: example i is `parts[t]`'s example
    `i - offsets[t]` for the part t holding it."""

    tasks: list
    parts: List[Features]

    def __post_init__(self):
        self.offsets = np.cumsum([0] + [len(part) for part in self.parts])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def lengths(self) -> np.ndarray:
        return np.concatenate([part.lengths for part in self.parts])


def mixed_batch(features: MixedFeatures, indices: Sequence[int], pad_to: Optional[int],
                spec: Dict[str, tf.TensorSpec]) -> dict:
    """The examples at `indices` (of any tasks) as one batch, in that order, padded to the longest
    row (or `pad_to`) and along every other free axis to the widest."""
    indices = np.asarray(indices)
    owner = np.searchsorted(features.offsets, indices, side="right") - 1  # [B] part of each example
    pieces = []  # (rows of the batch, that part's batch)
    for part in np.unique(owner):
        rows = np.flatnonzero(owner == part)
        local = indices[rows] - features.offsets[part]
        pieces.append((rows, features.tasks[part].make_batch(features.parts[part], local, pad_to)))
    batch = {}
    for key, own in spec.items():
        present = [(rows, piece[key]) for rows, piece in pieces if key in piece]
        shape = _filler_shape(own, len(indices))
        for axis in range(1, len(shape)):
            if own.shape[axis] is None and present:
                shape[axis] = max(value.shape[axis] for _, value in present)
        batch[key] = np.zeros(shape, own.dtype.as_numpy_dtype)
        for rows, value in present:
            batch[key][(rows,) + tuple(slice(0, size) for size in value.shape[1:])] = value
    return batch
