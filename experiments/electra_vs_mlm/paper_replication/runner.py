"""Runs the stages: plan, run the pending units in a worker subprocess, relay progress, plan again.

Stops when every planned stage is done, when a stage's decision ends the run (no regime), or
with exit code 1 when a worker fails (its log's last lines are printed; rerunning resumes).
`--status` (status.py) only plans; it runs and records nothing.
"""

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import List, Optional

from electra_tf import atomic_files
from electra_tf.dir_lock import DirLock
from electra_tf.errors import DirectoryInUse
from electra_tf.progress import format_duration as duration
from paper_replication import batching
from paper_replication.eta import Estimator
from paper_replication.stages import StagePlan, pending_by_stage, plan_all
from paper_replication.store import read_json, write_json
from paper_replication.units import CHUNK_TASK, GLUE_FOLDERS, Context, Unit
from paper_replication.worker import IDLE

PRINTING = threading.Lock()
EXPERIMENT = Path(__file__).resolve().parents[1]  # paper_replication's folder, on the worker's path
MARKER = re.compile(r"@@(start|end) (\S+) (\d+\.\d)")  # worker._mark's line
CLOCKS = ("machine", "wall")  # what budgets count (settle_clock)


def _clock_files(ctx: Context) -> List[Path]:
    return [root / "units" / "clock.json" for root in (ctx.output_dir, ctx.results_dir)]


def settle_clock(ctx: Context, requested: Optional[str]) -> Optional[str]:
    """Sets ctx.clock: what budgets count (machine seconds, or wall seconds on a dedicated machine
    such as one with a GPU). A replication keeps the clock of its first run (`units/clock.json`,
    written by `execute`; results from before the choice existed count machine seconds), since
    mixing the two would skew every budget. Returns an error message instead when another clock is
    requested or the record is damaged."""
    files = _clock_files(ctx)
    recorded = ctx.result("clock")
    if recorded is None and any(path.exists() for path in files):
        return f"error: {' and '.join(str(p) for p in files if p.exists())}: damaged; restore it from git or delete it"
    if recorded is not None:
        clock = recorded.get("clock")
        if clock not in CLOCKS:
            return f"error: {files[1]}: clock {clock!r} is not one of {', '.join(CLOCKS)}"
    elif any(any((root / "units").rglob("*.json")) for root in (ctx.output_dir, ctx.results_dir)):
        clock = "machine"
    else:
        clock = requested or "machine"
    if requested is not None and requested != clock:
        return (f"error: this replication counts {clock} seconds ({files[1]} or its first results); --clock "
                f"{requested} would mix the two: give it its own --output-dir and --results-dir")
    ctx.clock = clock
    return None


