"""What the sentence-level task types share: a text or a text pair a row, read from the task's
files, featurized as `[CLS] a [SEP] (b [SEP])`, with a head on the `[CLS]` vector.

`classification`, `regression` and `multilabel` differ only in their label (`label_value`), head,
scores and outputs. The GLUE presets (`finetune.glue_presets`) read the GLUE files instead.
"""

import abc
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np

from electra_tf.errors import InputError
from finetune.glue import Example
from finetune.inputs import Features, featurize
from finetune.table_files import FORMATS, Layout, RowId, blank_text, id_cell, iter_rows, text_cell
from finetune.task import EDGE, EvalSplit, Task, text_offsets
from finetune.task_files import TaskFiles, write_test_predictions


class SentenceTask(Task):
    reads_cls_only = True

    def __init__(self, name: str, files: Optional[TaskFiles]):
        self.name, self.files = name, files

    @staticmethod
    def spec_files(spec: dict, root: Optional[str]) -> TaskFiles:
        """The files and columns of a user task's spec (`finetune.task_specs`)."""
        layout = Layout(spec["format"], quoting=spec.get("quoting", False), header=spec.get("header", True))
        return TaskFiles(root or "", spec["train"], spec["dev"], spec.get("test"), layout, spec.get("text", "text"),
                         spec.get("text_b"), spec.get("label", "label"), spec.get("id"))

    @property
    def has_pair(self) -> bool:
        return self.files.text_b is not None

    @abc.abstractmethod
    def label_value(self, cell, path: Path, line: int):
        """The example's label (a class position, a target, a label vector) from its label cell."""

    def read(self, config, split: str, max_examples: Optional[int]) -> List[Example]:
        if split == "test" and self.files.test is None:
            raise InputError(f"task {self.name}: no test file in its spec")
        path, rows = self.files.rows(split, max_examples)
        examples = []
        for line, cells in rows:
            text_a = text_cell(cells["text"], path, line, f"text (column {self.files.text!r})")
            text_b = None
            if self.has_pair:
                text_b = text_cell(cells["text_b"], path, line, f"second text (column {self.files.text_b!r})")
            # a test file's labels, if it has them, are not read (placeholders such as -1 included): they are
            # to be predicted, and nothing scores them
            label = None if "label" not in cells or split == "test" else self.label_value(cells["label"], path, line)
            examples.append(Example(len(examples), text_a, text_b, label, id_cell(cells.get("id"), path, line)))
        return examples

    def featurize(self, examples, tokenizer, config, task_id: int, split: str) -> Features:
        return featurize(examples, tokenizer, config.max_seq_length, task_id, self.is_regression)

    def token_offsets(self, config, tokenizer, examples, features) -> List[np.ndarray]:
        """text_a's kept tokens after [CLS], text_b's after the first [SEP] (finetune.inputs' layout)."""
        texts = [[e.text_a for e in examples]] + ([[e.text_b or "" for e in examples]] if self.has_pair else [])
        offsets = [text_offsets(tokenizer, column) for column in texts]  # per text column, per example
        rows = []
        for i, segments in enumerate(features.segment_ids):
            kept_a = int((segments == 0).sum()) - 2
            parts = [EDGE, offsets[0][i][:kept_a], EDGE]
            if len(segments) > kept_a + 2:  # a pair: text_b's tokens, then [SEP]
                parts += [offsets[1][i][:len(segments) - kept_a - 3], EDGE]
            rows.append(np.concatenate(parts))
        return rows

    is_regression = False  # the label is a float target (finetune.inputs' `targets`), not a class

    def own_format(self, suffix: str) -> Optional[str]:
        same = self.files is not None and Path(self.files.train).suffix.lower() == suffix
        return self.files.layout.format if same else None

    def input_columns(self, source) -> Tuple[Layout, Dict[str, object]]:
        """How a prediction input is read: its layout and the columns of text, text_b, id."""
        format = source.format
        files = self.files
        columns = {"text": files.text, "text_b": files.text_b, "id": files.id}
        return (Layout(format, quoting=files.layout.quoting, header=files.layout.header),
                {key: value for key, value in columns.items() if value is not None})

    def read_inputs(self, source) -> Iterator[Tuple[RowId, Example]]:
        """Plain text (a text a line; a pair's texts separated by a tab) or the task's columns."""
        if source.format == "text":
            yield from self._text_inputs(source)
            return
        if source.format not in FORMATS:
            raise InputError(f"{source.name}: a {self.type_name} task reads text, csv, tsv or jsonl, "
                             f"not {source.format}")
        layout, columns = self.input_columns(source)
        for line, cells in iter_rows(source.name, layout, columns, optional=("id",), source=source.stream(),
                                     on_blank=source.empty):
            texts = [cells.get(key) for key in ("text", "text_b") if key in columns]
            if any(map(blank_text, texts)) and source.empty(line, "text"):
                continue
            text_a = text_cell(texts[0], source.name, line, "text")
            text_b = text_cell(texts[1], source.name, line, "second text") if self.has_pair else None
            yield id_cell(cells.get("id"), source.name, line), Example(line, text_a, text_b, None)

    def _text_inputs(self, source) -> Iterator[Tuple[RowId, Example]]:
        for line, text in source.lines():
            if not text.strip() and source.empty(line):
                continue
            parts = text.split("\t") if self.has_pair else [text]
            if len(parts) != (2 if self.has_pair else 1):
                raise InputError(f"{source.name}:{line}: a pair task's line is its two texts separated by one tab")
            if not all(part.strip() for part in parts) and source.empty(line, "text"):
                continue
            yield None, Example(line, parts[0], parts[1] if self.has_pair else None, None)

    def test_splits(self, config):
        return (("test", "test"),) if self.files is not None and self.files.test is not None else ()

    def write_test(self, config, split: EvalSplit, predictions, results_dir) -> Path:
        return write_test_predictions(results_dir, self.name, [e.index for e in split.examples],
                                      [self.output(p) for p in predictions])

    def lite_outputs(self):
        """In a LiteRT export's graph: what predicting fetches (numbers only; `finetune.litert`)."""
        return lambda output: self.predict_outputs(None, output)

    def lite_served(self, outputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """A LiteRT export's outputs as the SavedModel's `serving_default` gives them: with the label
        names its graph does not hold (regression: the score as it is)."""
        return dict(outputs)

    @abc.abstractmethod
    def output(self, prediction) -> dict:
        """One prediction as a JSON object (what test predictions and `predict` write)."""

    def card(self) -> dict:
        return {"type": self.type_name, "pair": self.has_pair,
                "files": None if self.files is None else self.files.card()}
