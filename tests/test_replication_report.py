"""experiments/electra_vs_mlm/replicate_paper.py's reading of results: `--status` lines, the extrapolation of the
decision rule when stage 1 finds no regime, and the Table 5 ordering with its seed spread. Pure
Python on synthetic summaries (the end-to-end report is in test_replication_runs.py)."""

import statistics
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments" / "electra_vs_mlm"))

from paper_replication import status  # noqa: E402
from paper_replication.settings import QUICK  # noqa: E402
from paper_replication.stages import StagePlan  # noqa: E402
from paper_replication.units import Context, Unit  # noqa: E402


def test_status_says_a_stage_its_budget_rules_out_is_not_run(tmp_path, monkeypatch):
    from paper_replication.units import Run
    regime = Run("pilot_a", 1, "bert", "learned", 1e-3, 12, 12, (12,))
    plans = [StagePlan([], complete=True, runs=[regime], regime=regime),
             StagePlan([], complete=True, notes=["stage 2 not run: stage 1 took 29.0 h"])]
    monkeypatch.setattr(status, "plan_all", lambda ctx, last_stage=3: plans)
    lines = status.status(Context(QUICK, tmp_path / "out", tmp_path / "results", tmp_path, tmp_path)).splitlines()
    assert lines[-5:] == ["stage 2: not run", "  stage 2 not run: stage 1 took 29.0 h",
                          "stage 3: not run (stage 2's note says why)", "stage 4: not run (stage 2's note says why)",
                          "remaining (planned units): 0, ETA 0s"]


def test_status_foresees_stages_3_and_4_while_stage_2_runs(tmp_path, monkeypatch):
    """Mid stage 2, what is certain already: stage 3 will not run once stages 1-2 have spent the cap
    (their time only grows), and stage 4, planned from stages 1-2's plans alone, has known units."""
    import dataclasses
    from paper_replication.units import Run
    regime = Run("pilot_c", 1, "bert", "learned", 1e-3, 12, 12, (12,))
    s2 = Run("s2_electra", 2, "electra", "learned", 1e-3, 12, 12, (12,))
    first, second, third = (Unit(f"s2/s2_electra/eval/{step}", "eval", {}) for step in (4, 8, 12))
    plans = [StagePlan([], complete=True, runs=[regime], regime=regime),
             StagePlan([first, second, third], complete=True, runs=[s2], budget={"stage1_hours": 14.5})]
    s4 = Run("s4_lr_5e-4", 4, "electra", "learned", 5e-4, 1200, 12, (1200,))
    stage4 = StagePlan([Unit(f"s4/s4_lr_5e-4/eval/{step}", "eval", {}) for step in (6, 12)], complete=True, runs=[s4])
    monkeypatch.setattr(status, "plan_all", lambda ctx, last_stage: plans)
    monkeypatch.setattr(status, "plan_stage4", lambda ctx, stage1, stage2: stage4)
    ctx = Context(dataclasses.replace(QUICK, quick=False, cap_hours=30.0), tmp_path / "out", tmp_path / "results",
                  tmp_path, tmp_path)
    ctx.store.write(first.id, {"seconds": 6000.0, "machine_seconds": 5400.0})  # 1.5 h: 16.0 h of the cap used
    assert status.status(ctx).splitlines()[-4:] == [
        "stage 3: not planned yet (waits for stage 2's results)",
        "stage 4: not planned yet (waits for stage 2's results)",
        "  after stage 3: 2 units, ETA 3h20m (3h00m machine time; s4_lr_5e-4 1,200 steps)",
        "remaining (planned units): 2, ETA 3h20m"]
    ctx.store.write(second.id, {"seconds": 15 * 3600.0, "machine_seconds": 14 * 3600.0})  # 30.0 h: at the cap
    assert "it will not run" not in status.status(ctx)
    ctx.store.write(third.id, {"seconds": 2000.0, "machine_seconds": 1800.0})  # 30.5 h: over it
    lines = status.status(ctx).splitlines()
    assert "  it will not run: stages 1-2 have used 30.5 h of the 30 h cap" in lines
    assert lines[-2].startswith("  once stage 2 ends: 2 units, ETA ")  # stage 3 will not come first


