"""experiments/electra_vs_mlm/replicate_paper.py in parts: the paper's FLOPs accounting, the pre-registered
decision rule, budgets, run locking and the clock a replication keeps. The whole run (`--quick`
end to end, stage 1's stop without a regime): test_replication_runs.py; stages 3 and 4 at the
real settings: test_replication_real_plans.py; the workers' time
records: test_replication_worker.py; the lanes, batches and --max-units:
test_replication_lanes.py; the status lines, the extrapolation and the ordering on
synthetic results: test_replication_report.py."""

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments" / "electra_vs_mlm"))

import replicate_paper  # noqa: E402
from paper_replication import runner  # noqa: E402
from paper_replication.flops import flops_per_step  # noqa: E402
from paper_replication.settings import QUICK  # noqa: E402
from paper_replication.stages import StagePlan, transfers  # noqa: E402
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


@pytest.mark.parametrize("settings_name", ["REAL", "QUICK"])
def test_a_diagnostic_s_flops_count_the_generator_it_trains(tmp_path, shared_data, settings_name):
    """Stage 4's runs change one setting each (the fourth: the first's, with Adam's bias correction
    too); the FLOPs per step follow the generator their PretrainingConfig builds (the full-width one costs
    more, so it gets fewer steps)."""
    from electra_tf.config import PretrainingConfig
    from paper_replication import settings as plan
    from paper_replication.stages import run_step_flops, step_flops
    from paper_replication.units import run_hparams, schedule
    s = getattr(plan, settings_name)
    ctx = Context(s, tmp_path / "out", tmp_path / "results", tmp_path, shared_data)
    widths = []
    for diagnostic in s.diagnostics:
        run = schedule(s, 0.0, 100, f"s4_{diagnostic.name}", 4, "electra", "bert", 1e-3, (1.0,), steps=100,
                       hparams=diagnostic.hparams)
        hparams = run_hparams(ctx, run)
        assert {key: hparams[key] for key, _ in diagnostic.hparams} == dict(diagnostic.hparams)
        generator = PretrainingConfig.from_hparams(run.name, str(tmp_path / "m"), hparams).generator_config()
        assert generator.intermediate_size == 4 * generator.hidden_size
        assert generator.num_attention_heads == max(1, generator.hidden_size // 64)
        own_embeddings = dict(diagnostic.hparams).get("untied_generator_embeddings", False)
        assert generator.embedding_size == (generator.hidden_size if own_embeddings else s.embedding)
        assert run_step_flops(ctx, "electra", "bert", run.hparams) == step_flops(
            ctx, "electra", "bert", generator.hidden_size, untied_embeddings=own_embeddings)
        widths.append((generator.hidden_size, own_embeddings))
    assert widths == [(s.hidden, False), (s.generator_hidden, True), (s.generator_hidden, False),
                      (s.hidden, False)][:len(widths)]  # the fourth: the first, bias-corrected
    assert run_step_flops(ctx, "electra", "bert", s.diagnostics[0].hparams) > step_flops(ctx, "electra", "bert")
    if len(s.diagnostics) > 1:  # its own narrow table, without the projection: fewer FLOPs than the tied one's
        assert run_step_flops(ctx, "electra", "bert", s.diagnostics[1].hparams) < step_flops(ctx, "electra", "bert")


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
    the old one, and the old run's time stays counted (the cap counts all time spent), with its
    training log."""
    ctx = Context(QUICK, tmp_path / "out", tmp_path / "results", tmp_path, tmp_path)
    unit = Unit("s1/pilot/pretrain/10", "pretrain", {}, artifact=str(tmp_path / "gone.index"))
    log = [{"step": 10, "loss": 2.5}]
    ctx.store.write(unit.id, {"seconds": 30.0, "machine_seconds": 20.0, "worker": "first", "train_log": log})
    ctx.store.write(unit.id, {"seconds": 5.0, "machine_seconds": 4.0, "worker": "second", "train_log": []})
    assert ctx.result(unit.id)["worker"] == "second"
    assert ctx.store.unrecorded(unit.id) == [{"seconds": 30.0, "machine_seconds": 20.0, "train_log": log,
                                              "superseded": True}]
    assert ctx.spent([unit]) == 24.0 and ctx.spent([unit], machine=False) == 35.0
    ctx.store.write(unit.id, {"seconds": 1.0})  # a result without a worker (older records) is kept too
    ctx.store.write(unit.id, {"seconds": 2.0})
    assert ctx.spent([unit], machine=False) == 38.0


def test_run_lock_refuses_a_live_run_and_takes_over_a_gone_ones(tmp_path):
    """A live run is refused, naming its pid and how to pause it; the lock a killed run left (a
    session's end kills it), whatever its file holds, is taken over (with a notice naming the
    holder, where the file still names one), and released
    with its file removed and SIGTERM's handler restored at the end."""
    out = tmp_path / "out"
    out.mkdir()
    hold = ("import sys, time; from pathlib import Path; sys.path.insert(0, 'experiments/electra_vs_mlm'); "
            "from paper_replication.runner import RunLock\n"
            f"with RunLock(Path({str(out)!r})):\n    print('held', flush=True); time.sleep(60)")
    live = subprocess.Popen([sys.executable, "-c", hold], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline().strip() == "held"
        with pytest.raises(SystemExit, match=f"in use by another process \\(pid {live.pid} .* kill -STOP -{live.pid}"):
            runner.RunLock(out).__enter__()
    finally:
        live.kill()
        live.wait()
    code = ("import signal, sys; from pathlib import Path; sys.path.insert(0, 'experiments/electra_vs_mlm'); "
            "from paper_replication.runner import RunLock\n"
            f"with RunLock(Path({str(out)!r})) as lock: print(open(lock.path).read())\n"
            "print('SIGTERM handler restored:', signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, file=sys.stderr)")
    for content in (None, json.dumps({"pid": os.getpid(), "pgid": 4242}), '{"pid": 12'):  # the killed holder's; old; cut
        if content is not None:
            (out / "run.pid").write_text(content)
        said = "taking over the lock of replication output dir" if content != '{"pid": 12' else ""
        entered = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert entered.returncode == 0, entered.stderr
        assert json.loads(entered.stdout)["pid"] > 0 and not (out / "run.pid").exists()  # its own, then removed
        assert said in entered.stderr and "SIGTERM handler restored: True" in entered.stderr


def test_planning_loads_no_tensorflow():
    """The runner plans, and --status reports, in plain Python: TensorFlow loads in the workers only."""
    code = ("import sys; sys.path[:0] = ['.', 'experiments/electra_vs_mlm']; import replicate_paper; "
            "import paper_replication.runner, paper_replication.status, paper_replication.report; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tf_keras', 'torch')))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=REPO / "experiments" / "electra_vs_mlm",
                            capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "[]"


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

    ctx = Context(dataclasses.replace(QUICK, workers=1), out, results, tmp_path, tmp_path)  # no second worker
    assert runner.settle_clock(ctx, "wall") is None and ctx.clock == "wall"
    monkeypatch.setattr(runner, "prepare_glue", lambda ctx: None)
    monkeypatch.setattr(runner, "RunLock", lambda output_dir: contextlib.nullcontext())  # not this process's group
    monkeypatch.setattr(runner, "plan_all", lambda ctx, last: [StagePlan([], complete=True)])
    assert runner.execute(ctx, 1, lambda ctx, last_stage: None) == 0
    assert [json.loads((root / "units" / "clock.json").read_text()) for root in (out, results)] == [{"clock": "wall"}] * 2
    again = Context(QUICK, out, results, tmp_path, tmp_path)
    assert runner.settle_clock(again, None) is None and again.clock == "wall"
    assert replicate_paper.main(cli + ["--status", "--clock", "machine"]) == 2
    assert "error: this replication counts wall seconds" in capsys.readouterr().err

    def spec_clock(ctx):  # the clock a worker is started with
        monkeypatch.setattr(runner.subprocess, "Popen", lambda *a, **k: (_ for _ in ()).throw(OSError("stop")))
        with pytest.raises(OSError):
            runner.Worker(ctx).run(runner.Stage(ctx, [StagePlan([], complete=True)], 1), [])
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
    spec = {"output_dir": str(tmp_path / "w"), "results_dir": str(tmp_path / "r"), "units": []}
    worker.run_spec(spec)
    assert not worker.WALL_CLOCK  # the runner before --clock wrote no clock
    worker.run_spec({**spec, "clock": "wall"})
    assert worker.WALL_CLOCK
    stopwatch = worker.Stopwatch()
    time.sleep(0.2)
    spent = stopwatch.elapsed()
    assert spent["seconds"] >= 0.2 and spent["machine_seconds"] == pytest.approx(spent["seconds"], abs=0.1)
