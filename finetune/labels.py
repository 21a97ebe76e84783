"""A classification head's label order, the same in every run (free of TensorFlow, so that a check
across hash seeds can start a bare interpreter per seed)."""

import math
from typing import Dict, Sequence, Tuple


def stable_labels(values) -> Tuple[str, ...]:
    """A label set in a stable order: numerically when every label is a finite number (labels of
    equal value, "1" and "1.0", by their text), else as strings. A set's own order depends on the
    process's hash seed, so ties must be broken by the text for the head to be the same each run."""
    values = sorted(set(values))
    try:
        numbers = [float(value) for value in values]
    except ValueError:
        return tuple(values)
    if not all(map(math.isfinite, numbers)):  # NaN compares false both ways: no order to sort by
        return tuple(values)
    return tuple(value for _, value in sorted(zip(numbers, values)))


def label_positions(labels: Sequence[str]) -> Dict[str, int]:
    """{label: its index in the head's outputs}."""
    return {label: i for i, label in enumerate(labels)}
