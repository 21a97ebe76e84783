"""The nine GLUE tasks as presets of the classification and regression types.

What is GLUE's is data in `finetune.glue` (files, columns, labels, metrics, server names); a
preset reads its files through it (the original's TSV quirks, MNLI's two dev sets, the AX
diagnostic, MRPC's and STS-B's doubled train pairs) and writes GLUE-server files for its test
splits. Heads, losses, predictions, scores and the SavedModel are its type's, as for a user task.
"""

from pathlib import Path
from typing import List

from electra_tf.errors import InputError
from finetune import glue
from finetune.classification import ClassificationTask
from finetune.glue_server_files import GLUE_TEST_DIR, write_server_file
from finetune.regression import RegressionTask
from finetune.table_files import Layout
from finetune.task import EvalSplit


class GlueFiles:
    """The file half of a GLUE preset (mixed into its type's class)."""

    glue_task: glue.GlueTask

    @property
    def has_pair(self) -> bool:
        return self.glue_task.train.text_b is not None

    @property
    def dev_files(self):
        return self.glue_task.dev_files

    def own_format(self, suffix: str):
        return "tsv" if suffix == ".tsv" else None

    def input_columns(self, source):
        """A GLUE preset predicts from its own TSV layouts (quoting off, columns by index): a test
        file's (its header starts with `index` or `id`, which becomes the row's id, and names no
        label column) or a train/dev file's (STS-B's, QQP's and the NLI tasks' start with `index`
        or `id` too, and their text columns differ from the test file's in STS-B and QQP)."""
        if source.format != "tsv":
            raise InputError(f"task {self.name}: predicts from GLUE's TSV layout or plain text, not {source.format}")
        cells = [cell.strip() for cell in source.first_line().split("\t")]
        test = cells[0] in ("index", "id") and not glue.LABEL_HEADERS.intersection(cells)
        columns = self.glue_task.test if test else self.glue_task.train
        chosen = {"text": columns.text_a, "text_b": columns.text_b, "id": columns.index}
        return Layout("tsv", quoting=False, header=columns.header), {k: v for k, v in chosen.items() if v is not None}

    def read(self, config, split: str, max_examples) -> List[glue.Example]:
        return glue.read_split(Path(config.raw_data_dir), self.glue_task, split, max_examples, config.double_unordered)

    def test_splits(self, config):
        return glue.server_splits(self.glue_task)

    def write_test(self, config, split: EvalSplit, predictions, results_dir) -> Path:
        return write_server_file(Path(results_dir) / GLUE_TEST_DIR, split.prefix, self.glue_task, split.examples,
                                 predictions)

    def card(self) -> dict:
        return {**super().card(), "glue": self.glue_task.name}


class GlueClassification(GlueFiles, ClassificationTask):
    def __init__(self, glue_task: glue.GlueTask):
        super().__init__(glue_task.name, None, glue_task.labels, glue_task.metrics, per_class=False)
        self.glue_task = glue_task


class GlueRegression(GlueFiles, RegressionTask):
    def __init__(self, glue_task: glue.GlueTask):
        super().__init__(glue_task.name, None, glue.STS_MAX, glue_task.metrics)
        self.glue_task = glue_task


def glue_preset(name: str):
    """The preset of a GLUE task (its original or folder name)."""
    task = glue.get_task(name)
    return GlueRegression(task) if task.is_regression else GlueClassification(task)
