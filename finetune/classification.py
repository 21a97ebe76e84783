"""The `classification` task type: one text or a text pair, one label of any number of classes.

The label set is the spec's `labels`, or the train file's labels in a stable order (numeric when
every label is a number); it travels with the model (`card`). A dev or test label train never had
is an error naming the file and line. Scores: accuracy, macro-F1 and MCC, and per class
precision, recall and F1 (`<label>/precision`, ...); the GLUE presets keep GLUE's metrics.
"""

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from electra_tf.errors import InputError
from finetune import scorers
from finetune.heads import ClassificationHead
from finetune.labels import label_positions, stable_labels
from finetune.sentence_task import SentenceTask
from finetune.servers import ClassifierServer
from finetune.table_files import text_cell
from finetune.task import EvalSplit
from finetune.task_files import TaskFiles

USER_METRICS = ("accuracy", "macro_f1", "mcc")


class NamedLabels:
    """A task's label set: the spec's, or every label of the train file in a stable order (read
    once); a cell's labels as head positions, a label train never had an error naming the line."""

    files: object
    min_labels = 1  # the fewest labels the head is for
    _labels: Optional[Tuple[str, ...]] = None
    _positions: Optional[Dict[str, int]] = None

    def cell_labels(self, cell, path: Path, line: int) -> Tuple[str, ...]:
        """The label names a label cell holds."""
        raise NotImplementedError

    @property
    def labels(self) -> Tuple[str, ...]:
        """The label names in head order."""
        if self._labels is None:
            path, rows = self.files.rows("train")
            labels = stable_labels(name for line, cells in rows
                                   for name in self.cell_labels(cells["label"], path, line))
            if len(labels) < self.min_labels:
                raise InputError(f"{path}: its labels are {list(labels)}: a {self.type_name} task needs at least "
                                 f"{self.min_labels} (a head over fewer learns nothing)")
            self._labels = labels
        return self._labels

    def positions(self, cell, path: Path, line: int) -> List[int]:
        """The head positions of a cell's labels."""
        if self._positions is None:
            self._positions = label_positions(self.labels)
        try:
            return [self._positions[name] for name in self.cell_labels(cell, path, line)]
        except KeyError as error:
            raise InputError(f"{path}:{line}: label {error.args[0]!r} is not one of the task's labels "
                             f"({', '.join(self.labels)})") from None


class ClassificationTask(NamedLabels, SentenceTask):
    type_name = "classification"
    min_labels = 2  # one class: a softmax over it has loss 0 and scores 100 whatever it reads

    def __init__(self, name: str, files: Optional[TaskFiles], labels: Optional[Sequence[str]] = None,
                 metrics: Tuple[str, ...] = USER_METRICS, per_class: bool = True):
        super().__init__(name, files)
        self._labels = tuple(labels) if labels else None
        self.metrics, self.per_class = metrics, per_class

    @classmethod
    def from_spec(cls, name: str, spec: dict, root: Optional[str], card: dict) -> "ClassificationTask":
        return cls(name, cls.spec_files(spec, root), card.get("labels") or spec.get("labels"))

    def cell_labels(self, cell, path: Path, line: int) -> Tuple[str, ...]:
        return (text_cell(cell, path, line, "label").strip(),)

    def label_value(self, cell, path: Path, line: int) -> int:
        return self.positions(cell, path, line)[0]

    def make_head(self, config, hidden_size: int) -> ClassificationHead:
        return ClassificationHead(self.name, len(self.labels), hidden_size)

    def score(self, config, split: EvalSplit, predictions, loss: float) -> Dict[str, float]:
        labels = np.array([e.label for e in split.examples])
        metrics = [m[len(split.prefix):] for m in self.metrics if m.startswith(split.prefix)] if split.prefix \
            else self.metrics
        scores = scorers.score(metrics, labels, predictions, None, split.prefix)
        if self.per_class:
            scores.update(scorers.per_class(labels, predictions, self.labels))
        scores[split.prefix + "loss"] = float(loss)
        return scores

    def output(self, prediction) -> dict:
        return {"label": self.labels[int(prediction)]}

    def predict_outputs(self, head, logits) -> Dict[str, tf.Tensor]:
        return {"probabilities": tf.nn.softmax(logits, axis=-1)}  # [B, C]

    def lite_served(self, outputs) -> dict:
        probabilities = outputs["probabilities"]  # [B, C]
        return {"probabilities": probabilities, "label": np.array(self.labels, object)[probabilities.argmax(-1)]}

    def prediction_rows(self, config, fetched, examples, features) -> List[dict]:
        return [{"label": self.labels[int(np.argmax(p))],
                 "probabilities": {name: float(v) for name, v in zip(self.labels, p)}}
                for p in fetched["probabilities"]]

    def card(self) -> dict:
        return {**super().card(), "labels": list(self.labels)}

    def server(self, tokenizer, model, config, precision: str) -> ClassifierServer:
        return ClassifierServer(tokenizer, model, self, config.max_seq_length, precision)
