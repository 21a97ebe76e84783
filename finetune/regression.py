"""The `regression` task type: one text or a text pair, one number.

The model learns `target / scale` (the spec's `scale`, 1 unless given; STS-B's preset is 5, the
original's), and its outputs are multiplied back. Scores: Pearson and Spearman correlation and
the MSE, all of the scaled target (as STS-B's in the original's units of 1/5).
"""

from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from electra_tf.errors import InputError
from finetune import scorers
from finetune.heads import RegressionHead
from finetune.sentence_task import SentenceTask
from finetune.servers import RegressorServer
from finetune.task import EvalSplit
from finetune.task_files import TaskFiles

METRICS = ("pearson", "spearman", "mse")


class RegressionTask(SentenceTask):
    type_name = "regression"
    is_regression = True

    def __init__(self, name: str, files: Optional[TaskFiles], scale: float = 1.0, metrics: Tuple[str, ...] = METRICS):
        super().__init__(name, files)
        self.scale, self.metrics = float(scale), metrics

    @classmethod
    def from_spec(cls, name: str, spec: dict, root: Optional[str], card: dict) -> "RegressionTask":
        return cls(name, cls.spec_files(spec, root), spec.get("scale", 1.0))

    def label_value(self, cell, path: Path, line: int) -> float:
        try:
            value = float(cell)
        except (TypeError, ValueError):
            value = float("nan")
        except OverflowError:  # a JSON integer past a float's range
            raise InputError(f"{path}:{line}: target {str(cell)[:20]}... ({len(str(cell))} digits) is past "
                             f"a float's range") from None
        if isinstance(cell, bool) or not np.isfinite(value):
            raise InputError(f"{path}:{line}: target {cell!r} is not a number")
        return value / self.scale

    def make_head(self, config, hidden_size: int) -> RegressionHead:
        return RegressionHead(self.name, hidden_size)

    def score(self, config, split: EvalSplit, predictions, loss: float) -> Dict[str, float]:
        targets = np.array([e.label for e in split.examples], np.float64)
        return scorers.score(self.metrics, targets, predictions, loss, split.prefix)

    def output(self, prediction) -> dict:
        return {"score": float(prediction) * self.scale}

    def predict_outputs(self, head, output) -> Dict[str, tf.Tensor]:
        return {"score": output[:, 0] * self.scale}  # [B], on the target's own scale

    def prediction_rows(self, config, fetched, examples, features) -> List[dict]:
        return [{"score": float(v)} for v in fetched["score"]]

    def card(self) -> dict:
        return {**super().card(), "scale": self.scale}

    def server(self, tokenizer, model, config, precision: str) -> RegressorServer:
        return RegressorServer(tokenizer, model, self, config.max_seq_length, precision)
