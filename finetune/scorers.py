"""Classification, regression and multi-label scores (×100, as the original reports them), in NumPy.

- CoLA: Matthews correlation; SST-2, QNLI, RTE, WNLI, MNLI: accuracy; MRPC, QQP: accuracy and F1
  of the positive class (the original reported accuracy only; GLUE reports both);
  STS-B: Pearson and Spearman correlation (and the MSE of the normalised score, unscaled).
User classification tasks add macro-F1 (the mean over the classes of each class's F1) and
per-class precision, recall and F1; multi-label tasks get micro- and macro-F1 and per-label scores.
Spearman uses average ranks for ties, as scipy does. Degenerate inputs (a constant vector) give 0
where the formula would divide by zero, as sklearn's MCC does.
"""

from typing import Dict, Optional, Sequence

import numpy as np


def accuracy(labels, predictions) -> float:
    return 100.0 * float(np.mean(np.asarray(labels) == np.asarray(predictions)))


def f1(labels, predictions, positive: int = 1) -> float:
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    true_positives = np.sum((predictions == positive) & (labels == positive))
    denominator = np.sum(predictions == positive) + np.sum(labels == positive)
    return 100.0 * float(2 * true_positives / denominator) if denominator else 0.0


def rates(true_positives: int, predicted: int, actual: int) -> Dict[str, float]:
    """Precision, recall and F1 (×100) from the counts of hits, predictions and gold items."""
    precision = true_positives / predicted if predicted else 0.0
    recall = true_positives / actual if actual else 0.0
    f1_score = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": 100.0 * precision, "recall": 100.0 * recall, "f1": 100.0 * f1_score}


def per_class(labels, predictions, names: Sequence[str]) -> Dict[str, float]:
    """`<name>/precision`, `<name>/recall`, `<name>/f1` of every class (one-against-the-rest)."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    scores = {}
    for position, name in enumerate(names):
        own = rates(int(np.sum((predictions == position) & (labels == position))),
                    int(np.sum(predictions == position)), int(np.sum(labels == position)))
        scores.update({f"{name}/{key}": value for key, value in own.items()})
    return scores


def macro_f1(labels, predictions) -> float:
    """The mean over the classes present in labels or predictions of each class's F1."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    return float(np.mean([f1(labels, predictions, positive) for positive in np.union1d(labels, predictions)]))


def multilabel(gold: np.ndarray, predicted: np.ndarray, names: Sequence[str]) -> Dict[str, float]:
    """gold, predicted bool [N, K] -> micro_f1, macro_f1 (mean over the K labels) and per-label
    `<name>/precision`, `<name>/recall`, `<name>/f1`."""
    hits = gold & predicted
    micro = rates(int(hits.sum()), int(predicted.sum()), int(gold.sum()))
    each = [rates(int(hits[:, k].sum()), int(predicted[:, k].sum()), int(gold[:, k].sum())) for k in range(len(names))]
    scores = {"micro_f1": micro["f1"], "macro_f1": float(np.mean([own["f1"] for own in each])),
              "micro_precision": micro["precision"], "micro_recall": micro["recall"]}
    for name, own in zip(names, each):
        scores.update({f"{name}/{key}": value for key, value in own.items()})
    return scores


def matthews_corrcoef(labels, predictions) -> float:
    """Multi-class MCC (Gorodkin's R_K), equal to sklearn's `matthews_corrcoef`."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    classes = np.union1d(labels, predictions)
    confusion = np.array([[np.sum((labels == a) & (predictions == b)) for b in classes] for a in classes],
                         dtype=np.float64)
    true_counts, predicted_counts = confusion.sum(axis=1), confusion.sum(axis=0)
    correct, total = np.trace(confusion), confusion.sum()
    numerator = correct * total - true_counts @ predicted_counts
    denominator = np.sqrt((total ** 2 - predicted_counts @ predicted_counts) *
                          (total ** 2 - true_counts @ true_counts))
    return 100.0 * float(numerator / denominator) if denominator else 0.0


def pearson(x, y) -> float:
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt((x @ x) * (y @ y))
    return 100.0 * float(x @ y / denominator) if denominator else 0.0


def _average_ranks(values) -> np.ndarray:
    """Ranks 1..n, ties sharing the mean of their ranks."""
    values = np.asarray(values)
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), np.float64)
    sorted_values = values[order]
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_values[end] != sorted_values[start]:
            ranks[order[start:end]] = (start + end + 1) / 2.0  # mean of ranks start+1 .. end
            start = end
    return ranks


def spearman(x, y) -> float:
    return pearson(_average_ranks(x), _average_ranks(y))


def score(metrics, labels, predictions, loss: Optional[float] = None, prefix: str = "") -> Dict[str, float]:
    """The named `metrics` (a task's) of predictions against labels, plus `loss` when given."""
    functions = {"accuracy": accuracy, "f1": f1, "macro_f1": macro_f1, "mcc": matthews_corrcoef, "pearson": pearson,
                 "spearman": spearman,
                 "mse": lambda a, b: float(np.mean((np.asarray(a) - np.asarray(b)) ** 2))}
    results = {}
    for name in metrics:
        if name.startswith("mm_"):
            continue  # MNLI's mismatched scores come from the mismatched dev set
        results[prefix + name] = functions[name](labels, predictions)
    if loss is not None:
        results[prefix + "loss"] = float(loss)
    return results
