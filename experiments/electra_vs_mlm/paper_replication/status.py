"""What `--status` prints: per stage, what is done, what remains and the ETA, where a run in
training stands, and what is already certain of the stages not planned yet. It plans without
running anything and records nothing (no TensorFlow import)."""

from pathlib import Path
from typing import List

from electra_tf.progress import format_duration as duration
from paper_replication.eta import Estimator
from paper_replication.stages import StagePlan, not_run, pending_by_stage, plan_all, plan_stage4, rules_out_later
from paper_replication.units import Context, Unit, latest_checkpoint_step


def status(ctx: Context, last_stage: int = 4) -> str:
    """What is done, what remains and the ETA, per stage. It plans without recording: a budget or
    schedule planned for the first time here is recorded by the run that uses it."""
    records, ctx.records = ctx.records, False
    try:
        plans = plan_all(ctx, last_stage)
    finally:
        ctx.records = records
    estimator = Estimator(ctx, [u for plan in plans for u in plan.units])
    lines, total = [f"output {ctx.output_dir}, results {ctx.results_dir}; budgets count {ctx.clock} seconds"], 0.0
    by_stage = pending_by_stage(ctx, plans)
    for number, plan in enumerate(plans, 1):
        if not_run(plan, number):  # ruled out by its budget
            lines += [f"stage {number}: not run"] + [f"  {note}" for note in plan.notes]
            continue
        pending = by_stage[number - 1]
        pending_ids = {u.id for u in pending}
        kinds = {}
        for unit in plan.units:
            done, count = kinds.get(unit.kind, (0, 0))
            kinds[unit.kind] = (done + (unit.id not in pending_ids), count + 1)
        eta = estimator.total(pending)
        total += eta
        wall, machine = ctx.spent(plan.units, machine=False), ctx.spent(plan.units)
        lines.append(f"stage {number}: {len(plan.units) - len(pending)} done, {len(pending)} remaining"
                     f"{'' if plan.complete else ' (more once these finish)'}; time so far {duration(wall)} "
                     f"({duration(machine)} {ctx.clock} time), ETA {duration(eta)}")
        if kinds:
            lines.append("  " + ", ".join(f"{kind} {done}/{count}" for kind, (done, count) in kinds.items()))
        lines += [f"  {note}" for note in plan.notes]
        lines += _training(plan, pending)
    for number in range(len(plans) + 1, last_stage + 1):
        lines.append(f"stage {number}: {_not_planned(plans)}")
        lines += _foreseen(ctx, plans, number, estimator)
    lines.append(f"remaining (planned units): {sum(map(len, by_stage))}, ETA {duration(total)}")
    return "\n".join(lines)


def _training(plan: StagePlan, pending: List[Unit]) -> List[str]:
    """Where each run with pending segments stands: its newest checkpoint in the output dir."""
    lines, seen = [], set()
    for unit in pending:
        if unit.kind == "pretrain" and unit.params["run"] not in seen:
            seen.add(unit.params["run"])
            run = next(r for r in plan.runs if r.name == unit.params["run"])
            step = latest_checkpoint_step(Path(unit.params["hparams"]["model_dir"]))
            lines.append(f"  {run.name}: newest checkpoint at step {step:,} of {run.steps:,}" if step else
                         f"  {run.name}: no checkpoint yet (its pretraining starts from step 0)")
    return lines


def _foreseen(ctx: Context, plans: List[StagePlan], number: int, estimator: Estimator) -> List[str]:
    """What is already certain of a stage not planned yet, once stage 2 has its runs: stage 3 will
    not run when stages 1-2 have spent the cap already (their time only grows); stage 4 depends on
    stages 1-2's plans alone, so its units and their estimate are known (nothing is recorded)."""
    if len(plans) != 2 or not plans[1].runs:
        return []
    used = plans[1].budget["stage1_hours"] + ctx.spent(plans[1].units) / 3600
    stage3_out = not ctx.settings.quick and used > ctx.settings.cap_hours
    if number == 3:
        return [f"  it will not run: stages 1-2 have used {used:.1f} h of the {ctx.settings.cap_hours:g} h cap"] * \
            stage3_out
    if number == 4:
        preview = plan_stage4(ctx, plans[0], plans[1])
        machine = estimator.machine_total(preview.units)
        after = "once stage 2 ends" if stage3_out else "after stage 3"
        return [f"  {after}: {len(preview.units)} units, ETA {duration(estimator.total(preview.units))} "
                f"({duration(machine)} {ctx.clock} time; "
                + ", ".join(f"{run.name} {run.steps:,} steps" for run in preview.runs) + ")"]
    return []


def _not_planned(plans: List[StagePlan]) -> str:
    """Why a stage after the planned ones has no plan: its predecessor's results are not in yet, or
    they rule it out (stage 1 without a regime, or stage 2 that its budget did not let run)."""
    if rules_out_later(plans[-1], len(plans)):
        return f"not run (stage {len(plans)}'s note says why)"
    return f"not planned yet (waits for stage {len(plans)}'s results)"
