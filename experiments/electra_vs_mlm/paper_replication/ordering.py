"""The paper's Table 5 ordering as measured: the models ranked by GLUE average, the spread over
fine-tuning seeds, and which differences are within that noise.

Noise, stated plainly: a model's seed-wise GLUE averages are the averages over the tasks of seed
k's score, one per seed. One model is ahead *beyond the seed spread* when each of its seed-wise
averages is above each of the other's; for two equal models chance alone separates the ranges
(either way) 2 / C(2n, n) of the time with n seeds each: 1 in 10 with 3, so this is a coarse test.
"""

import math
import statistics
from typing import List, Optional, Tuple

# Paper Table 5 (GLUE dev, base size): the ranking the ablations are compared with.
PAPER_TABLE5 = {"electra": 85.0, "all_tokens_mlm": 84.3, "replace_mlm": 82.4, "electra_15": 82.4, "bert": 82.2}
TIE = 1e-9


def seedwise_averages(summary: dict, tasks) -> Optional[List[float]]:
    """The GLUE average of each seed (its score on every task), or None until every trial is in."""
    if summary.get("average") is None:
        return None
    per_task = [summary["tasks"][t]["seeds"] for t in tasks]
    return [statistics.fmean(scores[k] for scores in per_task) for k in range(len(per_task[0]))]


def verdict(ahead: List[float], behind: List[float]) -> str:
    """How the seed-wise averages of the model ranked ahead compare with the other's."""
    if min(ahead) > max(behind):
        return "beyond the seed spread"
    if max(ahead) < min(behind):
        return "the other way round seed by seed"
    return "within noise"


def ordering(rows: List[Tuple[str, dict]], tasks) -> List[str]:
    """rows: (model name, tasks summary). Lines: the ranking with each model's seed-wise range,
    each neighbour's difference with its verdict, then the pairs Table 5 orders, as measured."""
    seeds = {name: seedwise_averages(summary, tasks) for name, summary in rows}
    ranked = sorted(((name, summary["average"]) for name, summary in rows if seeds[name]), key=lambda r: -r[1])
    missing = [name for name, _ in rows if not seeds[name]]
    waiting = [f"not yet ranked (trials missing): {', '.join(missing)}"] if missing else []
    if len(ranked) < 2:
        return waiting
    n = len(seeds[ranked[0][0]])
    lines = ["measured ordering by GLUE average (min–max of the seed-wise averages): " + "".join(
        ("" if index == 0 else " = " if ranked[index - 1][1] - average < TIE else " > ")
        + f"{name} {average:.2f} ({min(seeds[name]):.2f}–{max(seeds[name]):.2f})"
        for index, (name, average) in enumerate(ranked))]
    lines.append("neighbours: " + "; ".join(
        f"{a} − {b} {x - y:+.2f}, " + ("tied" if x - y < TIE else verdict(seeds[a], seeds[b]))
        for (a, x), (b, y) in zip(ranked, ranked[1:]))
        + f" (beyond the seed spread: each of the {n} seed-wise averages of the first is above each of the "
          f"second's, which chance alone gives two equal models {2 / math.comb(2 * n, n):.0%} of the time; "
          "within noise: their ranges overlap)")
    average = dict(ranked)
    pairs = [(a, b) for a in PAPER_TABLE5 for b in PAPER_TABLE5
             if PAPER_TABLE5[a] > PAPER_TABLE5[b] and a in average and b in average]
    if pairs:
        same = [(a, b) for a, b in pairs if average[a] - average[b] >= TIE]
        tied = [(a, b) for a, b in pairs if abs(average[a] - average[b]) < TIE]
        other = [(a, b) for a, b in pairs if average[b] - average[a] >= TIE]

        def beyond(group, ahead: int) -> int:  # pairs of the group whose model `ahead` (0, 1) leads beyond the spread
            return sum(verdict(seeds[p[ahead]], seeds[p[1 - ahead]]) == "beyond the seed spread" for p in group)

        lines.append(
            f"paper Table 5 (base) orders {len(pairs)} of these pairs: measured, {len(same)} the same way "
            f"({beyond(same, 0)} beyond the seed spread), {len(other)} the other way ({beyond(other, 1)} beyond it)"
            + (f", {len(tied)} tied" if tied else "")
            + ("; the other way: " + ", ".join(f"{a} {average[a]:.2f} < {b} {average[b]:.2f}" for a, b in other)
               if other else ""))
    return lines + waiting