@pytest.mark.parametrize("fits, last, expected", [
    ({"sst": (2.0, -30.0), "mrpc": (1.0, -14.0)}, 15.0, 46 / 3),  # sst > 0 from 15, mrpc from 14, mean >= 1 from 15.33
    ({"sst": (2.0, -34.0), "mrpc": (1.0, -14.0)}, 15.0, 17.0),  # sst's own root decides
    ({"sst": (-0.5, 7.6), "mrpc": (3.0, -45.0)}, 15.0,  # sst < 0 from 15.2, mean >= 1 from 15.76
     "sst's gain falls with FLOPs (-0.50 points per 10x): its line drops below 0 at ~1.58e+15 FLOPs, before the rest "
     "of the rule holds (~5.75e+15)"),
    ({"sst": (-1.0, 14.0), "mrpc": (-1.0, 14.0)}, 15.0,  # every gain falls and is below already
     "the mean gain falls with FLOPs (-1.00 points per 10x) and its line is below 1 by the last checkpoint"),
    ({"sst": (0.0, -1.0), "mrpc": (1.0, -10.0)}, 15.0, "does not change"),
    ({"sst": (1.0, -10.0), "mrpc": (1.0, -10.0)}, 15.0, "meet the rule by its last checkpoint"),  # holds from 11
])
def test_extrapolation_finds_where_the_whole_rule_holds(fits, last, expected):
    from paper_replication.extrapolation import where_rule_holds
    needed, why_not = where_rule_holds(fits, 1.0, last)
    if isinstance(expected, float):
        assert needed == pytest.approx(expected) and why_not == ""
    else:
        assert needed is None and expected in why_not, why_not


def _pilot(name, gains, rate=1e11):
    """A stage-1 run summary: checkpoints at the given FLOPs with median gains over a random init of 70."""
    return {"name": name, "vocab": "learned", "learning_rate": 1e-3, "checkpoints": [
        {"flops": flops, "flops_per_machine_second": rate, "tasks": {t: {"median": 70 + gain} for t in ("sst", "mrpc")}}
        for flops, gain in gains]}


def test_the_extrapolation_flags_far_forecasts_and_longer_pilots_that_measured_past_them():
    from paper_replication.extrapolation import extrapolation
    from paper_replication.settings import REAL
    base = {"learned": {"tasks": {t: {"median": 70.0} for t in ("sst", "mrpc")}}}
    # pilot a: +0.5 per 10x, the margin (mean >= 1) at 1e16; pilot c (same vocab and lr) measured at 2e16
    # without transferring, and its own gain barely grows: no forecast within a million times its data
    stage = {"tasks": ["sst", "mrpc"], "random_init": base,
             "runs": [_pilot("pilot_a", [(1e14, 0.0), (1e15, 0.5)]), _pilot("pilot_c", [(1e15, 0.2), (2e16, 0.2003)])]}
    line_a, line_c, gpu = extrapolation(stage, REAL)
    assert line_a == ("pilot_a: at its last checkpoint (1.00e+15 FLOPs) gains sst +0.50, mrpc +0.50 (mean +0.50); "
                      "per 10x FLOPs sst +0.50, mrpc +0.50; on these lines the rule holds from ~1.00e+16 pretraining "
                      "FLOPs from step 0 (~28 h on this machine, ~0.6 h on one GPU); pilot_c, with the same vocab and "
                      "learning rate and a longer schedule, did not transfer at 2.00e+16 FLOPs")
    assert line_c.endswith("no extrapolation: on these lines the rule holds only over 1,000,000x past it")
    assert gpu.startswith("one GPU: `python experiments/electra_vs_mlm/replicate_paper.py --output-dir DIR --results-dir DIR/results "
                          "--clock wall` runs this plan there in at most its 30 h cap")
    stage["runs"] = [_pilot("pilot_b", [(1e14, -2.0), (1e15, -1.5)])]  # the margin at 1e20: 100,000x past
    (line_b, _) = extrapolation(stage, REAL)
    assert "the rule holds from ~1.00e+20 pretraining FLOPs" in line_b
    assert line_b.endswith(", 100,000x past its last checkpoint: a straight line says little that far")


