"""GLUE-server submission files: `results/glue_test/<Task>.tsv` (the original pickled logits instead).

Each file has the header `index<TAB>prediction` and one row per test example in file order, the
index taken from the test file's index column and the prediction in the server's label strings
(`finetune.glue.server_label`: 0/1, entailment/not_entailment, ..., STS-B scores on 0-5).
"""

from pathlib import Path
from typing import List, Sequence

from finetune.glue import Example, GlueTask, server_label

GLUE_TEST_DIR = "glue_test"


def write_server_file(directory, server_name: str, task: GlueTask, examples: Sequence[Example],
                      predictions: Sequence) -> Path:
    """Writes `<directory>/<server_name>.tsv` atomically and returns its path."""
    path = Path(directory) / f"{server_name}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines: List[str] = ["index\tprediction"]
    lines += [f"{example.index if example.index is not None else example.eid}\t{server_label(task, p)}"
              for example, p in zip(examples, predictions)]
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text("\n".join(lines) + "\n", encoding="utf-8")
    temporary.replace(path)
    return path
