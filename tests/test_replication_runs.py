"""experiments/electra_vs_mlm/replicate_paper.py run whole: `--quick` end to end (the pipeline, resumption with
no finished unit redone, `--status`, the format of results.json / table.md, never the numbers,
which mean nothing at that size, and a new machine's replanning), and stage 1's stop without a
regime at the real settings (the committed pilots plus a faked pilot (c)). Stages 3 and 4 planned
at the real settings: test_replication_real_plans.py."""

import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "experiments" / "electra_vs_mlm" / "replicate_paper.py"
sys.path.insert(0, str(REPO / "experiments" / "electra_vs_mlm"))

from paper_replication import runner  # noqa: E402
from paper_replication.extrapolation import GPU_FLOPS_PER_SECOND, hours  # noqa: E402
from paper_replication.report import write_report  # noqa: E402
from paper_replication.settings import QUICK, REAL  # noqa: E402
from paper_replication.stages import pending_by_stage, plan_all, plan_stage1  # noqa: E402
from paper_replication.status import status  # noqa: E402
from paper_replication.units import Context, Unit  # noqa: E402


def _run(out: Path, shared: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, str(SCRIPT), "--output-dir", str(out), "--quick", "--shared-data", str(shared), *args]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_quick_runs_every_stage_and_resumes_without_redoing_units(tmp_path, shared_data):
    out = tmp_path / "out"
    _run(out, shared_data, "--stage", "1")
    stage1 = {path: (path.stat().st_mtime_ns, path.read_text()) for path in (out / "units" / "s1").rglob("*.json")}
    kinds = {path.relative_to(out / "units" / "s1").parts[1] for path in stage1 if "pilot_a" in str(path)}
    assert kinds == {"pretrain", "eval", "ft", "schedule.json"}, kinds
    assert not (out / "units" / "s2").exists()  # --stage 1 stops there
    # every result is also in the (committed) results dir
    assert all((out / "results" / path.relative_to(out)).is_file() for path in stage1)
    assert "remaining (planned units): 0" in _run(out, shared_data, "--status", "--stage", "1").stdout
    assert (out / "run.pid").exists() is False  # removed when the run ends

    second = _run(out, shared_data)
    assert " start s1/" not in second.stdout  # nothing of stage 1 ran again ...
    unit_files = [path for path in stage1 if path.name != "schedule.json"]  # the rest: each pilot's schedule
    assert f"[stage 1] {len(unit_files)} units finished earlier (skipped)" in second.stdout
    for path, (mtime, text) in stage1.items():  # ... and no result file was rewritten
        assert path.stat().st_mtime_ns == mtime and path.read_text() == text
    assert " start s2/s2_electra/pretrain/" in second.stdout and " start s3/" in second.stdout
    assert " start s4/s4_full_generator/pretrain/" in second.stdout

    lines = _run(out, shared_data, "--status").stdout
    assert lines.count(" 0 remaining") == 4 and "remaining (planned units): 0" in lines, lines

    results = json.loads((out / "results" / "results.json").read_text())
    assert [s["stage"] for s in results["stages"]] == [1, 2, 3, 4] and all(s["complete"] for s in results["stages"])
    stage2, stage3, stage4 = results["stages"][1:]
    assert [r["objective"] for r in stage2["runs"]] == ["electra", "bert"]
    assert [r["objective"] for r in stage3["runs"]] == ["electra_15", "replace_mlm", "all_tokens_mlm"]
    electra, bert = stage2["runs"]
    assert bert["steps"] > electra["steps"]  # the same FLOPs: bert's step is cheaper
    assert electra["checkpoints"][-1]["flops"] == pytest.approx(bert["checkpoints"][-1]["flops"], rel=0.2)
    for run in stage2["runs"]:
        assert len(run["checkpoints"]) == 2
        for point in run["checkpoints"]:
            sts = point["tasks"]["sts"]
            assert sts["n"] == 2 and sts["min"] <= sts["median"] <= sts["max"]
            assert point["average"] == pytest.approx(sts["median"])
            assert "masked_lm_accuracy" in point["eval"] and "masked_lm_accuracy_at_mask" in point["eval"]
        assert "disc_auc" in run["checkpoints"][0]["eval"] or run["objective"] == "bert"
    assert stage2["random_init"]["learned"]["tasks"]["sts"]["n"] == 2
    # the diagnostic: a generator as wide as the discriminator, at electra's FLOPs in fewer steps
    (wide,) = stage4["runs"]
    assert wide["name"] == "s4_full_generator" and wide["steps"] < electra["steps"]
    assert wide["checkpoints"][-1]["flops"] == pytest.approx(electra["checkpoints"][-1]["flops"], rel=0.35)
    assert wide["checkpoints"][-1]["tasks"]["sts"]["n"] == 2 and "disc_auc" in wide["checkpoints"][-1]["eval"]
    from electra_tf.checkpoints import read_pretrained  # the trained checkpoint, in the original's names
    weights = read_pretrained(out / "probes" / "s4_full_generator" / f"ckpt-{wide['steps']}")
    widths = {name.split("/")[0]: value.shape[-1] for name, value in weights.values.items()
              if name.endswith("layer_0/attention/output/dense/kernel")}
    assert widths == {"generator": QUICK.hidden, "electra": QUICK.hidden}, widths
    segment = json.loads((out / "results" / "units" / "s4" / "s4_full_generator" / "pretrain"
                          / f"{wide['steps']}.json").read_text())  # its training log, committed with it
    assert segment["train_log"] and segment["train_log"][-1]["step"] == wide["steps"]
    assert all({"step", "loss", "masked_lm_loss", "disc_auc", "grad_norm"} <= set(e) for e in segment["train_log"])
    assert wide["train_log"][-len(segment["train_log"]):] == segment["train_log"]  # results.json: every segment's
    # read from the run's TensorBoard scalars: the values its progress lines printed, and the rest
    printed = {int(step): float(loss) for step, loss in re.findall(
        r"^step (\d+)/\d+ .*? masked_lm_loss ([\d.]+) ", (out / "logs" / "stage4.log").read_text(), flags=re.M)}
    logged = {entry["step"]: entry["masked_lm_loss"] for entry in segment["train_log"]}
    assert logged == pytest.approx({step: printed[step] for step in logged}, abs=6e-5)
    assert all({"learning_rate", "disc_accuracy", "replaced_fraction"} <= set(e) for e in segment["train_log"])

    table = (out / "results" / "table.md").read_text()
    assert "| model | steps | FLOPs | STS-B | GLUE avg |" in table
    assert "| model | steps | FLOPs | STS-B | GLUE avg | paper Table 5 |" in table
    assert "| held-out MLM acc | at [MASK] |" in table
    for row in ("| electra |", "| bert |", "| random init (learned) |", "| electra_15 |", "| all_tokens_mlm |"):
        assert row in table
    # stage 2 and 3 each rank their models with the seed spread and Table 5's pairs as measured
    assert table.count("- measured ordering by GLUE average") == 3 and table.count("- neighbours: ") == 3
    assert "paper Table 5 (base) orders 1 of these pairs" in table and "orders 9 of these pairs" in table
    assert "- HF export (electra): its discriminator in float16, " in table and "committed in `hf/electra`" in table
    from paper_replication.worker import CPU
    assert table.count(f"- machine time by CPU: {CPU} ") == 5  # each stage and the total, all on this machine
    assert "- electra (full_generator), step " in table and "| electra (full_generator) | " in table
    assert "## Total time\n\n- machine time " in table
    for png in ("glue_vs_flops.png", "pretraining_curves.png", "training_curves.png"):
        assert (out / "results" / png).read_bytes()[:4] == b"\x89PNG"
    exported = out / "results" / "hf" / "electra"
    assert json.loads((exported / "config.json").read_text())["dtype"] == "float16"
    assert stage2["exports"]["s2/export/electra"]["committed"] is True
    assert stage2["exports"]["s2/export/electra"]["path"] == "hf/electra"  # movable with the results dir
    assert len(stage2["exports"]["s2/export/electra"]["probe_sha256"]) == 64  # which checkpoint it was made from
    assert stage2["throughput"]["s2/throughput/electra_learned"]["tokens_per_machine_second"] > 0

    # a new machine: the output dir is gone (results and vocab are committed) and a trial of the
    # final checkpoint is not done: it starts from the committed export, and nothing is trained again
    results_dir = tmp_path / "committed"
    shutil.copytree(out / "results", results_dir)
    shutil.rmtree(out)
    final, first = bert["steps"], bert["checkpoints"][0]["step"]
    (results_dir / "units" / "s2" / "s2_bert" / "ft" / str(final) / "sts" / "seed1.json").unlink()
    ctx = Context(QUICK, out, results_dir, REPO, shared_data)
    by_stage = pending_by_stage(ctx, plan_all(ctx))
    assert [[u.id for u in pending] for pending in by_stage] == [[], [f"s2/s2_bert/ft/{final}/sts/seed1"]]
    (trial,) = by_stage[1]
    assert trial.needs == ("s2/export/bert",) and trial.params["export"] == str(results_dir / "hf" / "bert")
    assert trial.params["exported"] == json.loads((results_dir / "units" / "s2" / "export" / "bert.json").read_text())[
        "probe_sha256"]
    # a trial of an earlier checkpoint, which has no export: its run is trained again (to that
    # checkpoint), which first needs stage 1's data built again
    (results_dir / "units" / "s2" / "s2_bert" / "ft" / str(first) / "sts" / "seed1.json").unlink()
    by_stage = pending_by_stage(ctx, plan_all(ctx))
    assert len(by_stage) == 2  # stage 3 is planned again once stage 2 is whole
    assert [u.id for u in by_stage[0]] == ["s1/data/build_learned"]
    assert [u.id for u in by_stage[1]] == [f"s2/s2_bert/pretrain/{first}", f"s2/s2_bert/ft/{first}/sts/seed1",
                                           f"s2/s2_bert/ft/{final}/sts/seed1"]