def prepare_glue(ctx: Context) -> None:
    """<output>/glue: the GLUE folders linked, SST-2's train set replaced by its fixed subsample,
    and CoNLL-2000 as the chunking task's folder (its official test set as the dev set)."""
    chunk = ctx.glue_dir / CHUNK_TASK
    chunk.mkdir(parents=True, exist_ok=True)
    for name, source in (("train.txt", "train.txt"), ("dev.txt", "test.txt")):
        if not (chunk / name).exists():
            (chunk / name).symlink_to(ctx.shared_data / "conll2000" / source)
    for task, folder in GLUE_FOLDERS.items():
        source, target = ctx.shared_data / "glue" / folder, ctx.glue_dir / folder
        target.mkdir(parents=True, exist_ok=True)
        for path in source.iterdir():
            link = target / path.name
            if task == "sst" and path.name == "train.tsv":
                continue
            if not link.exists():
                link.symlink_to(path)
        if task == "sst" and not (target / "train.tsv").exists():
            header, *rows = (source / "train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
            keep = sorted(random.Random(0).sample(range(len(rows)), ctx.settings.sst_subsample))
            atomic_files.write_text(target / "train.tsv", header + "".join(rows[i] for i in keep))


class RunLock:
    """The library's writer lock (electra_tf.dir_lock) on the output dir while a run is active, in
    `<output>/run.pid`, which names the holder's pid: a second run is refused; a holder that is gone
    (a session's end kills the run) is taken over. The run leads its own process group, so
    `kill -STOP -<pid>` pauses it and its workers; SIGTERM unwinds (the workers stopped, the lock
    released and its file removed)."""

    def __init__(self, output_dir: Path):
        self.path = output_dir / "run.pid"
        self.lock = DirLock(output_dir, self.path, "replication output dir",
                            report=lambda line: print(line, file=sys.stderr, flush=True))

    def __enter__(self):
        try:
            self.lock.__enter__()
        except DirectoryInUse as error:
            holder = (read_json(self.path) or {}).get("pid", "<pid>")
            raise SystemExit(f"error: {error}. Pause it with kill -STOP -{holder}, resume with "
                             f"kill -CONT -{holder}") from None
        if os.getpgrp() != os.getpid():
            os.setpgid(0, 0)  # its own process group, so kill -STOP -<pid> pauses it and its workers only
        self.previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        return self

    def __exit__(self, *exc):
        signal.signal(signal.SIGTERM, self.previous)
        self.lock.__exit__()


def _run_lanes(workers: List["Worker"], stage: "Stage", lanes: List[List[Unit]]) -> None:
    """Runs each lane on its own worker, at once. A failed lane, or a stop (SIGTERM) meanwhile,
    stops the other workers too (SIGTERM: a pretraining worker saves a checkpoint first) and waits
    for their threads; then the first failure is raised."""
    failures: List[BaseException] = []

    def lane_run(worker: "Worker", units: List[Unit]) -> None:
        try:
            worker.run(stage, units)
        except BaseException as failure:  # SystemExit from a failed unit, raised again below
            failures.append(failure)

    def stop_all() -> None:
        for worker in workers:
            if worker.busy and worker.process is not None and worker.process.poll() is None:
                worker.process.terminate()

    threads = [threading.Thread(target=lane_run, args=(worker, units), daemon=True)
               for worker, units in zip(workers, lanes) if units]
    for thread in threads:
        thread.start()
    try:
        while any(thread.is_alive() for thread in threads):
            for thread in threads:
                thread.join(0.2)
            if failures:
                stop_all()
    except BaseException:
        stop_all()
        for thread in threads:
            thread.join(60)
        raise
    if failures:
        raise failures[0]


class Stage:
    """Progress of one stage: done / total, measured time so far and the ETA, as one line per event."""

    def __init__(self, ctx: Context, plans: List[StagePlan], number: int):
        self.ctx, self.number = ctx, number
        self.units = plans[number - 1].units
        self.all_units = [u for plan in plans for u in plan.units]

    def line(self, event: str) -> str:
        ids = {u.id for u in self.units}
        pending = [u for u in self.ctx.pending(self.all_units) if u.id in ids]
        estimator = Estimator(self.ctx, self.all_units)
        spent = self.ctx.spent(self.units, machine=False)
        return (f"[stage {self.number}] {event} | {len(self.units) - len(pending)}/{len(self.units)} units done "
                f"| stage time {duration(spent)}, ETA {duration(estimator.total(pending))}")


class Worker:
    """One worker subprocess (`paper_replication.worker`) kept over several batches, so TensorFlow
    and the units' modules load once per BATCH_UNITS units rather than once per plan: at --quick's
    size, where a plan is a handful of seconds of work, that load was a third of the run."""

    def __init__(self, ctx: Context, lane: int = 0):
        self.ctx, self.process, self.units, self.lane = ctx, None, 0, lane
        self.busy = False  # a spec sent, its IDLE not yet read

    def _start(self) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(self.ctx.repo), str(EXPERIMENT)]),
                   TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"), PYTHONUNBUFFERED="1")
        return subprocess.Popen([sys.executable, "-m", "paper_replication.worker"], cwd=self.ctx.repo, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, bufsize=1)

    def run(self, stage: Stage, units: List[Unit]) -> None:
        """Runs `units`, relaying the worker's markers as progress lines and the rest to the stage's log."""
        lane = f"-lane{self.lane}" if self.lane else ""
        spec = self.ctx.output_dir / "specs" / f"stage{stage.number}{lane}.json"
        write_json(spec, {"output_dir": str(self.ctx.output_dir), "results_dir": str(self.ctx.results_dir),
                          "clock": self.ctx.clock, "quick": self.ctx.settings.quick,
                          "units": [{"id": u.id, "kind": u.kind, "params": u.params} for u in units]})
        self._ready(len(units))
        log = self.ctx.output_dir / "logs" / f"stage{stage.number}{lane}.log"  # a failure's tail is its own
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a", encoding="utf-8") as out:
            self.busy = True  # before the spec goes: a stop from here on finds the worker at work
            try:
                self.process.stdin.write(f"{spec}\n")
                self.process.stdin.flush()
            except BrokenPipeError:  # it ended just now; the wait below says how
                pass
            for line in iter(self.process.stdout.readline, ""):
                if line.rstrip("\n").endswith(IDLE):
                    self.busy = False
                    return
                out.write(line)
                out.flush()
                marker = MARKER.fullmatch(line.rstrip("\n"))
                if marker:
                    event, unit_id, seconds = marker.groups()
                    text = f"start {unit_id}" if event == "start" else f"done {unit_id} in {duration(float(seconds))}"
                    line = stage.line(text)
                    with PRINTING:  # lanes: one line at a time
                        print(line, flush=True)
        code, self.process, self.busy = self.process.wait(), None, False
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-25:]
        print("\n".join(tail), file=sys.stderr)
        raise SystemExit(f"error: a unit of stage {stage.number} failed (exit {code}); log: {log}. "
                         "Rerunning the same command resumes.")

    def _ready(self, units: int) -> None:
        """A live, idle worker for `units` more units: a fresh one first when this one would pass
        BATCH_UNITS (memory stays flat) or has ended while idle (no unit was running: nothing is lost)."""
        if self.process is not None and self.process.poll() is not None:
            print(f"the worker ended between batches (exit {self.process.returncode}); starting another",
                  file=sys.stderr, flush=True)
            self.process = None
        if self.process is not None and self.units + units > batching.BATCH_UNITS:
            self.close()
        if self.process is None:
            self.process, self.units = self._start(), 0
        self.units += units

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def let_go(self) -> None:
        """Closes an idle worker's input, so that it starts ending before `close` waits for it."""
        if self.process is not None and not self.busy and self.process.poll() is None:
            try:
                self.process.stdin.close()
            except BrokenPipeError:
                pass

    def close(self) -> None:
        """Lets an idle worker end (its input closed). One still busy (the run is unwinding mid-unit)
        gets SIGTERM, as a session's stop sends it: a pretraining worker saves a checkpoint first;
        its last output is read (and dropped) meanwhile, so a full pipe cannot hold it up."""
        process, busy, self.process, self.busy = self.process, self.busy, None, False
        if process is None or process.poll() is not None:
            return
        if busy:
            process.terminate()
        try:
            process.stdin.close()
        except BrokenPipeError:
            pass
        if busy:  # a reader thread: a child of the worker may hold the pipe open after it ends
            threading.Thread(target=process.stdout.read, daemon=True).start()
            process.wait()
            return
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:  # idle, yet not ending
            process.terminate()
            process.wait()


