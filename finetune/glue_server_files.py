"""GLUE-server submission files: `results/glue_test/<Task>.tsv` (the original pickled logits instead).

Each file has the header `index<TAB>prediction` and one row per test example in file order, the
index taken from the test file's index column and the prediction in the server's label strings
(`finetune.glue.server_label`: 0/1, entailment/not_entailment, ..., STS-B scores on 0-5).
"""

from pathlib import Path
from typing import List, Sequence

from electra_tf import atomic_files
from finetune.glue import Example, GlueTask, server_label

GLUE_TEST_DIR = "glue_test"


def write_server_file(directory, server_name: str, task: GlueTask, examples: Sequence[Example],
                      predictions: Sequence) -> Path:
    """Writes `<directory>/<server_name>.tsv` atomically and returns its path."""
    lines: List[str] = ["index\tprediction"]
    lines += [f"{example.index if example.index is not None else example.eid}\t{server_label(task, p)}"
              for example, p in zip(examples, predictions)]
    return atomic_files.write_text(Path(directory) / f"{server_name}.tsv", "\n".join(lines) + "\n")
