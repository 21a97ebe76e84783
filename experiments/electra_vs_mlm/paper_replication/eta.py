"""Estimated wall seconds of pending units, from what finished units measured (priors until then).

Rates are measured in machine seconds and turned into wall seconds by the median wall / machine
ratio of the finished units, so a unit that was paused (SIGSTOP while another job took the
machine) does not inflate the estimate: its own ratio is an outlier the median ignores.
Pretraining segments: their steps not yet checkpointed x FLOPs per step / the FLOP rate measured
by finished segments of the same run, else by any pretraining on this machine (segments and
throughput runs), else a prior.
Fine-tuning trials: training examples seen x the measured seconds per example. Evaluations: the
mean measured. Everything else: fixed priors (a few minutes at most).
Machine classes differ in speed (an AVX2 CPU took about 1.5x an AVX-512 one's time per step), so
each rate comes from the results measured on the CPU the estimate is made on when there are any,
else from all of them (results before 2026-11-26 do not name their CPU). The wall / machine ratio
comes from all of them until this CPU has MIN_RATIOS results.
"""

import os
import statistics
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from paper_replication.units import (Context, Unit, cpu_description, latest_checkpoint_step, machine_time,
                                     train_passes)

PRIORS = {"vocab": 300.0, "build": 900.0, "throughput": 180.0, "eval": 60.0, "finetune": 120.0, "export": 30.0}
PRIOR_FLOPS_PER_SECOND = 3e10
MIN_RATIOS = 5  # results on this CPU before its own wall / machine ratio is used


class Estimator:
    """Measured rates over a set of units (all stages planned so far)."""

    def __init__(self, ctx: Context, units: Sequence[Unit], cpu: Optional[str] = None):
        self.ctx = ctx
        here = cpu or cpu_description(os.cpu_count() or 1)
        # Each figure's samples as (the CPU that measured it, value); `_on` keeps this CPU's if any.
        run_rates: Dict[str, list] = {}
        eval_seconds, finetune, ratios = [], [], []
        for unit in units:
            result = ctx.result(unit.id)
            if result is None:
                continue
            measured_on, machine = result.get("cpu"), machine_time(result)
            if machine > 1:
                ratios.append((measured_on, result.get("seconds", machine) / machine))
            if unit.kind == "pretrain" and result.get("steps_timed") and machine > 1:
                flops = result["steps_timed"] * unit.params["flops_per_step"]
                run_rates.setdefault(unit.params["run"], []).append((measured_on, flops / machine))
            elif unit.kind == "throughput":
                steps_per_second = result["examples_per_machine_second"] / unit.params["hparams"]["train_batch_size"]
                rate = steps_per_second * unit.params["flops_per_step"]
                run_rates.setdefault(unit.id, []).append((measured_on, rate))
            elif unit.kind == "eval":
                eval_seconds.append((measured_on, machine))
            elif unit.kind == "finetune":
                finetune.append((measured_on, (train_passes(ctx, unit.params["task"]), machine)))

        def _on(samples: list) -> list:
            return [value for measured_on, value in samples if measured_on == here] or [v for _, v in samples]

        self.run_rates: Dict[str, List[float]] = {run: _on(samples) for run, samples in run_rates.items()}
        self.eval_seconds: List[float] = _on(eval_seconds)
        # the share of the machine the run gets (other load, pauses, and the cores a unit keeps
        # busy, machine seconds being CPU seconds over the cores): this CPU's once it has
        # MIN_RATIOS, else every result's, so that one unit slowed by a benchmark beside it on a
        # new machine does not set the whole ETA
        mine = [v for measured_on, v in ratios if measured_on == here]
        pooled = mine if len(mine) >= MIN_RATIOS else [v for _, v in ratios]
        self.wall_per_machine = statistics.median(pooled) if pooled else 1.0
        passes = sum(p for p, _ in _on(finetune))
        self.seconds_per_pass: Optional[float] = sum(s for _, s in _on(finetune)) / passes if passes else None
        rates = _on([sample for samples in run_rates.values() for sample in samples])
        self.flops_per_second = statistics.median(rates) if rates else PRIOR_FLOPS_PER_SECOND

    def seconds(self, unit: Unit, trained_to: int = 0) -> float:
        """The unit's estimated wall seconds."""
        return self.machine_seconds(unit, trained_to) * self.wall_per_machine

    def machine_seconds(self, unit: Unit, trained_to: int = 0) -> float:
        """The unit's estimated machine seconds. A pretraining segment's worker trains its run from
        the newest checkpoint (step 0 on a new machine, whatever the segment's `from_step`) or from
        `trained_to`, where the run's pending segment before it ends, straight through to its step."""
        params = unit.params
        if unit.kind == "pretrain":
            rates = self.run_rates.get(params["run"])
            rate = statistics.median(rates) if rates else self.flops_per_second
            resumed = latest_checkpoint_step(Path(params["hparams"]["model_dir"]))
            start = min(max(trained_to, resumed), params["step"])
            return (params["step"] - start) * params["flops_per_step"] / rate
        if unit.kind == "finetune" and self.seconds_per_pass is not None:
            return train_passes(self.ctx, params["task"]) * self.seconds_per_pass
        if unit.kind == "eval" and self.eval_seconds:
            return statistics.fmean(self.eval_seconds)
        return PRIORS[unit.kind]

    def total(self, units: Sequence[Unit]) -> float:
        """Estimated wall seconds of the units, run in this order."""
        return self.machine_total(units) * self.wall_per_machine

    def machine_total(self, units: Sequence[Unit]) -> float:
        """Estimated machine seconds of the units, run in this order (a run's pending segments are
        trained in one go, from its newest checkpoint)."""
        trained_to: Dict[str, int] = {}
        total = 0.0
        for unit in units:
            if unit.kind == "pretrain":
                total += self.machine_seconds(unit, trained_to.get(unit.params["run"], 0))
                trained_to[unit.params["run"]] = unit.params["step"]
            else:
                total += self.machine_seconds(unit)
        return total
