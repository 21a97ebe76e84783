"""The fine-tuning task interface: everything the runner, the task data, the model builder and the
SavedModel export ask of a task, and nothing else (the original had the same idea in its
`finetune/task.py`: "override this class to add a task").

A task type is one module with a `Task` subclass: `classification`, `regression`, `multilabel`,
`tagging` and `squad_task`. Built-in tasks are presets of them (the nine GLUE tasks of
classification / regression, `chunk` of tagging, `squad` / `squadv1` of SQuAD); a user's task is
the same type built from a few fields in `--hparams` (`finetune.task_specs`).

A split's predictions travel in two forms: `columns`, what `Trial.predict` gathers from the head
(`{key: [value per feature]}`, key None for a head with one output), and the task's own form,
`gather(columns)` (e.g. one number per example), which `score`, `write_test` and the tests use.
"""

import abc
import dataclasses
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from electra_tf.errors import InputError
from electra_tf.token_offsets import tokenize_with_offsets
from finetune.inputs import Features, pad_batch
from finetune.table_files import RowId


@dataclasses.dataclass
class EvalSplit:
    """A featurized dev or test split of one task of the run."""

    task_id: int
    task: "Task"
    name: str  # file stem: dev, dev_matched, test_mismatched, diagnostic, ...
    prefix: str  # metric prefix ("mm_" for MNLI mismatched); for test splits the output's name
    examples: list
    features: Features


class Task(abc.ABC):
    """One fine-tuning task. Subclasses set `name` and implement the abstract methods."""

    name: str
    type_name: str  # the `type` of a user task spec: classification, multilabel, regression, tagging, squad
    presets: Dict[str, object] = {}  # FinetuningConfig values the task sets when trained alone
    dev_files: Tuple[Tuple[str, str], ...] = (("", "dev"),)  # (metric prefix, file stem)
    batch_spec: Dict[str, tf.TensorSpec] = {}  # batch keys beyond finetune.inputs' common ones
    reads_cls_only = False  # its head reads the [CLS] vector alone (the last block may then compute only it)

    # --- data ---------------------------------------------------------------------------------
    @abc.abstractmethod
    def read(self, config, split: str, max_examples: Optional[int]) -> list:
        """The examples of `split` ("train", a dev stem or a test stem) of the run's data
        (`config.raw_data_dir`, finetuning_data); `max_examples` rows at most (None: all)."""

    @abc.abstractmethod
    def featurize(self, examples: list, tokenizer, config, task_id: int, split: str) -> Features:
        """Model inputs of the examples (a `Features`, or a subclass carrying the task's fields)."""

    def make_batch(self, features: Features, indices: Sequence[int], pad_to: Optional[int] = None) -> dict:
        """The examples at `indices` as one padded batch: the common keys and the task's own."""
        return pad_batch(features, indices, pad_to)

    def test_splits(self, config) -> Tuple[Tuple[str, str], ...]:
        """(output name, file stem) of each split whose predictions `write_test_outputs` writes."""
        return ()

    # --- model --------------------------------------------------------------------------------
    @abc.abstractmethod
    def make_head(self, config, hidden_size: int):
        """The head layer: `call(sequence_output, batch, training)`, `per_example_loss(outputs,
        batch)` [B] and `predictions(outputs)` (a tensor or a dict of tensors, leading axis B)."""

    # --- predictions and scores -----------------------------------------------------------------
    def prediction_columns(self, predictions) -> Dict[Optional[str], tf.Tensor]:
        """A batch's head predictions by column, what `gather` reads: by default the head's one
        tensor, under None."""
        return {None: predictions}

    def gather(self, columns: Dict[Optional[str], list]):
        """The split's predictions in the task's form; by default an array over the examples."""
        return np.asarray(columns[None], np.float64)

    @abc.abstractmethod
    def score(self, config, split: EvalSplit, predictions, loss: float) -> Dict[str, float]:
        """The split's scores (×100 where a rate), the main one first, `loss` among them."""

    def write_test(self, config, split: EvalSplit, predictions, results_dir) -> Path:
        """Writes the test split's predictions under `results_dir`; returns the file."""
        raise InputError(f"task {self.name}: writes no test outputs")

    # --- what a fine-tuned model carries --------------------------------------------------------
    @abc.abstractmethod
    def card(self) -> dict:
        """What predicting with a fine-tuned model needs besides its weights (JSON): the type,
        label names or tag set, the columns of its inputs. Saved beside every fine-tuned model."""

    # --- predicting on new inputs (finetune.predicting) -------------------------------------------
    def own_format(self, suffix: str) -> Optional[str]:
        """The format of a prediction input whose file name ends in `suffix` when that is how the
        task's own files are named (a CoNLL `.txt`), else None (the suffix decides)."""
        return None

    def read_inputs(self, source) -> Iterator[Tuple[RowId, object]]:
        """(row id or None, example) of each row of a prediction input (`finetune.predict_inputs`),
        lazily, in input order."""
        raise InputError(f"task {self.name}: a {self.type_name} task cannot predict from a file yet")

    def example_features(self, features: Features) -> np.ndarray:
        """The feature that stands for each example (its encoder vectors are the example's
        embeddings): the example's own, or its first window (SQuAD)."""
        return np.arange(len(features))

    def token_offsets(self, config, tokenizer, examples: list, features: Features) -> List[np.ndarray]:
        """Per example, each token of its `example_features` feature: its [start, end) characters
        in its text (int32 [T, 2]; -1 on [CLS], [SEP]), as the `embed` signature gives them."""
        raise InputError(f"task {self.name}: a {self.type_name} task cannot give token offsets yet")

    def predict_outputs(self, head, outputs) -> Dict[str, tf.Tensor]:
        """In the graph: what predicting fetches from the head's output (leading axis B)."""
        raise InputError(f"task {self.name}: a {self.type_name} task cannot predict from a file yet")

    def prediction_rows(self, config, fetched: Dict[str, list], examples: list, features: Features) -> List[dict]:
        """One JSON object per example from the fetched values ({key: [array per feature]})."""
        raise InputError(f"task {self.name}: a {self.type_name} task cannot predict from a file yet")

    def lite_outputs(self) -> Callable[[tf.Tensor], Dict[str, tf.Tensor]]:
        """The function giving a LiteRT export's outputs (`finetune.litert`) of the head's output on `[CLS]`."""
        raise InputError(f"task {self.name} is a {self.type_name} task; a LiteRT export serves tasks whose head "
                         f"reads [CLS] alone: classification, multi-label, regression (use convert_checkpoint.py "
                         f"saved-model)")

    def server(self, tokenizer, model, config, precision: str) -> tf.Module:
        """A tf.Module whose `serve` and `embed` functions take raw strings (finetune.saved_model),
        featurizing as the run's FinetuningConfig `config` did."""
        raise InputError(f"task {self.name}: a {self.type_name} task cannot be exported as a SavedModel yet")


EDGE = np.full([1, 2], -1, np.int32)  # the offsets of [CLS] or [SEP]


def text_offsets(tokenizer, texts: Sequence[str]) -> List[np.ndarray]:
    """Each text's tokens' [start, end) characters (int32 [T, 2]; `electra_tf.token_offsets`)."""
    _, starts, ends = tokenize_with_offsets(tokenizer, tf.constant(list(texts), tf.string))
    return [np.stack([s, e], -1).astype(np.int32).reshape(-1, 2) for s, e in zip(starts.to_list(), ends.to_list())]
