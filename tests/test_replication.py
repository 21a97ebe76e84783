"""benchmarks/replicate_paper.py: the paper's FLOPs accounting, the pre-registered decision rule,
budgets, run locking, the clock a replication keeps, stage 1's stop without a regime (with the
committed pilots), and `--quick` end to end: the pipeline, resumption (a rerun redoes no finished
unit), `--status` and the format of results.json / table.md (never the numbers, which mean
nothing at that size). The workers' time records: test_replication_worker.py; the status lines,
the extrapolation and the ordering on synthetic results: test_replication_report.py."""

import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "replicate_paper.py"
sys.path.insert(0, str(REPO / "benchmarks"))

import replicate_paper  # noqa: E402
from paper_replication import runner  # noqa: E402
from paper_replication.flops import flops_per_step  # noqa: E402
from paper_replication.settings import QUICK  # noqa: E402
from paper_replication.stages import StagePlan, plan_all, transfers  # noqa: E402
from paper_replication.units import Context, Unit  # noqa: E402


def test_flops_reproduce_the_original_accounting():
    """The released flops_computation.py gives ELECTRA-Small (1M steps of 128 x 128) 1.2937e18,
    BERT-Small (1.45M steps) 1.4187e18 (Table 1 lists both as 1.4e18) and ELECTRA-Base (766K steps of
    256 x 512) 6.4245e19 (Table 1: 6.4e19)."""
    small = dict(hidden=256, layers=12, embedding=128, generator_hidden=64, seq=128, vocab=30522, batch=128)
    assert flops_per_step("electra", **small) * 1e6 == pytest.approx(1.293743798e18, rel=1e-8)
    assert flops_per_step("bert", **small) * 1.45e6 == pytest.approx(1.418739915e18, rel=1e-8)
    base = dict(hidden=768, layers=12, embedding=768, generator_hidden=256, seq=512, vocab=30522, batch=256)
    assert flops_per_step("electra", **base) * 766000 == pytest.approx(6.424541834e19, rel=1e-8)
    # the generator is counted: electra costs more per step than bert, so bert gets more steps
    assert flops_per_step("electra", **small) > flops_per_step("bert", **small)
    # all-tokens MLM: replace_mlm's models with the MLM head on every position, plus the copy gate
    from paper_replication.flops import PAPER_OUTPUT_FRAC, Transformer
    disc = dict(h=256, l=12, s=128, v=30522, e=128)
    every_position = (Transformer(**disc, output_frac=1.0).mlm_output()
                      - Transformer(**disc, output_frac=PAPER_OUTPUT_FRAC).mlm_output())
    gate = Transformer(**disc).binary_output()
    assert flops_per_step("all_tokens_mlm", **small) - flops_per_step("replace_mlm", **small) == pytest.approx(
        2 * (every_position + gate) * 128, rel=1e-12)


def test_decision_rule_needs_both_tasks_and_the_margin():
    assert transfers({"sst": 1.5, "mrpc": 0.6}, 1.0)
    assert not transfers({"sst": 3.0, "mrpc": -0.1}, 1.0)  # loses on one task
    assert not transfers({"sst": 0.9, "mrpc": 0.9}, 1.0)  # mean gain below the margin


def test_runs_pin_masking_without_replacement(tmp_path):
    """Every run of the plan draws masked positions without replacement, as the pilots did when the
    plan was fixed, whatever PretrainingConfig's default becomes: all runs stay comparable."""
    from electra_tf.config import PretrainingConfig
    from paper_replication.units import run_hparams, schedule
    ctx = Context(QUICK, tmp_path / "out", tmp_path / "results", tmp_path, tmp_path)
    run = schedule(QUICK, 0.0, None, "pilot_a", 1, "bert", "bert", 1e-3, (1.0,))
    hparams = run_hparams(ctx, run)
    config = PretrainingConfig.from_hparams("pilot_a", str(tmp_path / "model"), {**hparams, "vocab_size": 100})
    assert hparams["mask_with_replacement"] is False and config.mask_with_replacement is False


