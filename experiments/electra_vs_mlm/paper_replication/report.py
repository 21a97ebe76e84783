"""results.json, table.md and the PNGs, regenerated from the unit results (`--report`, and after
every stage). Nothing here decides anything: it reads what the units measured.

Cells are "median (min-max)" over the fine-tuning seeds; a task's score is GLUE's (MCC for CoLA,
accuracy/F1 mean for MRPC, Pearson/Spearman mean for STS-B, accuracy otherwise) and the GLUE
average is the mean of the tasks' medians.
"""

import dataclasses
import statistics
from pathlib import Path
from typing import Dict, List, Optional

from paper_replication.extrapolation import extrapolation
from paper_replication.ordering import PAPER_TABLE5, ordering
from paper_replication.settings import LEARNS_MARGIN
from paper_replication.stages import StagePlan, plan_all, rules_out_later
from paper_replication.store import write_json
from paper_replication.units import GLUE_FOLDERS, Context, Run, Unit, seed_scores


def _summary(ctx: Context, prefix: str, task: str) -> Optional[dict]:
    scores = seed_scores(ctx, prefix, task)
    if not scores:
        return None
    return {"seeds": scores, "median": statistics.median(scores), "min": min(scores), "max": max(scores),
            "spread": max(scores) - min(scores), "n": len(scores)}


def _tasks_summary(ctx: Context, prefix: str, tasks) -> dict:
    summaries = {task: _summary(ctx, prefix, task) for task in tasks}
    complete = all(s is not None and s["n"] == len(ctx.settings.seeds) for s in summaries.values())
    average = statistics.fmean(s["median"] for s in summaries.values()) if complete else None
    return {"tasks": summaries, "average": average}


def _segment_rate(segment: dict) -> Optional[float]:
    """FLOPs per machine second of the steps a segment's unit file timed (a stopped worker's time,
    counted in `machine_seconds`, would also charge steps trained twice)."""
    if not (segment.get("steps_timed", 0) > 0 and segment.get("machine_seconds")):
        return None
    return segment["flops"] / segment["step"] * segment["steps_timed"] / segment["machine_seconds"]


def _run_summary(ctx: Context, run: Run, tasks) -> dict:
    checkpoints, train_log = [], []
    segments = [Unit(f"s{run.stage}/{run.name}/pretrain/{k}", "pretrain", {}) for k in run.probe_steps]
    for step in run.probe_steps:
        segment = ctx.result(f"s{run.stage}/{run.name}/pretrain/{step}") or {}
        train_log += segment.get("train_log", [])  # recorded from stage 4 on
        evaluation = ctx.result(f"s{run.stage}/{run.name}/eval/{step}") or {}
        checkpoints.append({"step": step, "flops": segment.get("flops"), "eval": evaluation.get("metrics"),
                            "machine_seconds": ctx.spent(segments[:run.probe_steps.index(step) + 1]) or None,
                            "tokens_per_second": segment.get("tokens_per_second"),
                            "flops_per_machine_second": _segment_rate(segment),
                            **_tasks_summary(ctx, f"s{run.stage}/{run.name}/ft/{step}", tasks)})
    return {**dataclasses.asdict(run), "checkpoints": checkpoints, "train_log": train_log}


