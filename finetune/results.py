"""Per-trial dev scores and their aggregate over trials (the original left aggregation to the user).

`results/<tasks>_results.json`: {"trials": [{task: {metric: value}}, ...], "aggregate": {task:
{metric: {median, mean, std, min, max, n}}}, ...}; `results/<tasks>_results.txt`: the original's
one line per task per trial (`task: metric: value - metric: value`) followed by the aggregate table.
std is the sample standard deviation (ddof 1; 0 for a single trial).
"""

import json
from pathlib import Path
from typing import Dict, List

import numpy as np

from electra_tf import atomic_files

STATISTICS = ("median", "mean", "std", "min", "max")
Scores = Dict[str, Dict[str, float]]  # task -> metric -> value


def aggregate(trials: List[Scores]) -> Dict[str, Dict[str, Dict[str, float]]]:
    """{task: {metric: {statistic: value, "n": trials}}} over the trials that have the metric."""
    table: Dict[str, Dict[str, Dict[str, float]]] = {}
    for scores in trials:
        for task, metrics in scores.items():
            for metric in metrics:
                values = np.array([t[task][metric] for t in trials if metric in t.get(task, {})], np.float64)
                table.setdefault(task, {})[metric] = {
                    "median": float(np.median(values)), "mean": float(values.mean()),
                    "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
                    "min": float(values.min()), "max": float(values.max()), "n": int(len(values))}
    return table


def format_table(table) -> str:
    """The aggregate as an aligned text table, one row per task and metric."""
    rows = [("task", "metric", *STATISTICS, "n")]
    for task, metrics in table.items():
        for metric, stats in metrics.items():
            rows.append((task, metric, *(f"{stats[s]:.2f}" for s in STATISTICS), str(stats["n"])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def trial_lines(trials: List[Scores]) -> List[str]:
    """The original's results.txt lines (`run_finetuning.write_results`): `task: metric: value -
    metric: value`, a line per task of each trial in turn, as the original writes them (the
    statistics' table follows them here, after a blank line)."""
    return [f"{task}: " + " - ".join(f"{k}: {v:.2f}" for k, v in metrics.items())
            for scores in trials for task, metrics in scores.items()]


def write_results(results_dir, tasks_key: str, trials: List[Scores], extra: dict) -> dict:
    """Writes (atomically) and returns the results document; `extra` adds the task names, the
    config and e.g. test-file details."""
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    table = aggregate(trials)
    document = {"trials": trials, "aggregate": table, **extra}
    text = "\n".join(trial_lines(trials)) + "\n\n" + format_table(table) + "\n"
    for path, content in ((results_dir / f"{tasks_key}_results.json", json.dumps(document, indent=2) + "\n"),
                          (results_dir / f"{tasks_key}_results.txt", text)):
        atomic_files.write_text(path, content)
    return document
