"""The stages as unit lists, with the pre-registered decisions between them (settings.py).

Each `plan_stageN` returns the units known so far: a stage whose next step depends on results
(pilot b only if pilot a does not transfer; stage 2's budget after stage 1's measured hours)
lists what can run now and says it is not `complete`; the runner runs those and plans again.
"""

import dataclasses
import statistics
from typing import Dict, List, Optional, Sequence, Tuple, Union

from paper_replication.flops import flops_per_step
from paper_replication.settings import OBJECTIVES_STAGE2, OBJECTIVES_STAGE3, Diagnostic, Pilot
from paper_replication.units import (CHUNK_TASK, Context, Run, Unit, export_unit, finetune_units, median_scores,
                                     pretraining_units, machine_time, run_hparams, schedule, train_passes)

FINETUNING_MARGIN = 1.2  # estimated fine-tuning hours = 1.2 x passes x measured seconds per pass


@dataclasses.dataclass
class StagePlan:
    units: List[Unit]
    complete: bool  # every unit of the stage is known
    runs: List[Run] = dataclasses.field(default_factory=list)
    regime: Optional[Run] = None  # stage 1: the run whose settings stages 2 and 3 use
    notes: List[str] = dataclasses.field(default_factory=list)
    budget: Dict[str, Union[float, bool]] = dataclasses.field(default_factory=dict)  # hours, FLOPs, substitute


def not_run(plan: StagePlan, number: int) -> bool:
    """Whether stage `number` (2 or later) is complete without runs: its budget did not let it run."""
    return number > 1 and plan.complete and not plan.runs


def rules_out_later(plan: StagePlan, number: int) -> bool:
    """Whether stage `number`'s complete plan leaves no later stage: stage 1 without a regime, or
    stage 2 not run. Stage 3 not run leaves stage 4, which is outside the cap."""
    return (plan.complete and plan.regime is None) if number == 1 else number == 2 and not_run(plan, number)


def step_flops(ctx: Context, objective: str, vocab: str, generator_hidden: Optional[int] = None,
               untied_embeddings: bool = False) -> float:
    """Training FLOPs of one step; the generator is the plan's unless its width or own embeddings are given."""
    s = ctx.settings
    return flops_per_step(objective, s.hidden, s.layers, s.embedding, generator_hidden or s.generator_hidden, s.seq,
                          ctx.vocab_size(vocab), s.batch, untied_embeddings)


def run_step_flops(ctx: Context, objective: str, vocab: str, hparams: Tuple[Tuple[str, object], ...]) -> float:
    """A run's FLOPs per step, with the generator its hparams give (stage 4) or the plan's."""
    own = dict(hparams)
    fraction = own.get("generator_hidden_size")
    width = int(round(fraction * ctx.settings.hidden)) if fraction else None
    return step_flops(ctx, objective, vocab, width, bool(own.get("untied_generator_embeddings")))


def _frozen(ctx: Context, key: str, compute) -> dict:
    """The budget inputs stored under `key` the first time they were computed: a stage's budget
    never moves once it is planned, whatever later code or records would give."""
    stored = ctx.result(key)
    if stored is None:
        stored = compute()
        if ctx.records:  # not while --status only looks
            ctx.store.write(key, stored)
    return stored


def seconds_per_pass(ctx: Context, units: Sequence[Unit]) -> Optional[float]:
    """Measured fine-tuning machine seconds per training example seen, over the finished trials."""
    done = [(ctx.result(u.id), u.params["task"]) for u in units if u.kind == "finetune" and ctx.result(u.id)]
    if not done:
        return None
    return sum(machine_time(r) for r, _ in done) / sum(train_passes(ctx, task) for _, task in done)


def _all_done(ctx: Context, units: Sequence[Unit]) -> bool:
    return not ctx.pending(units)


def pending_by_stage(ctx: Context, plans: List[StagePlan]) -> List[List[Unit]]:
    """Each stage's pending units, judged over all stages: a later stage's unit can need an earlier
    one's artifact (stage 2's runs need stage 1's data, which a new machine has lost)."""
    pending = {u.id for u in ctx.pending([u for plan in plans for u in plan.units])}
    return [[u for u in plan.units if u.id in pending] for plan in plans]


