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
from finetune.sentence_task import SentenceTask
from finetune.servers import ClassifierServer
from finetune.table_files import text_cell
from finetune.task import EvalSplit, label_positions, stable_labels
from finetune.task_files import TaskFiles

USER_METRICS = ("accuracy", "macro_f1", "mcc")


class ClassificationTask(SentenceTask):
    type_name = "classification"

    def __init__(self, name: str, files: Optional[TaskFiles], labels: Optional[Sequence[str]] = None,
                 metrics: Tuple[str, ...] = USER_METRICS, per_class: bool = True):
        super().__init__(name, files)
        self._labels = tuple(labels) if labels else None
        self.metrics, self.per_class = metrics, per_class

    @classmethod
    def from_spec(cls, name: str, spec: dict, root: Optional[str], card: dict) -> "ClassificationTask":
        return cls(name, cls.spec_files(spec, root), card.get("labels") or spec.get("labels"))

    @property
    def labels(self) -> Tuple[str, ...]:
        """The class names in head order (read from the train file the first time, if not given)."""
        if self._labels is None:
            path, rows = self.files.rows("train")
            self._labels = stable_labels(text_cell(cells["label"], path, line, "label").strip()
                                         for line, cells in rows)
        return self._labels

    def label_value(self, cell, path: Path, line: int) -> int:
        label = text_cell(cell, path, line, "label").strip()
        positions = label_positions(self.labels)
        if label not in positions:
            raise InputError(f"{path}:{line}: label {label!r} is not one of the task's labels "
                             f"({', '.join(self.labels)})")
        return positions[label]

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

    def prediction_rows(self, config, fetched, examples, features) -> List[dict]:
        return [{"label": self.labels[int(np.argmax(p))],
                 "probabilities": {name: float(v) for name, v in zip(self.labels, p)}}
                for p in fetched["probabilities"]]

    def card(self) -> dict:
        return {**super().card(), "labels": list(self.labels)}

    def server(self, tokenizer, model, max_seq_length: int, precision: str) -> ClassifierServer:
        return ClassifierServer(tokenizer, model, self, max_seq_length, precision)