def build_results(ctx: Context, plans: List[StagePlan]) -> dict:
    s = ctx.settings
    stages = []
    for number, plan in enumerate(plans, 1):
        tasks = s.probe_tasks if number == 1 else s.glue_tasks
        vocabs = dict.fromkeys(run.vocab for run in plan.runs)
        random = {vocab: _tasks_summary(ctx, f"s{number}/random_{vocab}/ft", tasks) for vocab in vocabs} \
            if number < 3 else {}
        measured = {kind: {u.id: ctx.result(u.id) for u in plan.units if u.kind == kind}
                    for kind in ("throughput", "export")}  # the speeds behind the budgets; the HF exports
        stages.append({"stage": number, "complete": plan.complete and not ctx.pending(plan.units),
                       "notes": plan.notes, "budget": plan.budget, "tasks": list(tasks),
                       "regime": plan.regime.name if plan.regime else None, "random_init": random,
                       "rules_out_later": rules_out_later(plan, number),
                       "runs": [_run_summary(ctx, run, tasks) for run in plan.runs],
                       "throughput": measured["throughput"], "exports": measured["export"],
                       "trials_from_export": [u.id for u in plan.units if u.kind == "finetune"
                                              and (ctx.result(u.id) or {}).get("started_from")],
                       "machine_seconds_by_cpu": ctx.spent_by_cpu(plan.units)})
    if plans[0].complete and plans[0].regime is None:
        stages[0]["extrapolation"] = extrapolation(stages[0], s)
        stages[0]["notes"] = stages[0]["notes"] + stages[0]["extrapolation"]
    for stage in stages[1:]:
        if stage["runs"]:
            stage["final"] = _final_rows(stages, stage)
            stage["ordering"] = ordering([(row["model"], row) for row in stage["final"]], stage["tasks"])
    if len(stages) > 1 and stages[1]["runs"]:
        stage2 = stages[1]
        stage2["readings"] = readings(stage2["runs"], stage2, s.transfer_margin)
        if stage2["complete"] and not any(transfers_on_glue(run, stage2, s.transfer_margin) for run in stage2["runs"]):
            # no pretrained model beats random init at the cap (issue #17): where it would, and on one GPU
            stage2["extrapolation"] = extrapolation(stage2, s, glue_average=True, label=model_name)
            stage2["notes"] = stage2["notes"] + stage2["extrapolation"]
    if len(stages) > 3:
        electra = [run for run in stages[1]["runs"] if run["objective"] == "electra"]
        stages[3]["readings"] = readings(electra + stages[3]["runs"], stages[1], s.transfer_margin)
    return {"quick": s.quick, "settings": dataclasses.asdict(s), "stages": stages, "total": totals(ctx, plans)}


def totals(ctx: Context, plans: List[StagePlan]) -> dict:
    """The whole replication's time: machine seconds (all, within the plan's cap: stages 1-3, and
    outside it: stage 4), by CPU, and the units' wall seconds summed (pauses included)."""
    within = [u for plan in plans[:3] for u in plan.units]
    outside = [u for plan in plans[3:] for u in plan.units]
    inside_cap, outside_cap = ctx.spent(within), ctx.spent(outside)
    return {"machine_seconds": inside_cap + outside_cap, "wall_seconds": ctx.spent(within + outside, machine=False),
            "machine_seconds_within_cap": inside_cap, "machine_seconds_outside_cap": outside_cap,
            "cap_hours": ctx.settings.cap_hours, "machine_seconds_by_cpu": ctx.spent_by_cpu(within + outside)}


def model_name(run: dict) -> str:
    """A run's name in the tables: its objective, and a diagnostic's change beside it (stage 4)."""
    return run["objective"] if run["stage"] < 4 else f"{run['objective']} ({run['name'][len('s4_'):]})"


def _final_rows(stages: List[dict], stage: dict) -> List[dict]:
    """The models a stage compares at its budget: its runs' last checkpoints, random init, and in
    stages 3 (at stage 2's budget) and 4 stage 2's electra and bert (random init has no budget:
    stage 2's)."""
    runs, random_init = list(stage["runs"]), stage["random_init"]
    if stage["stage"] >= 3:
        random_init = stages[1]["random_init"]
        if not stage["budget"].get("substitute"):
            runs += stages[1]["runs"]
    rows = [{"model": model_name(run), "steps": run["steps"], **run["checkpoints"][-1]} for run in runs]
    return rows + [{"model": f"random init ({vocab})", "steps": 0, "flops": 0, **summary}
                   for vocab, summary in random_init.items()]


def _transfer_gain(run: dict, stage2: dict) -> Optional[float]:
    """A run's final GLUE average over stage 2's random init's (same vocab), rounded as printed so a
    float tie cannot decide; None until both are complete."""
    random = stage2["random_init"].get(run["vocab"], {}).get("average")
    last = run["checkpoints"][-1]["average"]
    return None if last is None or random is None else round(last - random, 6)


def transfers_on_glue(run: dict, stage2: dict, transfer_margin: float) -> bool:
    """The reading fixed before stage 2's last trials (and stage 4's): a GLUE average at least the
    margin above random init's."""
    gain = _transfer_gain(run, stage2)
    return gain is not None and gain >= transfer_margin