@pytest.mark.parametrize("settings_name", ["REAL", "QUICK"])
def test_the_flops_count_the_widths_the_runs_train(tmp_path, settings_name):
    """The FLOPs accounting takes its widths from Settings, the runs from the PretrainingConfig
    preset: they must be the same model (discriminator and generator), or equal FLOPs would not
    mean equal compute."""
    from electra_tf.config import PretrainingConfig
    from paper_replication import settings as plan
    from paper_replication.units import run_hparams, schedule
    s = getattr(plan, settings_name)
    ctx = Context(s, tmp_path / "out", tmp_path / "results", tmp_path, tmp_path)
    run = schedule(s, 0.0, 100, "s2_electra", 2, "electra", "bert", 1e-3, (1.0,), steps=100)
    hparams = {**run_hparams(ctx, run), "vocab_size": 100}
    config = PretrainingConfig.from_hparams("s2_electra", str(tmp_path / "m"), hparams)
    discriminator, generator = config.discriminator_config(), config.generator_config()
    assert (discriminator.hidden_size, discriminator.num_hidden_layers, discriminator.embedding_size) == (
        s.hidden, s.layers, s.embedding)
    assert (generator.hidden_size, generator.num_hidden_layers) == (s.generator_hidden, s.layers)
    assert generator.embedding_size == s.embedding  # tied: the FLOPs charge the generator the shared table
    assert discriminator.intermediate_size == 4 * s.hidden and generator.intermediate_size == 4 * s.generator_hidden
    heads = (discriminator.num_attention_heads, generator.num_attention_heads)
    assert heads == (s.hidden // 64, s.generator_hidden // 64)


def test_a_budget_is_computed_once(tmp_path):
    """Stage 2's and 3's budget inputs are stored when first planned and read back afterwards, so a
    restart on newer code or a later record cannot move a budget whose runs have started."""
    from paper_replication.stages import _frozen
    ctx = Context(QUICK, tmp_path / "out", tmp_path / "results", tmp_path, tmp_path)
    calls = []
    for value in (1.5, 2.5):
        assert _frozen(ctx, "s2/budget", lambda: calls.append(value) or {"stage1_hours": value}) == {"stage1_hours": 1.5}
    assert calls == [1.5] and ctx.result("s2/budget") == {"stage1_hours": 1.5}


def test_a_schedule_that_changes_under_its_results_is_an_error(tmp_path):
    """A run's steps are recorded when first planned; a plan that later gives other steps (new code
    under results that exist) stops with an error instead of orphaning the results and their time."""
    from paper_replication.stages import pin_schedule
    from paper_replication.units import schedule
    ctx = Context(QUICK, tmp_path / "out", tmp_path / "results", tmp_path, tmp_path)
    run = schedule(QUICK, 0.0, None, "pilot_a", 1, "bert", "learned", 1e-3, (0.5, 1.0), steps=100)
    pin_schedule(ctx, run)
    pin_schedule(ctx, run)  # the same plan again: fine
    assert ctx.result("s1/pilot_a/schedule")["steps"] == run.steps
    longer = schedule(QUICK, 0.0, None, "pilot_a", 1, "bert", "learned", 1e-3, (0.5, 1.0), steps=200)
    with pytest.raises(SystemExit, match="units/s1/pilot_a/schedule.json records"):
        pin_schedule(ctx, longer)


def test_sst_passes_count_the_subsample_before_glue_is_prepared(tmp_path, shared_data):
    """On a new machine `--status` plans before <output>/glue exists: SST-2 still counts its fixed
    8,000-example subsample (3 epochs), not the shared file's 67,349 rows, so no budget is misjudged."""
    from paper_replication.settings import REAL
    from paper_replication.units import train_passes
    ctx = Context(REAL, tmp_path / "out", tmp_path / "results", REPO, shared_data)
    assert not ctx.glue_dir.exists() and train_passes(ctx, "sst") == 8000 * 3


def test_a_damaged_result_copy_is_ignored(tmp_path, capsys):
    """A unit's result lives in two copies: a damaged one is named on stderr and the other used;
    with both damaged the unit counts as not done, so it runs again instead of stopping the run."""
    ctx = Context(QUICK, tmp_path / "out", tmp_path / "results", tmp_path, tmp_path)
    unit = Unit("s1/data/vocab_learned", "vocab", {})
    ctx.store.write(unit.id, {"seconds": 3.0})
    local, committed = (root / "units" / "s1/data/vocab_learned.json" for root in (ctx.output_dir, ctx.results_dir))
    local.write_text('{"seconds": 3.')  # cut short
    assert ctx.result(unit.id) == {"seconds": 3.0} and ctx.pending([unit]) == []
    assert f"warning: {local} is damaged" in capsys.readouterr().err
    committed.write_bytes(b"\xff\xfe[]")
    assert ctx.result(unit.id) is None and ctx.pending([unit]) == [unit]
    assert f"warning: {committed} is damaged" in capsys.readouterr().err


def test_a_unit_run_again_keeps_its_earlier_time(tmp_path):
    """A new machine that lost a probe copy trains its segment again: the unit's new result replaces
    the old one, and the old run's time stays counted (the cap counts all time spent)."""
    ctx = Context(QUICK, tmp_path / "out", tmp_path / "results", tmp_path, tmp_path)
    unit = Unit("s1/pilot/pretrain/10", "pretrain", {}, artifact=str(tmp_path / "gone.index"))
    ctx.store.write(unit.id, {"seconds": 30.0, "machine_seconds": 20.0, "worker": "first"})
    ctx.store.write(unit.id, {"seconds": 5.0, "machine_seconds": 4.0, "worker": "second"})
    assert ctx.result(unit.id)["worker"] == "second"
    assert ctx.spent([unit]) == 24.0 and ctx.spent([unit], machine=False) == 35.0
    ctx.store.write(unit.id, {"seconds": 1.0})  # a result without a worker (older records) is kept too
    ctx.store.write(unit.id, {"seconds": 2.0})
    assert ctx.spent([unit], machine=False) == 38.0


def test_run_lock_refuses_a_live_run_and_ignores_a_damaged_pid_file(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "run.pid").write_text(json.dumps({"pid": os.getppid(), "pgid": 4242}))  # a live process
    with pytest.raises(SystemExit, match=f"another run \\(pid {os.getppid()}\\) is active .* kill -STOP -4242"):
        runner.RunLock(out).__enter__()
    (out / "run.pid").write_text('{"pid": 12')  # cut short: no run to respect
    code = ("import sys; from pathlib import Path; sys.path.insert(0, 'benchmarks'); "
            "from paper_replication.runner import RunLock\n"
            f"with RunLock(Path({str(out)!r})) as lock: print(open(lock.path).read())")
    entered = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert entered.returncode == 0, entered.stderr
    assert json.loads(entered.stdout)["pid"] > 0 and not (out / "run.pid").exists()  # its own, then removed
    assert "run.pid is damaged" in entered.stderr


def _segments(run: str, count: int, root: Path):
    return [Unit(f"s1/{run}/pretrain/{10 * k}", "pretrain",
                 {"run": run, "step": 10 * k, "from_step": 10 * (k - 1), "flops_per_step": 1.0,
                  "hparams": {"model_dir": str(root / "models" / run)}})
            for k in range(1, count + 1)]


def test_max_units_counts_segments_and_refuses_fewer_than_a_run_has(tmp_path, monkeypatch, capsys):
    """--max-units N: each pretraining segment is a unit; a run's segments go to one worker together
    (it trains the run to its end), so N below their number is one clear error (exit 2), not a run
    that makes no progress. Planning and the worker are replaced: this checks the runner's loop only."""
    units = [Unit("s1/data/vocab", "vocab", {}), *_segments("pilot_a", 3, tmp_path),
             Unit("s1/pilot_a/eval/10", "eval", {}), Unit("s1/pilot_a/eval/20", "eval", {})]
    assert [u.id for u in runner._batch(units, 3)] == ["s1/data/vocab"]  # the run's 3 segments do not fit
    assert runner._batch(units[1:], 2) == [] and runner._batch(units[1:], 4) == units[1:5]
    long_run = _segments("long", runner.BATCH_UNITS + 5, tmp_path)
    assert runner._batch(long_run + units[:1]) == long_run  # whole, though longer than a batch

    ctx = Context(QUICK, tmp_path / "out", tmp_path / "results", tmp_path, tmp_path)
    batches = []

    def fake_worker(ctx, stage, batch):
        batches.append([unit.id for unit in batch])
        for unit in batch:
            ctx.store.write(unit.id, {"seconds": 2.0, "steps_timed": 10})

    monkeypatch.setattr(runner, "RunLock", lambda output_dir: contextlib.nullcontext())
    monkeypatch.setattr(runner, "prepare_glue", lambda ctx: None)
    monkeypatch.setattr(runner, "plan_all", lambda ctx, last_stage: [StagePlan(units, complete=True)])
    monkeypatch.setattr(runner, "run_worker", fake_worker)
    reports = []
    assert runner.execute(ctx, 1, reports.append, max_units=1) == 0  # the vocab, then the run does not fit
    assert batches == [["s1/data/vocab"]] and "stopped after 1 units (--max-units 1; the next would exceed it)" \
        in capsys.readouterr().out
    assert runner.execute(ctx, 1, reports.append, max_units=2) == 2
    assert batches == [["s1/data/vocab"]]  # nothing ran
    assert "error: --max-units 2 is fewer than the 3 pending segments of pretraining run pilot_a, which one worker " \
           "trains to its end (each segment counts as a unit, and a run is never split): give --max-units 3 or more" \
           in capsys.readouterr().err
    assert runner.execute(ctx, 1, reports.append, max_units=4) == 0
    assert batches[1:] == [[u.id for u in units[1:5]]]  # the run's 3 segments and an evaluation: 4 units
    assert "stopped after 4 units" in capsys.readouterr().out
    assert runner.execute(ctx, 1, reports.append) == 0 and batches[2:] == [["s1/pilot_a/eval/20"]]
    assert ctx.pending(units) == []
    assert replicate_paper.main(["--output-dir", str(tmp_path / "out"), "--max-units", "0"]) == 2
    assert "error: --max-units 0 must be at least 1" in capsys.readouterr().err


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

    status = _run(out, shared_data, "--status").stdout
    assert status.count(" 0 remaining") == 3 and "remaining (planned units): 0" in status, status

    results = json.loads((out / "results" / "results.json").read_text())
    assert [s["stage"] for s in results["stages"]] == [1, 2, 3] and all(s["complete"] for s in results["stages"])
    stage2, stage3 = results["stages"][1], results["stages"][2]
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
            assert "masked_lm_accuracy" in point["eval"]
        assert "disc_auc" in run["checkpoints"][0]["eval"] or run["objective"] == "bert"
    assert stage2["random_init"]["learned"]["tasks"]["sts"]["n"] == 2

    table = (out / "results" / "table.md").read_text()
    assert "| model | steps | FLOPs | STS-B | GLUE avg |" in table
    assert "| model | steps | FLOPs | STS-B | GLUE avg | paper Table 5 |" in table
    for row in ("| electra |", "| bert |", "| random init (learned) |", "| electra_15 |", "| all_tokens_mlm |"):
        assert row in table
    # stage 2 and 3 each rank their models with the seed spread and Table 5's pairs as measured
    assert table.count("- measured ordering by GLUE average") == 2 and table.count("- neighbours: ") == 2
    assert "paper Table 5 (base) orders 1 of these pairs" in table and "orders 9 of these pairs" in table
    assert "- HF export (electra): its discriminator in float16, " in table and "committed in `hf/electra`" in table
    for png in ("glue_vs_flops.png", "pretraining_curves.png"):
        assert (out / "results" / png).read_bytes()[:4] == b"\x89PNG"
    exported = out / "results" / "hf" / "electra"
    assert json.loads((exported / "config.json").read_text())["dtype"] == "float16"
    assert stage2["exports"]["s2/export/electra"]["committed"] is True
    assert stage2["throughput"]["s2/throughput/electra_learned"]["tokens_per_machine_second"] > 0

    # a new machine: the output dir is gone (results and vocab are committed) and one trial is
    # not done; its run is trained again, which first needs stage 1's data built again
    results_dir = tmp_path / "committed"
    shutil.copytree(out / "results", results_dir)
    shutil.rmtree(out)
    (results_dir / "units" / "s2" / "s2_bert" / "ft" / str(bert["steps"]) / "sts" / "seed1.json").unlink()
    ctx = Context(QUICK, out, results_dir, REPO, shared_data)
    by_stage = runner.pending_by_stage(ctx, plan_all(ctx))
    assert len(by_stage) == 2  # stage 3 is planned again once stage 2 is whole
    assert [u.id for u in by_stage[0]] == ["s1/data/build_learned"]
    assert [u.id for u in by_stage[1]] == [f"s2/s2_bert/pretrain/{bert['steps']}",
                                           f"s2/s2_bert/ft/{bert['steps']}/sts/seed1"]


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
    from paper_replication.report import write_report
    from paper_replication.settings import REAL
    from paper_replication.stages import plan_all, plan_stage1
    committed = REPO / "benchmarks" / "replication"
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
    monkeypatch.setattr(runner, "run_worker", lambda *args: pytest.fail("no unit may run"))
    assert runner.execute(ctx, 3, write_report) == 0
    assert "stopped after stage 1: " in capsys.readouterr().out
    stage = json.loads((results / "results.json").read_text())["stages"][0]
    (line,) = [line for line in stage["extrapolation"] if line.startswith("pilot_c:")]
    from paper_replication.extrapolation import GPU_FLOPS_PER_SECOND, hours
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
    assert stage["extrapolation"][-1].startswith("one GPU: `python benchmarks/replicate_paper.py ")
    table = (results / "table.md").read_text()
    assert line in table and "| pilot_c | learned | 0.001 | 9936 |" in table
    status = runner.status(ctx)
    assert "stage 2: not run (stage 1's note says why)" in status and "stage 3: not run" in status


def test_a_replication_keeps_the_clock_of_its_first_run(tmp_path, monkeypatch, capsys, shared_data):
    """--clock wall (a dedicated GPU machine) makes workers count wall seconds. A replication keeps
    its first run's clock (recorded when a run starts, never by --status), results from before the
    choice existed count machine seconds, and another clock or a damaged record is refused."""
    from paper_replication import worker
    out, results = tmp_path / "out", tmp_path / "results"
    cli = ["--output-dir", str(out), "--results-dir", str(results), "--shared-data", str(shared_data)]
    assert replicate_paper.main(cli + ["--status", "--clock", "wall"]) == 0
    assert "budgets count wall seconds" in capsys.readouterr().out
    assert not (results / "units" / "clock.json").exists()  # --status records nothing

    ctx = Context(QUICK, out, results, tmp_path, tmp_path)
    assert runner.settle_clock(ctx, "wall") is None and ctx.clock == "wall"
    monkeypatch.setattr(runner, "prepare_glue", lambda ctx: None)
    monkeypatch.setattr(runner, "plan_all", lambda ctx, last: [StagePlan([], complete=True)])
    assert runner.execute(ctx, 1, lambda ctx: None) == 0
    assert [json.loads((root / "units" / "clock.json").read_text()) for root in (out, results)] == [{"clock": "wall"}] * 2
    again = Context(QUICK, out, results, tmp_path, tmp_path)
    assert runner.settle_clock(again, None) is None and again.clock == "wall"
    assert replicate_paper.main(cli + ["--status", "--clock", "machine"]) == 2
    assert "error: this replication counts wall seconds" in capsys.readouterr().err

    def spec_clock(ctx):  # the clock a worker is started with
        monkeypatch.setattr(runner.subprocess, "Popen", lambda *a, **k: (_ for _ in ()).throw(OSError("stop")))
        with pytest.raises(OSError):
            runner.run_worker(ctx, runner.Stage(ctx, [StagePlan([], complete=True)], 1), [])
        return json.loads((ctx.output_dir / "specs" / "stage1.json").read_text())["clock"]

    assert spec_clock(again) == "wall"
    for text in ('{"clock": "gpu"}', "{trunc"):  # invalid, then damaged (both copies)
        for root in (out, results):
            (root / "units" / "clock.json").write_text(text)
        refused = runner.settle_clock(Context(QUICK, out, results, tmp_path, tmp_path), None)
        assert refused.startswith("error: ") and "clock.json" in refused and ("'gpu'" in refused or "damaged" in refused)

    older = Context(QUICK, tmp_path / "older", tmp_path / "older_results", tmp_path, tmp_path)
    older.store.write("s1/data/vocab_learned", {"seconds": 1.0})  # written before --clock existed
    assert "counts machine seconds" in runner.settle_clock(older, "wall")
    assert runner.settle_clock(older, None) is None and older.clock == "machine" and spec_clock(older) == "machine"

    monkeypatch.setattr(worker, "WALL_CLOCK", True)
    monkeypatch.setattr(worker, "use_pooled_cpu_allocator", lambda: None)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"output_dir": str(tmp_path / "w"), "results_dir": str(tmp_path / "r"), "units": []}))
    assert worker.main(str(spec)) == 0 and not worker.WALL_CLOCK  # the runner before --clock wrote no clock
    spec.write_text(json.dumps({**json.loads(spec.read_text()), "clock": "wall"}))
    assert worker.main(str(spec)) == 0 and worker.WALL_CLOCK
    stopwatch = worker.Stopwatch()
    time.sleep(0.2)
    spent = stopwatch.elapsed()
    assert spent["seconds"] >= 0.2 and spent["machine_seconds"] == pytest.approx(spent["seconds"], abs=0.01)
