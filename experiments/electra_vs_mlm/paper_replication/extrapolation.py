"""When no pretrained model beats random init: where, on straight lines in log10 pretraining FLOPs
through each run's checkpoints, the pre-registered rule would first hold, and what that costs here
and on one GPU. Stage 1 without a regime: every probe task's gain over random init above 0, their
mean at least the margin. Stage 2 when neither objective transfers: the GLUE average's gain at
least the margin (stage 4's reading).

A line through three checkpoints of one schedule is a rough guide, so each forecast says how far
past the last checkpoint it reaches and whether a longer pilot with the same vocab and learning
rate already measured past it without transferring.
"""

import math
import statistics
from typing import Callable, Dict, List, Optional, Tuple

from paper_replication.settings import Settings

AVERAGE = "GLUE average"
GPU_FLOPS_PER_SECOND = 5e12  # assumed: one V100-class GPU sustaining about a third of its float32 peak
FAR = 1.0  # log10 FLOPs past the last checkpoint beyond which a forecast is flagged (10x)
BEYOND = 6.0  # ... and beyond which none is given (a million times the data)


def _line(points) -> Tuple[float, float]:
    """Least-squares (slope, intercept) of y on x."""
    xs, ys = zip(*points)
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x in xs)
    return slope, mean_y - slope * mean_x


def hours(seconds: float) -> str:
    """A duration as the report prints it: whole hours from 10 h, tenths from 0.1 h, else minutes."""
    value = seconds / 3600
    return f"{value:,.0f} h" if value >= 10 else f"{value:.1f} h" if value >= 0.1 else f"{seconds / 60:.0f} min"


def gains(run: dict, base: dict, tasks) -> List[Tuple[float, Dict[str, float]]]:
    """(log10 FLOPs, {task: median gain over random init}) at each checkpoint with every task's medians."""
    points = []
    for point in run["checkpoints"]:
        if point["flops"] and all(point["tasks"].get(t) and base.get(t) for t in tasks):
            points.append((math.log10(point["flops"]),
                           {t: point["tasks"][t]["median"] - base[t]["median"] for t in tasks}))
    return points


def average_gains(run: dict, base: dict) -> List[Tuple[float, Dict[str, float]]]:
    """(log10 FLOPs, {AVERAGE: GLUE average's gain over random init's}) at each checkpoint that has it."""
    return [(math.log10(point["flops"]), {AVERAGE: point["average"] - base["average"]})
            for point in run["checkpoints"]
            if point["flops"] and point["average"] is not None and base.get("average") is not None]


def where_rule_holds(fits: Dict[str, Tuple[float, float]], margin: float,
                     last: float) -> Tuple[Optional[float], str]:
    """The smallest log10 FLOPs past `last` (the last checkpoint's) at which every task's line is
    above 0 and their mean at least `margin` (one line: it at least `margin`): (x, "") or (None, why
    not). Each condition holds on a half-line of x; the rule on their intersection."""
    if len(fits) == 1:
        conditions = [(f"{task}'s gain", fit, margin) for task, fit in fits.items()]
    else:
        mean = (statistics.fmean(f[0] for f in fits.values()), statistics.fmean(f[1] for f in fits.values()))
        conditions = [(f"{task}'s gain", fit, 0.0) for task, fit in fits.items()] + [("the mean gain", mean, margin)]
    lows, highs = [], []  # (bound, name, slope, threshold)
    for name, (slope, intercept), threshold in conditions:
        if slope == 0 and intercept < threshold:
            return None, f"{name} does not change with FLOPs and stays below {threshold:g}"
        if slope != 0:
            (lows if slope > 0 else highs).append(((threshold - intercept) / slope, name, slope, threshold))
    low = max(lows)[0] if lows else -math.inf
    if highs and min(highs)[0] < max(low, last):
        high, name, slope, threshold = min(highs)
        if high <= last:
            return None, (f"{name} falls with FLOPs ({slope:+.2f} points per 10x) and its line is below "
                          f"{threshold:g} by the last checkpoint")
        return None, (f"{name} falls with FLOPs ({slope:+.2f} points per 10x): its line drops below {threshold:g} "
                      f"at ~{10 ** high:.2e} FLOPs, before the rest of the rule holds (~{10 ** low:.2e})")
    if low <= last:
        if len(fits) == 1:
            return None, "the fitted line meets the rule by its last checkpoint, the measured value does not"
        return None, "the fitted lines meet the rule by its last checkpoint, its medians do not"
    return low, ""