def readings(runs: List[dict], stage2: dict, transfer_margin: float) -> List[str]:
    """The pre-registered reading of each run (stage 2's models; stage 4's runs beside stage 2's
    electra): whether it *learns* (final held-out discriminator loss at least LEARNS_MARGIN below
    the constant predictor's) and *transfers* (GLUE average at least the margin above random init's)."""
    lines = []
    for run in runs:
        last = run["checkpoints"][-1]
        metrics = last["eval"] or {}
        if run["objective"] == "bert":
            learns = "no discriminator (MLM only)"
        elif "disc_loss_constant_predictor" in metrics:
            below = round(metrics["disc_loss_constant_predictor"] - metrics["disc_loss"], 6)  # as printed, no float tie
            learns = (f"{'learns' if below >= LEARNS_MARGIN else 'does not learn'} (held-out loss "
                      f"{abs(below):.4f} nats {'below' if below >= 0 else 'above'} the constant predictor's; "
                      f"the rule: at least {LEARNS_MARGIN:g} below)")
        else:
            learns = "learning not measured yet"
        gain = _transfer_gain(run, stage2)
        if gain is not None:
            transfer = (f"{'transfers' if gain >= transfer_margin else 'does not transfer'} (GLUE average "
                        f"{gain:+.2f} over random init's; the rule: at least {transfer_margin:+.1f})")
        else:
            transfer = "transfer not measured yet"
        lines.append(f"{model_name(run)}, step {last['step']}: {learns}; {transfer}")
    return lines


def _cell(summary: Optional[dict]) -> str:
    if summary is None:
        return "–"
    if summary["n"] == 1:
        return f"{summary['median']:.1f}"
    return f"{summary['median']:.1f} ({summary['min']:.1f}–{summary['max']:.1f})"


