"""The replication's ETA (experiments/electra_vs_mlm/paper_replication/eta.py): it counts only the
steps after the newest checkpoint, ignores the time a paused unit stood still, and prefers what was
measured on the CPU it runs on."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments" / "electra_vs_mlm"))

from paper_replication.settings import QUICK  # noqa: E402
from paper_replication.units import Context, Unit  # noqa: E402


def test_eta_counts_only_steps_after_the_newest_checkpoint(tmp_path):
    """A segment resumed from a checkpoint is estimated from that step on: the steps already
    checkpointed are not trained again, so they are not in the ETA either. The first segment of a
    run still to train starts at the newest checkpoint even when it is before the segment's own
    start (from 0 on a new machine, which lost the checkpoints of segments on record)."""
    from paper_replication.eta import Estimator
    ctx = Context(QUICK, tmp_path / "out", tmp_path / "results", tmp_path, tmp_path)
    model_dir = tmp_path / "model"
    unit = Unit("s1/run/pretrain/100", "pretrain", {"run": "run", "hparams": {"model_dir": str(model_dir)},
                                                    "step": 100, "from_step": 0, "flops_per_step": 3e10})
    estimator = Estimator(ctx, [unit])
    assert estimator.seconds(unit) == 100.0  # no checkpoint yet: the prior rate, 1 s a step
    model_dir.mkdir()
    (model_dir / "checkpoint").write_text('model_checkpoint_path: "ckpt-40"\nall_model_checkpoint_paths: "ckpt-40"\n')
    assert estimator.seconds(unit) == 60.0
    (model_dir / "checkpoint").write_text('model_checkpoint_path: "ckpt-140"\n')  # a later segment's
    assert estimator.seconds(unit) == 0.0
    later = Unit("s1/run/pretrain/200", "pretrain", {**unit.params, "step": 200, "from_step": 100})
    assert estimator.seconds(later) == 60.0  # from ckpt-140, not from the segment's start
    (model_dir / "checkpoint").write_text('model_checkpoint_path: "ckpt-40"\n')
    assert estimator.seconds(later, trained_to=100) == 100.0  # after the earlier segment: from its end
    assert estimator.seconds(later) == 160.0  # the first to train: from ckpt-40
    assert estimator.total([unit, later]) == 160.0 == estimator.total([later])
    (model_dir / "checkpoint").write_bytes(b"\xff\xfe garbled")
    assert estimator.seconds(later, trained_to=100) == 100.0
    assert estimator.total([later]) == 200.0  # no checkpoint to resume (as on a new machine): from step 0
    # segments 100 and 300 pending, 200 not: the worker trains through 200 all the same
    third = Unit("s1/run/pretrain/300", "pretrain", {**unit.params, "step": 300, "from_step": 200})
    assert estimator.total([unit, third]) == 300.0


def test_eta_ignores_the_time_a_paused_unit_stood_still(tmp_path):
    """A unit stopped with SIGSTOP while another job ran has a wall time far above its machine time.
    The ETA works in machine seconds and converts by the median wall / machine ratio, so one paused
    unit among normal ones does not move it."""
    from paper_replication.eta import Estimator
    glue = tmp_path / "out" / "glue" / "CoLA"
    glue.mkdir(parents=True)
    (glue / "train.tsv").write_text("".join(f"s{i}\t1\t\tsentence {i}\n" for i in range(10)))  # 10 rows, no header
    ctx = Context(QUICK, tmp_path / "out", tmp_path / "results", tmp_path, tmp_path)
    trials = [Unit(f"s2/run/ft/100/cola/seed{seed}", "finetune", {"task": "cola", "seed": seed})
              for seed in (1, 2, 3, 4)]
    for unit, wall in zip(trials[:3], (36.0, 3000.0, 36.0)):  # the second stood paused for 49 minutes
        ctx.store.write(unit.id, {"seconds": wall, "machine_seconds": 30.0})
    estimator = Estimator(ctx, trials)
    assert estimator.wall_per_machine == pytest.approx(1.2)
    assert estimator.seconds(trials[3]) == pytest.approx(36.0)  # 30 machine seconds a trial, x 1.2


def test_eta_prefers_what_was_measured_on_this_cpu(tmp_path):
    """After a move to another machine class, each figure of the ETA comes from the results
    measured on the CPU it runs on once there are any (fine-tuning here), and from all results where
    this CPU has none yet (evaluations); results that name no CPU count as another machine's. The
    wall / machine ratio comes from every result until this CPU has MIN_RATIOS: the new CPU's one
    trial ran beside another job (twice its machine time) and does not double the ETA alone."""
    from paper_replication.eta import Estimator
    from paper_replication.store import Store
    glue = tmp_path / "out" / "glue" / "RTE"
    glue.mkdir(parents=True)
    (glue / "train.tsv").write_text("header\n" + "row\n" * 10)  # RTE: 10 rows x 10 epochs = 100 passes
    ctx = Context(QUICK, tmp_path / "out", tmp_path / "results", tmp_path, tmp_path)
    store = Store(ctx.output_dir, ctx.results_dir)
    trials = [Unit(f"s2/run/ft/10/rte/seed{k}", "finetune", {"task": "rte", "seed": k}) for k in (1, 2, 3, 4)]
    evals = [Unit(f"s2/run/eval/{step}", "eval", {}) for step in (10, 20)]
    for unit, seconds, cpu in ((trials[0], 100.0, None), (trials[1], 100.0, "old CPU"), (trials[2], 150.0, "new CPU"),
                               (evals[0], 20.0, "old CPU")):
        wall = 2 * seconds if cpu == "new CPU" else seconds
        store.write(unit.id, {"seconds": wall, "machine_seconds": seconds, **({"cpu": cpu} if cpu else {})})
    pending, units = trials[3], trials + evals
    assert Estimator(ctx, units, cpu="new CPU").seconds(pending) == pytest.approx(150.0)
    assert Estimator(ctx, units, cpu="new CPU").seconds(evals[1]) == pytest.approx(20.0)
    assert Estimator(ctx, units, cpu="a third CPU").seconds(pending) == pytest.approx(350.0 / 3)
    from paper_replication.eta import MIN_RATIOS
    for k in range(MIN_RATIOS - 1):  # enough results on the new CPU, each at twice its machine time
        store.write(f"s2/run/eval/{100 + k}", {"seconds": 40.0, "machine_seconds": 20.0, "cpu": "new CPU"})
    more = units + [Unit(f"s2/run/eval/{100 + k}", "eval", {}) for k in range(MIN_RATIOS - 1)]
    assert Estimator(ctx, more, cpu="new CPU").seconds(pending) == pytest.approx(300.0)
