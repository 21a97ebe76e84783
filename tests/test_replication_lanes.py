"""experiments/electra_vs_mlm/replicate_paper.py's scheduling: --max-units counts pretraining
segments and never splits a run, the two lanes share out the ready units and keep a run whole, a
failed lane stops the other, and one worker runs batch after batch. Planning and the worker are
replaced by stand-ins: these check the runner's loop only."""

import contextlib
import dataclasses
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments" / "electra_vs_mlm"))

import replicate_paper  # noqa: E402
from paper_replication import batching, runner  # noqa: E402
from paper_replication.settings import QUICK  # noqa: E402
from paper_replication.stages import StagePlan  # noqa: E402
from paper_replication.units import Context, Unit  # noqa: E402


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
    assert [u.id for u in batching.batch(units, 3)] == ["s1/data/vocab"]  # the run's 3 segments do not fit
    assert batching.batch(units[1:], 2) == [] and batching.batch(units[1:], 4) == units[1:5]
    long_run = _segments("long", batching.BATCH_UNITS + 5, tmp_path)
    assert batching.batch(long_run + units[:1]) == long_run  # whole, though longer than a batch

    ctx = Context(dataclasses.replace(QUICK, workers=1), tmp_path / "out", tmp_path / "results", tmp_path, tmp_path)
    batches = []

    def fake_worker(worker, stage, batch):
        batches.append([unit.id for unit in batch])
        for unit in batch:
            ctx.store.write(unit.id, {"seconds": 2.0, "steps_timed": 10})

    monkeypatch.setattr(runner, "RunLock", lambda output_dir: contextlib.nullcontext())
    monkeypatch.setattr(runner, "prepare_glue", lambda ctx: None)
    monkeypatch.setattr(runner, "plan_all", lambda ctx, last_stage: [StagePlan(units, complete=True)])
    monkeypatch.setattr(runner.Worker, "run", fake_worker)
    reports = []
    report = lambda ctx, last_stage: reports.append(last_stage)  # noqa: E731
    assert runner.execute(ctx, 1, report, max_units=1) == 0  # the vocab, then the run does not fit
    assert batches == [["s1/data/vocab"]] and "stopped after 1 units (--max-units 1; the next would exceed it)" \
        in capsys.readouterr().out
    assert runner.execute(ctx, 1, report, max_units=2) == 2
    assert batches == [["s1/data/vocab"]]  # nothing ran
    assert "error: --max-units 2 is fewer than the 3 pending segments of pretraining run pilot_a, which one worker " \
           "trains to its end (each segment counts as a unit, and a run is never split): give --max-units 3 or more" \
           in capsys.readouterr().err
    assert runner.execute(ctx, 1, report, max_units=4) == 0
    assert batches[1:] == [[u.id for u in units[1:5]]]  # the run's 3 segments and an evaluation: 4 units
    assert "stopped after 4 units" in capsys.readouterr().out
    assert runner.execute(ctx, 1, report) == 0 and batches[2:] == [["s1/pilot_a/eval/20"]]
    assert ctx.pending(units) == []
    assert reports and set(reports) == {1}  # each report covers the stages run: 1..--stage
    assert replicate_paper.main(["--output-dir", str(tmp_path / "out"), "--max-units", "0"]) == 2
    assert "error: --max-units 0 must be at least 1" in capsys.readouterr().err


FAKE_WORKER = """
import json, os, sys, time
for line in iter(sys.stdin.readline, ""):
    for unit in json.loads(open(line.strip()).read())["units"]:
        print("@@start", unit["id"], "0.0", flush=True)
        print("@@start", unit["id"], flush=True)
        print("working in", os.getpid(), flush=True)
        if unit["kind"] == "fail":
            sys.exit(3)
        if unit["kind"] == "hang":
            time.sleep(600)
        print("@@end", unit["id"], "1.0", flush=True)
    print("@@idle", flush=True)
"""


def test_lanes_share_out_the_ready_units_and_keep_a_run_whole(tmp_path):
    """With two workers (--quick), the units that can run now (pretraining runs whose data is built,
    evaluations and trials of trained runs) are dealt over two lanes by estimated time, a run's
    segments together; a unit whose run is pending waits for a later round, a data or throughput
    unit stops the scan (it runs alone), and --max-units caps the total."""
    runs = _segments("a", 2, tmp_path) + _segments("b", 3, tmp_path)
    needs_a = (runs[1].id,)
    trials = [Unit(f"s1/a/ft/20/sst/seed{k}", "finetune", {}, needs=needs_a) for k in (1, 2)]
    random = [Unit(f"s1/random/ft/sst/seed{k}", "finetune", {}) for k in (1, 2, 3)]
    seconds = {"pretrain": 10.0, "finetune": 3.0}
    lanes = batching.lanes(runs + trials + random, 2, lambda units: sum(seconds[u.kind] for u in units))
    assert lanes == [runs[2:], runs[:2] + random]  # run b (30 s); run a (20 s), then the trials (9 s)
    assert not any(t in lane for t in trials for lane in lanes)  # their run is not trained yet
    assert batching.lanes(random, 2, lambda units: float(len(units))) == [[random[0], random[2]], [random[1]]]
    stop = [Unit("s2/throughput/electra_learned", "throughput", {})]
    assert batching.lanes(random[:1] + stop + random[1:], 2, lambda units: float(len(units))) == []  # one ready unit, then a stop
    assert batching.lanes(runs + random, 2, lambda units: float(len(units)), budget=5) == [runs[2:], runs[:2]]  # 5 units in all
    assert batching.lanes(runs + random, 2, lambda units: float(len(units)), budget=4) == []  # run b does not fit: a runs alone
    assert batching.lanes(random, 1, lambda units: float(len(units))) == []  # one worker: the plain batches