def _num(value, digits=3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _loss(metrics: dict) -> str:
    if "disc_loss" not in metrics:
        return "–"
    return f"{metrics['disc_loss']:.4f} ({_num(metrics.get('disc_loss_constant_predictor'), 4)})"


def _export(unit_id: str, result: Optional[dict]) -> str:
    """table.md's line on an HF export: what it holds, its size, and where it is."""
    objective = unit_id.rsplit("/", 1)[1]
    if result is None:
        return f"- HF export ({objective}): not yet"
    model = "MLM model" if result["role"] == "generator" else result["role"]
    if result["committed"]:
        where = f"committed in `hf/{objective}` beside this table"
    else:
        where = f"20 MB or more, so not committed; kept in `{result['path']}`"
    return f"- HF export ({objective}): its {model} in float16, {result['bytes'] / 1e6:.1f} MB, {where}"


def _header(columns: List[str]) -> List[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def _final_table(rows: List[dict], tasks, paper: bool = False) -> List[str]:
    """One row per model, ranked by GLUE average."""
    columns = ["model", "steps", "FLOPs"] + [GLUE_FOLDERS[t] for t in tasks] + ["GLUE avg"] + (
        ["paper Table 5"] if paper else [])
    lines = _header(columns)
    for row in sorted(rows, key=lambda r: -(r["average"] if r["average"] is not None else -1e9)):
        cells = [row["model"], str(row["steps"]), _flops(row["flops"])]
        cells += [_cell(row["tasks"][t]) for t in tasks] + [_num(row["average"], 2)]
        if paper:
            cells.append(str(PAPER_TABLE5.get(row["model"], "–")))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _flops(value) -> str:
    """FLOPs in a table cell: "–" unknown, "0" for random init, else 3 significant digits."""
    return "–" if value is None else "0" if value == 0 else f"{value:.2e}"


def write_table(results: dict, path: Path) -> None:
    lines = ["# Paper replication (issue #17): ELECTRA vs. MLM at equal pretraining FLOPs", ""]
    if results["quick"]:
        lines += ["**--quick settings: a tiny model for a handful of steps; the numbers mean nothing.**", ""]
    lines += ["Cells: median over the fine-tuning seeds (min–max). GLUE avg: mean of the task medians.", ""]
    for stage in results["stages"]:
        tasks = stage["tasks"]
        title = {1: "Stage 1: the regime (BERT-MLM pilots against random init)",
                 2: "Stage 2: ELECTRA vs. BERT at equal FLOPs (GLUE dev)",
                 3: "Stage 3: the ablations (Table 5 as measured)",
                 4: "Stage 4: diagnostics of electra (outside the plan and the cap; fixed in REPORT.md before "
                    "they ran)"}[stage["stage"]]
        if stage["budget"].get("substitute"):
            title = "Stage 3, SUBSTITUTE: all five objectives at a smaller common budget (Table 5 as measured)"
        lines += [f"## {title}", ""]
        if stage["stage"] == 1:
            lines += _header(["pilot", "vocab", "lr", "step", "FLOPs", "held-out MLM acc"]
                             + [GLUE_FOLDERS[t] for t in tasks] + ["mean"])
            for run in stage["runs"]:
                for point in run["checkpoints"]:
                    metrics = point["eval"] or {}
                    lines.append("| " + " | ".join(
                        [run["name"], run["vocab"], f"{run['learning_rate']:g}", str(point["step"]),
                         _flops(point["flops"]), _num(metrics.get("masked_lm_accuracy"))]
                        + [_cell(point["tasks"][t]) for t in tasks] + [_num(point["average"], 2)]) + " |")
            for vocab, summary in stage["random_init"].items():
                lines.append("| " + " | ".join([f"random init ({vocab})", vocab, "–", "0", "0", "–"]
                                               + [_cell(summary["tasks"][t]) for t in tasks]
                                               + [_num(summary["average"], 2)]) + " |")
        elif stage["runs"]:  # a stage its budget rules out has only its notes
            lines += _final_table(stage["final"], tasks, paper=stage["stage"] == 3)
            lines += ["", "Ordering and noise:", ""] + [f"- {line}" for line in stage["ordering"] or ["not yet"]]
            lines += [_export(unit_id, result) for unit_id, result in stage["exports"].items()]
            if stage["trials_from_export"]:
                count = len(stage["trials_from_export"])
                lines.append(f"- {count} trial{'s' * (count > 1)} started from the float16 export (the machine that "
                             f"ran them did not have the checkpoint it was made from): "
                             + ", ".join(stage["trials_from_export"]))
            lines += ["", "Reading (learns, transfers):", ""] * ("readings" in stage) + [
                f"- {line}" for line in stage.get("readings", [])]
            lines += ["", "Checkpoints (held-out metrics over real tokens; disc loss beside the constant "
                          "predictor's):", ""]
            lines += _header(["model", "step", "FLOPs", "GLUE avg", "held-out AUC", "disc loss (constant)",
                              "held-out MLM acc", "at [MASK]"])
            for run in stage["runs"]:
                for point in run["checkpoints"]:
                    metrics = point["eval"] or {}
                    lines.append("| " + " | ".join([model_name(run), str(point["step"]), _flops(point["flops"]),
                                                    _num(point["average"], 2), _num(metrics.get("disc_auc")),
                                                    _loss(metrics), _num(metrics.get("masked_lm_accuracy")),
                                                    _num(metrics.get("masked_lm_accuracy_at_mask"))]) + " |")
        lines += [""] * (lines[-1] != "") + [f"- {note}" for note in stage["notes"]]
        lines += [_time_by_cpu(stage["machine_seconds_by_cpu"])] * bool(stage["machine_seconds_by_cpu"]) + [""]
    total = results["total"]
    lines += ["## Total time", "",
              f"- machine time {total['machine_seconds'] / 3600:.2f} h (CPU time over the cores): stages 1-3, "
              f"what the {total['cap_hours']:g} h cap counts, {total['machine_seconds_within_cap'] / 3600:.2f} h; "
              f"stage 4, outside it, {total['machine_seconds_outside_cap'] / 3600:.2f} h",
              f"- wall time of the units, summed: {total['wall_seconds'] / 3600:.2f} h (pauses included)",
              _time_by_cpu(total["machine_seconds_by_cpu"]), ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def _time_by_cpu(seconds: Dict[str, float]) -> str:
    """The stage's machine time by the CPU that spent it, most first: machine classes differ in speed,
    so equal FLOPs took unequal time."""
    parts = [f"{cpu} {value / 3600:.2f} h" for cpu, value in sorted(seconds.items(), key=lambda kv: -kv[1])]
    return "- machine time by CPU: " + "; ".join(parts)


def write_plots(results: dict, directory: Path) -> List[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = [(stage, run) for stage in results["stages"] for run in stage["runs"]]
    colour = {run["name"]: f"C{index % 10}" for index, (_, run) in enumerate(runs)}  # one per run in both plots
    ruled_out = any(stage["rules_out_later"] for stage in results["stages"][:2])
    empty = "stage 2 not run (table.md says why)" if ruled_out else None
    written = []
    figure, axis = plt.subplots(figsize=(6, 4))
    for stage, run in runs:
        points = [(p["flops"], p["average"]) for p in run["checkpoints"] if p["average"] is not None and p["flops"]]
        if stage["stage"] > 1 and points:
            axis.plot(*zip(*points), marker="o", color=colour[run["name"]],
                      label=f"{model_name(run)} (stage {stage['stage']})")
    for stage in results["stages"][1:]:
        for vocab, summary in stage["random_init"].items():
            if summary["average"] is not None:
                axis.axhline(summary["average"], linestyle="--", color="grey", label="random init")
    axis.set(xlabel="pretraining FLOPs", ylabel="GLUE dev average", title="GLUE average against pretraining FLOPs")
    written.append(_save(plt, figure, (axis,), directory / "glue_vs_flops.png", empty))
    figure, (auc, mlm) = plt.subplots(1, 2, figsize=(10, 4))
    for _, run in runs:
        for axis, key, style, suffix in ((auc, "disc_auc", "-", ""), (mlm, "masked_lm_accuracy", "-", ""),
                                         (mlm, "masked_lm_accuracy_at_mask", "--", ", at [MASK]")):
            points = [(p["step"], p["eval"][key]) for p in run["checkpoints"] if p["eval"] and key in p["eval"]]
            if points:
                axis.plot(*zip(*points), style, marker="o", color=colour[run["name"]], label=run["name"] + suffix)
    auc.set(xlabel="step", ylabel="held-out AUC (real tokens)", title="discriminator")
    _auc_scale(auc)
    mlm.set(xlabel="step", ylabel="held-out MLM accuracy", title="generator (bert: the model itself)")
    written.append(_save(plt, figure, (auc, mlm), directory / "pretraining_curves.png", empty))
    figure, axes = plt.subplots(1, 3, figsize=(14, 4))
    for _, run in runs:  # the training batches' own figures, logged every few steps (stage 4 on)
        for axis, key in zip(axes, ("disc_auc", "masked_lm_loss", "grad_norm")):
            points = [(entry["step"], entry[key]) for entry in run["train_log"] if entry.get(key) is not None]
            if points:
                axis.plot(*zip(*points), color=colour[run["name"]], label=model_name(run))
    for axis, (ylabel, title) in zip(axes, (("training-batch AUC", "discriminator"),
                                            ("training MLM loss (nats)", "generator"),
                                            ("gradient norm before the clip at 1", "both"))):
        axis.set(xlabel="step", ylabel=ylabel, title=title)
    _auc_scale(axes[0])
    if axes[2].lines:
        axes[2].set_yscale("log")
    written.append(_save(plt, figure, axes, directory / "training_curves.png",
                         empty or "no training log (recorded from stage 4 on)"))
    return written


def _auc_scale(axis) -> None:
    """An AUC axis from chance (a dotted line at 0.5) to 1: autoscaled, 0.513 against 0.515 looked
    like a peak. Left alone without curves, so that `_save` says nothing is measured yet."""
    if axis.lines:
        lowest = min(min(line.get_ydata()) for line in axis.lines)
        axis.axhline(0.5, linestyle=":", color="grey", label="chance")
        axis.set_ylim(min(0.45, lowest - 0.02), 1.0)


def _save(plt, figure, axes, path: Path, empty: Optional[str] = None) -> Path:
    """Legends where there are lines, then the figure as a PNG at `path`; an axis without lines
    says why (`empty`, or that nothing is measured yet) rather than show an empty frame."""
    for axis in axes:
        if axis.lines:
            axis.legend(fontsize=7)
        else:
            axis.text(0.5, 0.5, empty or "no measurement yet", ha="center", va="center", transform=axis.transAxes)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def write_report(ctx: Context, last_stage: int = 4) -> Dict[str, Path]:
    """Regenerates results.json, table.md and the PNGs in the results dir, over stages 1..last_stage."""
    results = build_results(ctx, plan_all(ctx, last_stage))
    ctx.results_dir.mkdir(parents=True, exist_ok=True)
    write_json(ctx.results_dir / "results.json", results)
    write_table(results, ctx.results_dir / "table.md")
    plots = write_plots(results, ctx.results_dir)
    return {"results": ctx.results_dir / "results.json", "table": ctx.results_dir / "table.md",
            **{p.stem: p for p in plots}}