def extrapolation(stage: dict, settings: Settings, glue_average: bool = False,
                  label: Callable[[dict], str] = lambda run: run["name"]) -> List[str]:
    """One line per run with at least two checkpoints, then how to run the plan on one GPU. The rule
    is stage 1's on its probe tasks, or with `glue_average` stage 2's on the GLUE average. `label`
    names a run as the stage's tables do (stage 1: the pilot's name; stage 2: its objective)."""
    tasks, margin, lines = [AVERAGE] if glue_average else stage["tasks"], settings.transfer_margin, []
    measured = {run["name"]: average_gains(run, stage["random_init"].get(run["vocab"], {})) if glue_average
                else gains(run, stage["random_init"].get(run["vocab"], {}).get("tasks", {}), tasks)
                for run in stage["runs"]}
    for run in stage["runs"]:
        points = measured[run["name"]]
        if len(points) < 2:
            continue
        last_x, last = points[-1]
        fits = {t: _line([(x, g[t]) for x, g in points]) for t in tasks}
        mean = f" (mean {statistics.fmean(last.values()):+.2f})" if len(tasks) > 1 else ""
        text = (f"{label(run)}: at its last checkpoint ({10 ** last_x:.2e} FLOPs) gains "
                + ", ".join(f"{t} {last[t]:+.2f}" for t in tasks) + f"{mean}; "
                + "per 10x FLOPs " + ", ".join(f"{t} {fits[t][0]:+.2f}" for t in tasks) + "; ")
        needed, why_not = where_rule_holds(fits, margin, last_x)
        if needed is not None and needed - last_x > BEYOND:
            needed, why_not = None, f"on these lines the rule holds only over {10 ** BEYOND:,.0f}x past it"
        if needed is None:
            lines.append(text + f"no extrapolation: {why_not}")
            continue
        flops = 10 ** needed
        rates = [p["flops_per_machine_second"] for p in run["checkpoints"] if p.get("flops_per_machine_second")]
        here = f"~{hours(flops / statistics.median(rates))} on this machine, " if rates else ""
        text += (f"on these lines the rule holds from ~{flops:.2e} pretraining FLOPs from step 0 "
                 f"({here}~{hours(flops / GPU_FLOPS_PER_SECOND)} on one GPU)")
        if needed - last_x > FAR:
            text += f", {10 ** (needed - last_x):,.0f}x past its last checkpoint: a straight line says little that far"
        for other in stage["runs"]:
            other_points = measured[other["name"]]
            if (other is not run and other["vocab"] == run["vocab"] and other["learning_rate"] == run["learning_rate"]
                    and other.get("objective") == run.get("objective") and other_points
                    and other_points[-1][0] >= needed):
                text += (f"; {label(other)}, with the same vocab and learning rate and a longer schedule, did not "
                         f"transfer at {10 ** other_points[-1][0]:.2e} FLOPs")
        lines.append(text)
    if lines:
        first = settings.pilots[0].hours
        lines.append(f"one GPU: `python experiments/electra_vs_mlm/replicate_paper.py --output-dir DIR --results-dir DIR/results "
                     f"--clock wall` runs this plan there in at most its {settings.cap_hours:g} h cap, every budget "
                     f"counting the GPU's wall hours (its first {first:g}-hour pilot alone would be "
                     f"~{first * 3600 * GPU_FLOPS_PER_SECOND:.1e} FLOPs); the GPU times above assume "
                     f"{GPU_FLOPS_PER_SECOND:.0e} FLOP/s sustained")
    return lines