def test_a_failed_lane_stops_the_other_and_is_raised():
    """Two lanes at once: when one lane's unit fails, the other worker, still busy, gets SIGTERM
    (a pretraining worker saves a checkpoint first) rather than running its list to the end, and
    the failure is what the runner raises."""
    import threading

    class Process:
        def __init__(self):
            self.ended = threading.Event()

        def poll(self):
            return 0 if self.ended.is_set() else None

        def terminate(self):
            self.ended.set()

    class FakeWorker:
        def __init__(self, fails: bool):
            self.fails, self.busy, self.process = fails, False, Process()

        def run(self, stage, units):
            self.busy = True
            if self.fails:
                raise SystemExit("error: a unit of stage 1 failed (exit 3)")
            assert self.process.ended.wait(30), "never stopped"
            raise SystemExit("error: a unit of stage 1 failed (exit -15)")  # what Worker.run says of a stopped worker

    failing, busy = FakeWorker(True), FakeWorker(False)
    with pytest.raises(SystemExit) as failed:
        runner._run_lanes([failing, busy], None, [[Unit("s1/a/eval/1", "eval", {})], [Unit("s1/b/eval/1", "eval", {})]])
    assert str(failed.value) == "error: a unit of stage 1 failed (exit 3)" and busy.process.ended.is_set()


def test_one_worker_runs_batch_after_batch_until_it_has_run_batch_units(tmp_path, monkeypatch, capsys):
    """The runner keeps its worker process over batches (TensorFlow loads once), starts a fresh one
    when a batch would take it past BATCH_UNITS units or it ended while idle, lets an idle one end
    when closed, turns a worker's death mid-unit into one error naming the stage's log, and sends
    SIGTERM to a worker still busy when the run unwinds. The worker is a stand-in speaking the same
    protocol."""
    ctx = Context(QUICK, tmp_path / "out", tmp_path / "results", tmp_path, tmp_path)
    started = []

    def start(self):
        started.append(subprocess.Popen([sys.executable, "-c", FAKE_WORKER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1))
        return started[-1]

    monkeypatch.setattr(runner.Worker, "_start", start)
    monkeypatch.setattr(batching, "BATCH_UNITS", 3)
    units = [Unit(f"s1/pilot_a/eval/{n}", "eval", {}) for n in range(5)]
    stage = runner.Stage(ctx, [StagePlan(units, complete=True)], 1)
    with runner.Worker(ctx) as worker:
        worker.run(stage, units[:2])
        out = capsys.readouterr().out
        assert [line.split("] ")[1].split(" |")[0] for line in out.splitlines()] == [
            "start s1/pilot_a/eval/0", "done s1/pilot_a/eval/0 in 1s", "start s1/pilot_a/eval/1",
            "done s1/pilot_a/eval/1 in 1s"]  # "@@start x" alone (in the log) is no marker
        worker.run(stage, units[2:3])  # the same process: 3 units so far
        assert len(started) == 1
        worker.run(stage, units[3:])  # BATCH_UNITS would be passed: a fresh process
        assert len(started) == 2 and started[0].returncode == 0  # the first ended when its input closed
        started[1].kill()  # while idle, between batches: another one takes the next batch
        started[1].wait(timeout=10)
        worker.run(stage, units[:1])
        assert len(started) == 3
    assert started[2].wait(timeout=10) == 0
    assert "the worker ended between batches (exit -9); starting another" in capsys.readouterr().err
    log = (ctx.output_dir / "logs" / "stage1.log").read_text()
    assert log.count("working in") == 6 and "@@idle" not in log

    with runner.Worker(ctx) as worker, pytest.raises(SystemExit) as failed:
        worker.run(stage, [Unit("s1/pilot_a/eval/9", "fail", {})])
    assert f"a unit of stage 1 failed (exit 3); log: {ctx.output_dir / 'logs' / 'stage1.log'}" in str(failed.value)
    assert "working in" in capsys.readouterr().err  # the log's last lines

    def unwinding(self, event):  # the runner fails while the worker is mid-unit
        raise KeyboardInterrupt

    monkeypatch.setattr(runner.Stage, "line", unwinding)
    with pytest.raises(KeyboardInterrupt), runner.Worker(ctx) as worker:
        worker.run(stage, [Unit("s1/pilot_a/eval/8", "hang", {})])
    assert started[-1].returncode == -signal.SIGTERM  # stopped as a session's stop would, not waited for