def test_stage2_extrapolates_the_glue_average_when_neither_objective_transfers():
    """Stage 2's rule is one line, the GLUE average's gain over random init's (at least the margin);
    a line that falls says so, and runs of other objectives are not taken as longer schedules."""
    from paper_replication.extrapolation import extrapolation
    from paper_replication.settings import REAL

    def run(name, objective, gains):
        return {"name": name, "objective": objective, "vocab": "learned", "learning_rate": 1e-3, "checkpoints": [
            {"flops": flops, "flops_per_machine_second": 1e11, "average": 46.0 + gain} for flops, gain in gains]}
    stage = {"tasks": ["cola", "sst"], "random_init": {"learned": {"average": 46.0}},
             "runs": [run("s2_electra", "electra", [(1e14, -10.0), (1e15, -10.5)]),
                      run("s2_bert", "bert", [(1e14, -1.0), (1e15, 0.0)])]}
    electra, bert, gpu = extrapolation(stage, REAL, glue_average=True, label=lambda run: run["objective"])
    assert electra == ("electra: at its last checkpoint (1.00e+15 FLOPs) gains GLUE average -10.50; per 10x "
                       "FLOPs GLUE average -0.50; no extrapolation: GLUE average's gain falls with FLOPs (-0.50 "
                       "points per 10x) and its line is below 1 by the last checkpoint")
    assert bert == ("bert: at its last checkpoint (1.00e+15 FLOPs) gains GLUE average +0.00; per 10x FLOPs GLUE "
                    "average +1.00; on these lines the rule holds from ~1.00e+16 pretraining FLOPs from step 0 "
                    "(~28 h on this machine, ~0.6 h on one GPU)")
    assert gpu.startswith("one GPU: ")
    stage["runs"][0]["checkpoints"].append({"flops": 1e17, "flops_per_machine_second": 1e11, "average": 30.0})
    assert "did not transfer" not in extrapolation(stage, REAL, glue_average=True)[1]  # electra is no longer bert


