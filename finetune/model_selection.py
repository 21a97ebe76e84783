"""Choosing a trial's weights on dev: the best evaluation so far, and early stopping.

Every dev evaluation of a trial is recorded by its main score (`main_score`: the mean over tasks
of each task's first metric). With `keep_best_model` or `early_stopping_patience` the trial ends
with the weights of its best evaluation (the runner writes them when `record` says they are the
best); with `early_stopping_patience` p it stops after p evaluations in a row that did not beat
the best. A tie is no improvement: the earlier evaluation is kept, as `keep_best_model` did.
"""

import math
from typing import Dict, Optional

import numpy as np

Scores = Dict[str, Dict[str, float]]  # {task: {metric: value}}, the first metric being the main one


def main_score(scores: Scores) -> float:
    """The mean over tasks of each task's first metric (the one model selection uses)."""
    return float(np.mean([next(iter(metrics.values())) for metrics in scores.values()]))


class ModelSelection:
    """The best evaluation so far and how many evaluations have passed since it."""

    def __init__(self, patience: Optional[int], state: Optional[dict] = None):
        """`state`: a `state()` saved by an interrupted trial (one saved before early stopping
        existed lacks best_step and stale: they start at None and 0)."""
        state = state or {}
        self.patience = patience
        self.best: float = state.get("best", -math.inf)
        self.best_scores: Optional[Scores] = state.get("best_scores")
        self.best_step: Optional[int] = state.get("best_step")
        self.stale: int = state.get("stale", 0)  # evaluations since the best

    def record(self, step: int, scores: Scores) -> bool:
        """Records the evaluation at `step`; whether it is the new best."""
        score = main_score(scores)
        if score > self.best:
            self.best, self.best_scores, self.best_step, self.stale = score, scores, step, 0
            return True
        self.stale += 1
        return False

    @property
    def stop(self) -> bool:
        """Whether `patience` evaluations in a row have not beaten the best."""
        return self.patience is not None and self.stale >= self.patience

    def state(self) -> dict:
        """What an interrupted trial saves to resume its selection (JSON)."""
        return {"best": self.best, "best_scores": self.best_scores, "best_step": self.best_step, "stale": self.stale}
