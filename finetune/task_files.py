"""Where a user task's splits are and which columns hold what: the file half of a task spec
(`finetune.task_specs`), shared by the classification, multi-label and regression types.

Paths are relative to the run's `finetuning_data` dir (`raw_data_dir`) unless absolute. Test
predictions of a user task go to `results/test_predictions/<task>.jsonl`, one JSON object per test
row in file order, with the row's `id` when the spec names an id column.
"""

import dataclasses
import json
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from electra_tf import atomic_files
from finetune.table_files import Column, Layout, RowId, read_rows

TEST_PREDICTIONS_DIR = "test_predictions"


@dataclasses.dataclass(frozen=True)
class TaskFiles:
    root: str  # the run's finetuning_data dir
    train: str
    dev: str
    test: Optional[str]
    layout: Layout
    text: Column
    text_b: Optional[Column] = None
    label: Column = "label"
    id: Optional[Column] = None

    def path(self, split: str) -> Path:
        return Path(self.root) / {"train": self.train, "dev": self.dev, "test": self.test}[split]

    def rows(self, split: str, max_rows: Optional[int] = None) -> Tuple[Path, List[Tuple[int, Dict[str, object]]]]:
        """(the split's file, its rows as (line, {text, text_b, label, id})); a test file may lack
        the label column (its rows then have no "label"), and any file the id column (only test
        predictions carry it)."""
        columns = {"text": self.text, "text_b": self.text_b, "label": self.label, "id": self.id}
        path = self.path(split)
        return path, read_rows(path, self.layout, {k: v for k, v in columns.items() if v is not None}, max_rows,
                               optional=("label", "id") if split == "test" else ("id",))

    def card(self) -> dict:
        """The spec's file layout and columns in the model's task_cards.json: what the model reads, for
        whoever serves it. Predicting reads back only the labels (and tags): the rest it rebuilds from
        the spec in finetuning_config.json."""
        return {"format": self.layout.format, "quoting": self.layout.quoting, "header": self.layout.header,
                "text": self.text, "text_b": self.text_b, "label": self.label, "id": self.id}


def write_test_predictions(results_dir, task_name: str, ids: List[RowId], rows: List[dict]) -> Path:
    """`results/test_predictions/<task>.jsonl` (written whole or not at all)."""
    path = Path(results_dir) / TEST_PREDICTIONS_DIR / f"{task_name}.jsonl"
    return atomic_files.write_text(path, "".join(
        json.dumps({"id": row_id if row_id is not None else index, **row}) + "\n"
        for index, (row_id, row) in enumerate(zip(ids, rows))))