def test_the_ordering_says_which_differences_are_within_the_seed_spread():
    """Seed-wise GLUE averages (seed k over the tasks); neighbours whose ranges overlap are within
    noise; the pairs Table 5 orders are counted as measured (its tie, replace_mlm = electra_15, is not a pair)."""
    from paper_replication.ordering import ordering, seedwise_averages

    def summary(cola, sst):
        return {"tasks": {"cola": {"seeds": cola}, "sst": {"seeds": sst}},
                "average": statistics.fmean([statistics.median(cola), statistics.median(sst)])}
    rows = [("bert", summary([10, 12, 11], [80, 81, 82])), ("electra", summary([14, 15, 16], [84, 86, 85])),
            ("electra_15", summary([11, 13, 12], [81, 83, 82])), ("replace_mlm", summary([11, 12, 13], [82, 81, 83])),
            ("random init (learned)", summary([0, 1, 2], [70, 71, 72])),
            ("all_tokens_mlm", {"tasks": {"cola": {"seeds": [1]}, "sst": None}, "average": None})]  # trials missing
    assert seedwise_averages(rows[0][1], ("cola", "sst")) == [45.0, 46.5, 46.5]
    ranking, neighbours, paper, waiting = ordering(rows, ("cola", "sst"))
    assert waiting == "not yet ranked (trials missing): all_tokens_mlm"
    assert ranking.startswith("measured ordering by GLUE average (min–max of the seed-wise averages): "
                              "electra 50.00 (49.00–50.50) > electra_15 47.00 (46.00–48.00) = "
                              "replace_mlm 47.00 (46.50–48.00) > bert 46.00 (45.00–46.50) > random init (learned)")
    assert neighbours.startswith("neighbours: electra − electra_15 +3.00, beyond the seed spread; electra_15 − "
                                 "replace_mlm +0.00, tied; replace_mlm − bert +1.00, within noise;")  # touching
    # Table 5 orders electra > electra_15, replace_mlm > bert, electra > replace_mlm, electra_15 > bert, electra > bert
    assert paper.startswith("paper Table 5 (base) orders 5 of these pairs: measured, 5 the same way (3 beyond")
    # ranked ahead by the medians, behind seed by seed: said so, and never "beyond the seed spread"
    skewed = [("electra", {"tasks": {"a": {"seeds": [0, 10, 10]}, "b": {"seeds": [10, 0, 10]},
                                     "c": {"seeds": [10, 10, 0]}}, "average": 10.0}),
              ("bert", {"tasks": {t: {"seeds": [8, 8, 8]} for t in "abc"}, "average": 8.0}),
              ("electra_15", {"tasks": {t: {"seeds": [8, 8, 8]} for t in "abc"}, "average": 8.0})]
    ranking, neighbours, paper = ordering(skewed, "abc")
    assert " > bert 8.00 (8.00–8.00) = electra_15 8.00 (8.00–8.00)" in ranking
    assert neighbours.startswith("neighbours: electra − bert +2.00, the other way round seed by seed; "
                                 "bert − electra_15 +0.00, tied")
    assert paper.startswith("paper Table 5 (base) orders 3 of these pairs: measured, 2 the same way (0 beyond the "
                            "seed spread), 0 the other way (0 beyond it), 1 tied")


def test_status_shows_where_a_run_in_training_stands(tmp_path, monkeypatch):
    """A run with pending segments: its newest checkpoint in the output dir, or that it starts from 0."""
    from paper_replication.units import Run
    run = Run("pilot_c", 1, "bert", "learned", 1e-3, 9936, 276, (2484, 4968, 9936))
    model_dir = tmp_path / "out" / "models" / "pilot_c"
    params = {"run": "pilot_c", "hparams": {"model_dir": str(model_dir)}, "from_step": 0, "flops_per_step": 1e9}
    units = [Unit(f"s1/pilot_c/pretrain/{step}", "pretrain", {**params, "step": step}) for step in run.probe_steps]
    monkeypatch.setattr(status, "plan_all", lambda ctx, last_stage=3: [StagePlan(units, complete=False, runs=[run])])
    ctx = Context(QUICK, tmp_path / "out", tmp_path / "results", tmp_path, tmp_path)
    assert "  pilot_c: no checkpoint yet (its pretraining starts from step 0)" in status.status(ctx, 1).splitlines()
    model_dir.mkdir(parents=True)
    (model_dir / "checkpoint").write_text('model_checkpoint_path: "ckpt-4692"\n')
    assert "  pilot_c: newest checkpoint at step 4,692 of 9,936" in status.status(ctx, 1).splitlines()


def test_the_auc_plot_spans_chance_to_one():
    """A flat AUC near chance must look flat: the axis runs from below 0.5 (a dotted chance line)
    to 1, whatever the curve's own range; an axis without curves gets neither."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from paper_replication.report import _auc_scale
    figure, (flat, low, empty) = plt.subplots(1, 3)
    flat.plot([1130, 2260, 3390], [0.513, 0.513, 0.515])
    low.plot([1, 2], [0.40, 0.60])
    for axis in (flat, low, empty):
        _auc_scale(axis)
    assert flat.get_ylim() == (0.45, 1.0) and list(flat.lines[-1].get_ydata()) == [0.5, 0.5]
    assert low.get_ylim() == pytest.approx((0.38, 1.0))
    assert not empty.lines
    plt.close(figure)