def _fake_result(unit: Unit, checkpoint: int) -> dict:
    """A plausible result of a pilot (c) unit; its SST-2 / MRPC scores rise with the checkpoint
    (0, 1, 2) but stay below random init on SST-2, so the pilot does not transfer."""
    params, time_spent = unit.params, {"seconds": 60.0, "machine_seconds": 50.0}
    if unit.kind == "pretrain":
        steps = params["step"] - params["from_step"]
        return {**time_spent, "step": params["step"], "flops": params["step"] * params["flops_per_step"],
                "steps_timed": steps, "tokens_per_machine_second": steps * params["tokens_per_step"] / 50.0}
    if unit.kind == "eval":
        return {**time_spent, "step": params["step"], "flops": params["flops"],
                "metrics": {"masked_lm_accuracy": 0.2 + 0.01 * checkpoint, "masked_lm_loss": 5.5, "loss": 5.5}}
    value = (73.0 if params["task"] == "sst" else 70.0) + 0.5 * checkpoint
    scores = {"accuracy": value} if params["task"] == "sst" else {"accuracy": value, "f1": value}
    return {**time_spent, "task": params["task"], "seed": params["seed"], "scores": {params["task"]: scores}}


def test_stage1_without_a_regime_stops_and_reports_the_extrapolation(tmp_path, shared_data, monkeypatch, capsys):
    """The committed results of pilots (a) and (b), and a pilot (c) that does not transfer (fake
    results): stage 1 is complete without a regime, stage 2 is never planned, the run stops with
    the reason, and the report carries the extrapolation (FLOPs, hours here and on one GPU)."""
    committed = REPO / "experiments" / "electra_vs_mlm" / "results"
    results = tmp_path / "results"
    shutil.copytree(committed / "vocab", results / "vocab")
    for path in (committed / "units" / "s1").iterdir():
        if path.name != "pilot_c":  # pilot (c) gets the fake results below, whatever its real outcome
            shutil.copytree(path, results / "units" / "s1" / path.name)
    ctx = Context(REAL, tmp_path / "out", results, REPO, shared_data)
    for _ in range(10):
        plan = plan_stage1(ctx)
        if plan.complete:
            break
        run = plan.runs[-1]
        assert run.name == "pilot_c"
        for unit in plan.units:
            if unit.id.startswith("s1/pilot_c/") and ctx.result(unit.id) is None:
                checkpoint = run.probe_steps.index(int(unit.id.split("/")[3]))
                ctx.store.write(unit.id, _fake_result(unit, checkpoint))
    plans = plan_all(ctx)
    assert len(plans) == 1 and plans[0].complete and plans[0].regime is None
    assert any(note.startswith("pilot c: gains sst -1.") and note.endswith("stages 2 and 3 are not run")
               for note in plans[0].notes), plans[0].notes

    monkeypatch.setattr(runner, "prepare_glue", lambda ctx: None)
    monkeypatch.setattr(runner, "RunLock", lambda output_dir: contextlib.nullcontext())  # not this process's group
    monkeypatch.setattr(runner.Worker, "run", lambda *args: pytest.fail("no unit may run"))
    assert runner.execute(ctx, 3, write_report) == 0
    assert "stopped after stage 1: " in capsys.readouterr().out
    stage = json.loads((results / "results.json").read_text())["stages"][0]
    (line,) = [line for line in stage["extrapolation"] if line.startswith("pilot_c:")]
    found = re.search(r"the rule holds from ~(\S+) pretraining FLOPs from step 0 \(~\S+ (h|min) on this machine", line)
    flops = float(found[1])
    assert f"~{hours(flops / GPU_FLOPS_PER_SECOND)} on one GPU)" in line
    # the rule on straight lines in log FLOPs: every task's gain above 0 and their mean >= 1
    random = {task: stage["random_init"]["learned"]["tasks"][task]["median"] for task in ("sst", "mrpc")}
    x = [math.log10(p["flops"]) for p in stage["runs"][2]["checkpoints"]]
    fits = {task: numpy.polyfit(x, [base + 0.5 * k - random[task] for k in range(3)], 1)
            for task, base in (("sst", 73.0), ("mrpc", 70.0))}
    roots = [-fit[1] / fit[0] for fit in fits.values()]
    mean_fit = (fits["sst"] + fits["mrpc"]) / 2
    roots.append((1.0 - mean_fit[1]) / mean_fit[0])
    assert f"per 10x FLOPs sst {fits['sst'][0]:+.2f}, mrpc {fits['mrpc'][0]:+.2f}" in line
    assert math.log10(flops) == pytest.approx(max(roots), abs=0.01)
    assert stage["extrapolation"][-1].startswith("one GPU: `python experiments/electra_vs_mlm/replicate_paper.py ")
    table = (results / "table.md").read_text()
    assert line in table and "| pilot_c | learned | 0.001 | 9936 |" in table
    lines = status(ctx)
    assert "stage 2: not run (stage 1's note says why)" in lines and "stage 3: not run" in lines
