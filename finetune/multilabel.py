"""The `multilabel` task type: one text or a text pair, any number of labels of a fixed set.

A row's labels are a JSON list (a JSONL value, or a CSV/TSV cell holding one) or, with the spec's
`label_delimiter`, the parts of a cell split on it. The label set is the spec's `labels` or every
label of the train file, in a stable order. The head is one sigmoid per label on `[CLS]` (dropout
as the other `[CLS]` heads); its loss is the sum over labels of their binary cross-entropies. A
label is predicted when its probability is at least `threshold` (0.5 unless given). Scores:
micro-F1 (the main one), macro-F1 and, per label, precision, recall and F1 (`<label>/f1`, ...).
"""

import ast
import dataclasses
import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from electra_tf.errors import InputError
from finetune import scorers
from finetune.heads import ClsHead
from finetune.inputs import Features, pad_batch
from finetune.classification import NamedLabels
from finetune.sentence_task import SentenceTask
from finetune.servers import MultilabelServer
from finetune.task import EvalSplit
from finetune.table_files import text_cell
from finetune.task_files import TaskFiles


@dataclasses.dataclass
class MultilabelFeatures(Features):
    label_vectors: np.ndarray  # float32 [N, labels]: 1 where the example has the label


class MultilabelHead(ClsHead):
    """One logit per label; `vector_key` names the batch's label vectors (a key of this task's own)."""

    def __init__(self, task_name: str, num_labels: int, hidden_size: int, vector_key: str, **kwargs):
        super().__init__(task_name, num_labels, hidden_size, **kwargs)
        self.vector_key = vector_key

    def per_example_loss(self, logits, batch):
        """logits [B, K] -> [B]: binary cross-entropy summed over the labels."""
        return tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=batch[self.vector_key], logits=logits), -1)

    def predictions(self, logits):
        return tf.sigmoid(logits)  # [B, K]


def _python_list(text: str) -> bool:
    """Whether `text` is a list literal in Python's syntax: ['a', 'b']."""
    try:
        return isinstance(ast.literal_eval(text.strip()), list)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return False


class MultilabelTask(NamedLabels, SentenceTask):
    type_name = "multilabel"

    def __init__(self, name: str, files: Optional[TaskFiles], labels: Optional[Sequence[str]] = None,
                 label_delimiter: Optional[str] = None, threshold: float = 0.5):
        super().__init__(name, files)
        self._labels = tuple(labels) if labels else None
        self.label_delimiter, self.threshold = label_delimiter, float(threshold)
        self.vector_key = f"label_vector/{name}"
        self.batch_spec = {self.vector_key: tf.TensorSpec([None, None], tf.float32)}

    @classmethod
    def from_spec(cls, name: str, spec: dict, root: Optional[str], card: dict) -> "MultilabelTask":
        return cls(name, cls.spec_files(spec, root), card.get("labels") or spec.get("labels"),
                   spec.get("label_delimiter"), spec.get("threshold", 0.5))

    def cell_labels(self, cell, path: Path, line: int) -> Tuple[str, ...]:
        """The labels of a cell: a list, a JSON list in a string, or the cell split on the delimiter.
        A cell written as a Python list (as pandas writes one) is an error: split on the delimiter it
        would give labels such as "['billing'" (a label such as "[urgent]" is split as before)."""
        value = cell
        if isinstance(value, str) and value.strip().startswith("["):
            try:
                value = json.loads(value)
            except ValueError:  # not JSON (or an integer past Python's digit limit)
                if _python_list(value):
                    raise InputError(f"{path}:{line}: labels {cell!r} are written as a Python list, not as JSON "
                                     f"(write [\"a\", \"b\"], with double quotes)") from None
        if isinstance(value, str) and self.label_delimiter is not None:
            value = [part for part in value.split(self.label_delimiter) if part.strip()]
        if not isinstance(value, list):
            how = f"nor text split on {self.label_delimiter!r}" if self.label_delimiter is not None else \
                "(set label_delimiter in the task spec if the labels are delimited)"
            raise InputError(f"{path}:{line}: labels {cell!r} are neither a JSON list of labels {how}")
        return tuple(text_cell(v, path, line, f"label {v!r} of {cell!r}").strip() for v in value)

    def label_value(self, cell, path: Path, line: int) -> np.ndarray:
        vector = np.zeros(len(self.labels), np.float32)
        vector[self.positions(cell, path, line)] = 1.0
        return vector

    def featurize(self, examples, tokenizer, config, task_id: int, split: str) -> MultilabelFeatures:
        plain = super().featurize([dataclasses.replace(e, label=None) for e in examples], tokenizer, config,
                                  task_id, split)
        vectors = np.stack([np.zeros(len(self.labels), np.float32) if e.label is None else e.label for e in examples])
        return MultilabelFeatures(**{f.name: getattr(plain, f.name) for f in dataclasses.fields(Features)},
                                  label_vectors=vectors)

    def make_batch(self, features: MultilabelFeatures, indices, pad_to=None) -> dict:
        batch = pad_batch(features, indices, pad_to)
        batch[self.vector_key] = features.label_vectors[np.asarray(indices)]
        return batch

    def make_head(self, config, hidden_size: int) -> MultilabelHead:
        return MultilabelHead(self.name, len(self.labels), hidden_size, self.vector_key)

    def gather(self, columns):
        return np.stack(columns[None]).astype(np.float64)  # [N, K] probabilities

    def score(self, config, split: EvalSplit, predictions, loss: float) -> Dict[str, float]:
        gold = np.stack([e.label for e in split.examples]) > 0.5
        return {**scorers.multilabel(gold, predictions >= self.threshold, self.labels),
                split.prefix + "loss": float(loss)}

    def output(self, prediction) -> dict:
        return {"labels": [name for name, p in zip(self.labels, prediction) if p >= self.threshold],
                "probabilities": {name: float(p) for name, p in zip(self.labels, prediction)}}

    def predict_outputs(self, head, logits) -> Dict[str, tf.Tensor]:
        return {"probabilities": tf.sigmoid(logits)}  # [B, K]

    def prediction_rows(self, config, fetched, examples, features) -> List[dict]:
        return [self.output(p) for p in fetched["probabilities"]]

    def lite_served(self, outputs) -> dict:
        probabilities = outputs["probabilities"]  # [B, K]
        names = np.array(self.labels, object)
        return {"probabilities": probabilities, "labels": np.where(probabilities >= self.threshold, names, "")}

    def server(self, tokenizer, model, config, precision: str) -> MultilabelServer:
        return MultilabelServer(tokenizer, model, self, config.max_seq_length, precision)

    def card(self) -> dict:
        return {**super().card(), "labels": list(self.labels), "threshold": self.threshold,
                "label_delimiter": self.label_delimiter}