def execute(ctx: Context, last_stage: int, on_stage_done, max_units: Optional[int] = None) -> int:
    """Runs stages 1..last_stage to the end (or to the stop rule, or after at most `max_units` units,
    a pretraining segment being one; 2 with an error when `max_units` is below the number of the
    next pretraining run's pending segments, which cannot be split); `on_stage_done(ctx, last_stage)`
    writes the report."""
    ctx.output_dir.mkdir(parents=True, exist_ok=True)
    with RunLock(ctx.output_dir), contextlib.ExitStack() as workers:
        lane_workers = [workers.enter_context(Worker(ctx, lane)) for lane in range(ctx.settings.workers)]
        workers.callback(lambda: [lane_worker.let_go() for lane_worker in lane_workers])  # they end together
        worker = lane_workers[0]
        for lane_worker in lane_workers[1:]:  # loading TensorFlow now, while the first units run alone
            lane_worker._ready(0)
        for path in _clock_files(ctx):  # the replication's clock (settle_clock), from its first run on
            if not path.exists():
                write_json(path, {"clock": ctx.clock})
        prepare_glue(ctx)
        announced, reported, ran = set(), set(), 0
        while True:
            plans = plan_all(ctx, last_stage)
            by_stage = pending_by_stage(ctx, plans)
            for number, plan in enumerate(plans, 1):
                if number not in announced:
                    announced.add(number)
                    skipped = len(plan.units) - len(by_stage[number - 1])
                    print(Stage(ctx, plans, number).line(f"{skipped} units finished earlier (skipped)"), flush=True)
            current = next((n for n, pending in enumerate(by_stage, 1) if pending), None)
            if current is None:
                on_stage_done(ctx, last_stage)
                for plan_number, plan in enumerate(plans, 1):
                    for note in plan.notes:
                        print(f"[stage {plan_number}] {note}", flush=True)
                if len(plans) < last_stage:
                    print(f"stopped after stage {len(plans)}: " + "; ".join(plans[-1].notes), flush=True)
                return 0
            stage = Stage(ctx, plans, current)
            if current > 1 and current not in reported:
                reported.add(current)
                on_stage_done(ctx, last_stage)  # the previous stage's results
            pending = by_stage[current - 1]
            budget = None if max_units is None else max_units - ran
            lanes = batching.lanes(pending, ctx.settings.workers, Estimator(ctx, stage.all_units).total, budget) \
                if ctx.settings.workers > 1 else []
            if lanes:
                _run_lanes(lane_workers, stage, lanes)
                ran += sum(map(len, lanes))
                continue
            batch = batching.batch(pending, budget)
            if ctx.settings.workers > 1:  # alone: the unit that cannot share the machine, or the one ready unit
                batch = batch[:batching.run_length(pending, 0)]
            if not batch and ran == 0:  # the next unit is a pretraining run with more segments than that
                segments = batching.run_length(pending, 0)
                print(f"error: --max-units {max_units} is fewer than the {segments} pending segments of pretraining "
                      f"run {pending[0].params['run']}, which one worker trains to its end (each segment counts "
                      f"as a unit, and a run is never split): give --max-units {segments} or more",
                      file=sys.stderr, flush=True)
                return 2
            if not batch:
                segments = batching.run_length(pending, 0)
                again = f"--max-units {segments} or more" if segments > max_units else "the same command"
                print(f"stopped after {ran} units (--max-units {max_units}; the next would exceed it); "
                      f"rerun with {again} to continue", flush=True)
                on_stage_done(ctx, last_stage)
                return 0
            worker.run(stage, batch)
            ran += len(batch)


def find_shared_data(repo: Path) -> Optional[Path]:
    """`shared/data` beside the checkout, or beside a parent of it (worktrees sit one level deeper)."""
    for parent in (repo.parent, repo.parent.parent):
        if (parent / "shared" / "data" / "corpus").is_dir():
            return parent / "shared" / "data"
    return None