def data_units(ctx: Context, vocabs: Sequence[str]) -> List[Unit]:
    train, held_out = ctx.corpus_split()
    units = []
    if "learned" in vocabs:
        units.append(Unit("s1/data/vocab_learned", "vocab",
                          {"corpus": [str(p) for p in train], "output": str(ctx.vocab_file("learned")),
                           "vocab_size": ctx.settings.learned_vocab_size, "max_lines": ctx.settings.vocab_max_lines},
                          artifact=str(ctx.vocab_file("learned"))))
    for vocab in vocabs:
        units.append(Unit(f"s1/data/build_{vocab}", "build",
                          {"train_files": [str(p) for p in train], "held_out_files": [str(p) for p in held_out],
                           "vocab_file": str(ctx.vocab_file(vocab)), "output_dir": str(ctx.data_dir(vocab)),
                           "max_seq_length": ctx.settings.seq},
                          artifact=str(ctx.data_dir(vocab)),
                          needs=("s1/data/vocab_learned",) if vocab == "learned" else ()))
    return units


def throughput_unit(ctx: Context, stage: int, objective: str, vocab: str, learning_rate: float) -> Unit:
    """A short timed run of `objective` at batch x seq, to turn hours into steps."""
    s = ctx.settings
    run = Run(f"throughput_{objective}_{vocab}", stage, objective, vocab, learning_rate, s.throughput_steps,
              s.throughput_steps, ())
    hparams = {**run_hparams(ctx, run), "num_warmup_steps": 0, "iterations_per_loop": max(1, s.throughput_steps // 4),
               "log_every": max(1, s.throughput_steps // 4), "save_checkpoints_steps": 10 ** 9,
               "model_dir": str(ctx.output_dir / "throughput" / f"s{stage}_{objective}_{vocab}")}
    needs = ("s1/data/vocab_learned", f"s1/data/build_{vocab}") if vocab == "learned" else (f"s1/data/build_{vocab}",)
    return Unit(f"s{stage}/throughput/{objective}_{vocab}", "throughput",
                {"hparams": hparams, "flops_per_step": step_flops(ctx, objective, vocab)}, needs=needs)


def tokens_per_second(ctx: Context, stage: int, objective: str, vocab: str) -> Optional[float]:
    """The throughput unit's tokens per machine second (what the machine does alone)."""
    result = ctx.result(f"s{stage}/throughput/{objective}_{vocab}")
    return None if result is None else result["tokens_per_machine_second"]


def transfer_gains(ctx: Context, run: Run, stage: int = 1) -> Optional[Dict[str, float]]:
    """Median-over-seeds gain over random init per probe task at the run's final checkpoint."""
    tasks = ctx.settings.probe_tasks
    pretrained = median_scores(ctx, f"s{stage}/{run.name}/ft/{run.probe_steps[-1]}", tasks)
    random = median_scores(ctx, f"s{stage}/random_{run.vocab}/ft", tasks)
    if pretrained is None or random is None:
        return None
    return {task: pretrained[task] - random[task] for task in tasks}


def transfers(gains: Dict[str, float], margin: float) -> bool:
    """The decision rule: beats random init on every probe task, by >= margin on their mean."""
    return all(g > 0 for g in gains.values()) and statistics.fmean(gains.values()) >= margin


def _pilot_units(ctx: Context, run: Run, units: List[Unit]) -> None:
    vocab = run.vocab
    units += pretraining_units(ctx, run, step_flops(ctx, "bert", vocab))
    for step in run.probe_steps:
        units += finetune_units(ctx, 1, vocab, ctx.settings.probe_tasks, run, step)
    known = {u.id for u in units}
    units += [u for u in finetune_units(ctx, 1, vocab, ctx.settings.probe_tasks) if u.id not in known]


def plan_stage1(ctx: Context) -> StagePlan:
    s = ctx.settings
    vocabs = list(dict.fromkeys(p.vocab for p in s.pilots))
    units = data_units(ctx, vocabs)
    if not _all_done(ctx, units):
        return StagePlan(units, complete=False, notes=["the pilots are planned once the data is built"])
    units += [throughput_unit(ctx, 1, "bert", p.vocab, p.learning_rate) for p in s.pilots]
    if not _all_done(ctx, units):
        return StagePlan(units, complete=False, notes=["the pilots' steps follow from the measured tokens/s"])
    plan = StagePlan(units, complete=False)
    gains = {}
    for pilot in s.pilots:
        run = pilot_run(ctx, pilot, s.pilot_fractions)
        plan.runs.append(run)
        plan.notes.append(describe(ctx, run, pilot.hours))
        _pilot_units(ctx, run, units)
        gains[pilot.name] = transfer_gains(ctx, run)
        if gains[pilot.name] is None:
            plan.notes.append(f"pilot {pilot.name}: waiting for its probes")
            return plan
        verdict = transfers(gains[pilot.name], s.transfer_margin)
        plan.notes.append(f"pilot {pilot.name}: gains over random init {_fmt(gains[pilot.name])} -> "
                          f"{'transfers' if verdict else 'does not transfer'}")
        if verdict or s.quick:
            if s.quick and not verdict:
                plan.notes.append("--quick: the pipeline continues with this pilot whatever its probes say")
            plan.complete, plan.regime = True, run
            return plan
    best = max(s.pilots, key=lambda p: statistics.fmean(gains[p.name].values()))
    run = pilot_run(ctx, Pilot("c", best.vocab, best.learning_rate, s.pilot_c_hours), s.pilot_fractions)
    plan.runs.append(run)
    plan.notes.append(describe(ctx, run, s.pilot_c_hours))
    _pilot_units(ctx, run, units)
    gains["c"] = transfer_gains(ctx, run)
    if gains["c"] is None:
        plan.notes.append(f"pilot c (pilot {best.name}'s settings, {s.pilot_c_hours:g} h): waiting for its probes")
        return plan
    plan.complete = True
    if transfers(gains["c"], s.transfer_margin):
        plan.regime = run
        plan.notes.append(f"pilot c: gains {_fmt(gains['c'])} -> transfers")
    else:
        plan.notes.append(f"pilot c: gains {_fmt(gains['c'])} -> does not transfer: no regime, stages 2 and 3 "
                          "are not run")
    return plan


def pilot_run(ctx: Context, pilot: Pilot, fractions) -> Run:
    return schedule(ctx.settings, pilot.hours, tokens_per_second(ctx, 1, "bert", pilot.vocab), f"pilot_{pilot.name}",
                    1, "bert", pilot.vocab, pilot.learning_rate, fractions)


def describe(ctx: Context, run: Run, hours: float) -> str:
    s = ctx.settings
    return (f"{run.name}: {run.objective}, {run.vocab} vocab ({ctx.vocab_size(run.vocab):,} tokens), "
            f"lr {run.learning_rate:g}, {run.steps:,} steps of {s.batch} x {s.seq} (~{hours:g} {ctx.clock} hours), "
            f"warm-up {int(round(s.warmup_fraction * run.steps))}, "
            f"checkpoints at {', '.join(map(str, run.probe_steps))}")


def _fmt(gains: Dict[str, float]) -> str:
    return ", ".join(f"{task} {gain:+.2f}" for task, gain in gains.items())


def _stage_runs(ctx: Context, stage: int, regime: Run, objectives, flops_budget: float, hours: float) -> List[Run]:
    return [schedule(ctx.settings, hours, None, f"s{stage}_{objective}", stage, objective, regime.vocab,
                     regime.learning_rate, ctx.settings.stage_fractions,
                     steps=flops_budget / step_flops(ctx, objective, regime.vocab)) for objective in objectives]


def _finetuning_hours(ctx: Context, checkpoints: int, per_pass: float) -> float:
    passes = sum(train_passes(ctx, task) for task in ctx.settings.glue_tasks) * len(ctx.settings.seeds)
    return FINETUNING_MARGIN * checkpoints * passes * per_pass / 3600


def plan_stage2(ctx: Context, stage1: StagePlan) -> StagePlan:
    s, regime = ctx.settings, stage1.regime
    units = [throughput_unit(ctx, 2, "electra", regime.vocab, regime.learning_rate)]
    if not _all_done(ctx, units):
        return StagePlan(units, complete=False, notes=["the budget follows from electra's measured tokens/s"])
    def inputs():
        per_pass = seconds_per_pass(ctx, stage1.units) or 0.0
        return {"stage1_hours": ctx.spent(stage1.units) / 3600, "seconds_per_finetuning_pass": per_pass,
                "finetuning_hours_estimate": _finetuning_hours(ctx, 2 * len(s.stage_fractions) + 1, per_pass)}
    frozen = _frozen(ctx, "s2/budget", inputs)
    stage1_hours, finetuning = frozen["stage1_hours"], frozen["finetuning_hours_estimate"]
    hours = min(s.stage2_max_hours, (s.cap_hours - stage1_hours - finetuning) / 2)
    spent = f"stage 1 took {stage1_hours:.1f} h and stage 2's fine-tuning is estimated at {finetuning:.1f} h"
    if not s.quick and hours < s.min_stage3_hours:
        return StagePlan(units, complete=True, notes=[
            f"stage 2 not run: {spent}, which leaves {hours:.2f} h per objective of the {s.cap_hours:g} h cap "
            f"(below {s.min_stage3_hours:g} h)"])
    electra_steps = s.fixed_steps if s.quick else (
        hours * 3600 * tokens_per_second(ctx, 2, "electra", regime.vocab) / (s.batch * s.seq))
    flops_budget = electra_steps * step_flops(ctx, "electra", regime.vocab)
    runs = _stage_runs(ctx, 2, regime, OBJECTIVES_STAGE2, flops_budget, hours)
    for run in runs:
        units += pretraining_units(ctx, run, step_flops(ctx, run.objective, run.vocab))
        export = export_unit(ctx, run, f"s2/export/{run.objective}", ctx.results_dir / "hf" / run.objective)
        units.append(export)
        for step in run.probe_steps:
            units += finetune_units(ctx, 2, regime.vocab, s.glue_tasks, run, step,
                                    export if step == run.steps else None)
    units += finetune_units(ctx, 2, regime.vocab, s.glue_tasks)
    budget = {"hours_each": hours, "flops_each": flops_budget, **frozen}
    return StagePlan(units, complete=True, runs=runs, budget=budget,
                     notes=[f"budget {flops_budget:.3g} FLOPs each (~{hours:.2f} h of the electra step; {spent}): "
                            + ", ".join(f"{r.objective} {r.steps} steps" for r in runs)])


def plan_stage3(ctx: Context, stage1: StagePlan, stage2: StagePlan) -> StagePlan:
    s, regime = ctx.settings, stage1.regime
    frozen = _frozen(ctx, "s3/budget", lambda: {
        "left_hours": s.cap_hours - stage2.budget["stage1_hours"] - ctx.spent(stage2.units) / 3600,
        "seconds_per_finetuning_pass": seconds_per_pass(ctx, stage1.units + stage2.units) or 0.0})
    left, per_pass = frozen["left_hours"], frozen["seconds_per_finetuning_pass"]
    hours2, flops2 = stage2.budget["hours_each"], stage2.budget["flops_each"]
    if s.quick or left - _finetuning_hours(ctx, 3, per_pass) >= 3 * hours2:
        objectives, hours, label, substitute = OBJECTIVES_STAGE3, hours2, "stage 2's budget", False
    else:
        substitute = True
        objectives = OBJECTIVES_STAGE2 + OBJECTIVES_STAGE3
        hours = (left - _finetuning_hours(ctx, 5, per_pass)) / 5
        label = f"SUBSTITUTE: all five at {hours:.2f} h each (stage 2's {hours2:.2f} h does not fit the cap)"
        if hours < s.min_stage3_hours:
            used = f"stage 3 not run: stages 1-2 used {s.cap_hours - left:.1f} h"
            if left < 0:
                why = f", over the {s.cap_hours:g} h cap by {-left:.1f} h"
            elif hours >= 0:
                why = (f" of the {s.cap_hours:g} h cap, which leaves {hours:.2f} h per objective after fine-tuning, "
                       f"below {s.min_stage3_hours:g} h")
            else:
                why = (f" of the {s.cap_hours:g} h cap, leaving {left:.1f} h: short of the five objectives' "
                       f"fine-tuning by {-hours:.2f} h each, let alone {s.min_stage3_hours:g} h of pretraining each")
            return StagePlan([], complete=True, notes=[used + why])
    flops_budget = flops2 * hours / hours2 if hours2 else flops2
    runs = _stage_runs(ctx, 3, regime, objectives, flops_budget, hours)
    units = []
    for run in runs:
        units += pretraining_units(ctx, run, step_flops(ctx, run.objective, run.vocab))
        units += finetune_units(ctx, 3, regime.vocab, s.glue_tasks, run, run.steps)
    return StagePlan(units, complete=True, runs=runs,
                     budget={"hours_each": hours, "flops_each": flops_budget, "substitute": substitute},
                     notes=[f"budget: {label}: " + ", ".join(f"{r.objective} {r.steps} steps" for r in runs)])


def plan_stage4(ctx: Context, stage1: StagePlan, stage2: StagePlan) -> StagePlan:
    """The diagnostics (settings.DIAGNOSTICS): `electra` at stage 2's schedule with its settings
    changed, its final checkpoint fine-tuned; random init is stage 2's. Outside the cap.
    First, the chunking reading (issue #42, added before any of its trials ran) of stage 2's final
    models, from their committed exports, and of random init; every diagnostic is read on it too."""
    s, regime = ctx.settings, stage1.regime
    hours, flops2 = stage2.budget["hours_each"], stage2.budget["flops_each"]
    electra = next(run for run in stage2.runs if run.objective == "electra")
    runs, units = [], []
    for run in stage2.runs:
        export = export_unit(ctx, run, f"s2/export/{run.objective}", ctx.results_dir / "hf" / run.objective)
        units += finetune_units(ctx, 2, regime.vocab, (CHUNK_TASK,), run, run.steps, export)
    units += finetune_units(ctx, 2, regime.vocab, (CHUNK_TASK,))
    for diagnostic in s.diagnostics:
        run = diagnostic_run(ctx, diagnostic, regime, electra, hours, flops2)
        runs.append(run)
        units += pretraining_units(ctx, run, run_step_flops(ctx, run.objective, run.vocab, run.hparams))
        export = export_unit(ctx, run, f"s4/export/{run.name}", ctx.results_dir / "hf" / run.name)
        units += [export] + finetune_units(ctx, 4, regime.vocab, (CHUNK_TASK,) + s.glue_tasks, run, run.steps,
                                           export)
    return StagePlan(units, complete=True, runs=runs, budget={"hours_each": hours, "flops_each": flops2}, notes=[
        "diagnostics outside the plan and the cap, fixed in REPORT.md before they ran: "
        + ", ".join(f"{run.name} {run.steps} steps" for run in runs)])


def diagnostic_run(ctx: Context, diagnostic: Diagnostic, regime: Run, electra: Run, hours: float,
                   flops2: float) -> Run:
    """A diagnostic's run: `electra`'s steps, or stage 2's FLOPs at its own step cost, rounded as
    stage 2 rounds them (to a multiple of its 20 checkpoints, as many as stage 2's runs save)."""
    steps = electra.steps
    if diagnostic.flops_matched:
        steps = flops2 / run_step_flops(ctx, "electra", regime.vocab, diagnostic.hparams)
    return schedule(ctx.settings, hours, None, f"s4_{diagnostic.name}", 4, "electra", regime.vocab,
                    diagnostic.learning_rate or regime.learning_rate, ctx.settings.stage_fractions, steps=steps,
                    hparams=diagnostic.hparams)


def pin_schedule(ctx: Context, run: Run) -> None:
    """Records the run's schedule the first time it is planned (`units/s<stage>/<run>/schedule.json`).
    A later plan that differs (code changed under results that exist) is an error: new steps would
    mean new unit ids, orphaning the results and their time, which the cap counts."""
    planned = {"objective": run.objective, "vocab": run.vocab, "learning_rate": run.learning_rate,
               "steps": run.steps, "probe_steps": list(run.probe_steps)}
    if run.hparams:  # only where there are any: the records of stages 1-3 predate the field
        planned["hparams"] = dict(run.hparams)
    key = f"s{run.stage}/{run.name}/schedule"
    recorded = _frozen(ctx, key, lambda: planned)
    if recorded != planned:
        raise SystemExit(f"error: {run.name} is now planned as {planned}, but units/{key}.json records {recorded}: "
                         "the plan must not change once it has results; restore the code that planned it")


def plan_all(ctx: Context, last_stage: int = 4) -> List[StagePlan]:
    """The plans of stages 1..last_stage as far as the results so far allow."""
    plans = [plan_stage1(ctx)]
    if last_stage >= 2 and plans[0].complete and plans[0].regime is not None and _all_done(ctx, plans[0].units):
        plans.append(plan_stage2(ctx, plans[0]))
        if last_stage >= 3 and plans[1].complete and plans[1].runs and _all_done(ctx, plans[1].units):
            plans.append(plan_stage3(ctx, plans[0], plans[1]))
            if last_stage >= 4 and _all_done(ctx, plans[2].units):  # run or not, stage 3 comes first
                plans.append(plan_stage4(ctx, plans[0], plans[1]))
    for plan in plans:
        for run in plan.runs:
            pin_schedule(ctx, run)
    return plans
