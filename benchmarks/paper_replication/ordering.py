"""The paper's Table 5 ordering as measured: the models ranked by GLUE average, the spread over
fine-tuning seeds, and which differences are within that noise.

Noise, stated plainly: a model's seed-wise GLUE averages are the averages over the tasks of seed
k's score, one per seed; two models differ beyond the seed spread when the ranges (min-max) of
their seed-wise averages do not overlap. With 3 seeds this is a coarse test, and says so.
"""

import statistics
from typing import List, Optional, Tuple

# Paper Table 5 (GLUE dev, base size): the ranking the ablations are compared with.
PAPER_TABLE5 = {"electra": 85.0, "all_tokens_mlm": 84.3, "replace_mlm": 82.4, "electra_15": 82.4, "bert": 82.2}


def seedwise_averages(summary: dict, tasks) -> Optional[List[float]]:
    """The GLUE average of each seed (its score on every task), or None until every trial is in."""
    if summary.get("average") is None:
        return None
    per_task = [summary["tasks"][t]["seeds"] for t in tasks]
    return [statistics.fmean(scores[k] for scores in per_task) for k in range(len(per_task[0]))]


def _apart(a: List[float], b: List[float]) -> bool:
    return max(a) < min(b) or max(b) < min(a)


def _noise(a: List[float], b: List[float]) -> str:
    return "beyond the seed spread" if _apart(a, b) else "within noise"


def ordering(rows: List[Tuple[str, dict]], tasks) -> List[str]:
    """rows: (model name, tasks summary). Lines: the ranking with each model's seed-wise range,
    each neighbour's difference with its verdict, then the pairs Table 5 orders, as measured."""
    ranked = sorted(((name, summary["average"], seedwise_averages(summary, tasks)) for name, summary in rows
                     if seedwise_averages(summary, tasks)), key=lambda r: -r[1])
    if len(ranked) < 2:
        return []
    lines = ["measured ordering by GLUE average (min–max of the seed-wise averages): " + " > ".join(
        f"{name} {average:.2f} ({min(seeds):.2f}–{max(seeds):.2f})" for name, average, seeds in ranked)]
    lines.append("neighbours: " + "; ".join(
        f"{a[0]} − {b[0]} {a[1] - b[1]:+.2f}, {_noise(a[2], b[2])}" for a, b in zip(ranked, ranked[1:]))
        + f" (beyond the seed spread: the ranges of the two models' {len(ranked[0][2])} seed-wise averages do not "
          "overlap; within noise: they do)")
    measured = {name: (average, seeds) for name, average, seeds in ranked}
    pairs = [(a, b) for a in PAPER_TABLE5 for b in PAPER_TABLE5
             if PAPER_TABLE5[a] > PAPER_TABLE5[b] and a in measured and b in measured]
    if pairs:
        agree = [(a, b) for a, b in pairs if measured[a][0] > measured[b][0]]
        apart = lambda group: sum(_apart(measured[a][1], measured[b][1]) for a, b in group)  # noqa: E731
        disagree = [(a, b) for a, b in pairs if (a, b) not in agree]
        lines.append(
            f"paper Table 5 (base) orders {len(pairs)} of these pairs: measured, {len(agree)} the same way "
            f"({apart(agree)} beyond the seed spread) and {len(disagree)} the other way ({apart(disagree)} beyond it)"
            + ("; the other way: " + ", ".join(f"{a} {measured[a][0]:.2f} < {b} {measured[b][0]:.2f}"
                                               for a, b in disagree) if disagree else ""))
    return lines
