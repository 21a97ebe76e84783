"""The replication's workers (experiments/electra_vs_mlm/paper_replication): the time of every unit
stays on record when a session stops a worker, a resumed run records only what it trained, a
failure to record a segment stops training (the ETA: test_replication_eta.py)."""

import io
import json
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments" / "electra_vs_mlm"))

from paper_replication.settings import QUICK  # noqa: E402
from paper_replication.units import Context, Unit  # noqa: E402


@pytest.fixture(params=["python", "ignored"])
def sigint_at_start(request):
    """SIGINT as a worker may find it: Python's KeyboardInterrupt, or ignored, as in any process started
    with `nohup ... &` (the replication's own workers). The worker's stop must land in both; afterwards
    the handler is the one it found."""
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler if request.param == "python" else signal.SIG_IGN)
    found = signal.getsignal(signal.SIGINT)
    yield
    assert signal.getsignal(signal.SIGINT) is found
    signal.signal(signal.SIGINT, previous)


def _write_checkpoint(model_dir: Path, step: int) -> None:
    """The files TensorFlow writes for ckpt-<step> (and the run's config and vocab), and the
    `checkpoint` state naming it and the checkpoints kept before it."""
    for name in (f"ckpt-{step}.index", f"ckpt-{step}.data-00000-of-00001", "config.json", "vocab.txt"):
        (model_dir / name).write_text("x")
    kept = sorted(int(path.name[len("ckpt-"):-len(".index")]) for path in model_dir.glob("ckpt-*.index"))
    (model_dir / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{step}"\n' + "".join(
        f'all_model_checkpoint_paths: "ckpt-{k}"\n' for k in kept))


def _log(model_dir: Path, points) -> None:
    """What one training process's Reporter writes at its logged steps: the TensorBoard scalars
    under `model_dir/train`, one events file a process."""
    from electra_tf.training.reporting import Reporter
    with Reporter(model_dir, total_steps=30, batch_size=4, chief=True, stream=io.StringIO()) as reporter:
        for step, values in points:
            reporter.scalars("train", step, values)


def _segment_units(tmp_path: Path, steps) -> list:
    return [{"id": f"s1/run/pretrain/{step}", "params": {
        "run": "run", "hparams": {"model_dir": str(tmp_path / "model"), "num_train_steps": max(steps)},
        "step": step, "from_step": step - 10,
        "probe": str(tmp_path / "probes" / f"ckpt-{step}"), "flops_per_step": 1.0, "tokens_per_step": 4}}
        for step in steps]


def test_a_run_resumed_past_its_segments_records_only_what_it_trained(tmp_path, monkeypatch):
    """Resumed from ckpt-25 with the checkpoints of segments 10 and 20 still kept, a worker records
    those two with no timed steps (an earlier worker trained them) and segment 30 with the 5 steps
    it trained: no rate comes from steps it did not train."""
    from paper_replication import worker
    from paper_replication.report import _segment_rate
    from paper_replication.store import Store
    monkeypatch.setattr(worker, "_mark", lambda *args: None)
    model_dir, store = tmp_path / "model", Store(tmp_path / "out", tmp_path / "results")
    model_dir.mkdir()
    for step in (10, 20, 25):
        _write_checkpoint(model_dir, step)

    def train(hparams):
        _log(model_dir, [(step, {"loss": 2.5, "masked_lm_loss": float(f"1.{step}"), "disc_auc": 0.6, "grad_norm": 1.25})
                         for step in (28, 30)])
        _write_checkpoint(model_dir, 30)

    monkeypatch.setattr(worker, "_pretraining", train)
    units = _segment_units(tmp_path, (10, 20, 30))
    worker.do_pretrain(units, store)
    results = [store.read(unit["id"]) for unit in units]
    assert [r["steps_timed"] for r in results] == [0, 0, 5]
    assert [r["tokens_per_second"] for r in results[:2]] == [None, None]
    assert _segment_rate(results[0]) is None and _segment_rate(results[1]) is None
    # each segment keeps the training log this worker saw of its own steps
    assert results[0]["train_log"] == results[1]["train_log"] == []
    assert results[2]["train_log"] == [
        {"step": step, "loss": 2.5, "masked_lm_loss": float(f"1.{step}"), "disc_auc": 0.6, "grad_norm": 1.25}
        for step in (28, 30)]


def test_a_run_trained_again_from_scratch_times_all_its_steps(tmp_path, monkeypatch):
    """On a new machine only the final segment may be needed again (earlier probes are fine-tuned
    already): the worker trains from step 0, and the unit's rate counts all 20 steps it trained.
    Its training log keeps the segment's own steps: the earlier segment's are on record already,
    from the first training."""
    from paper_replication import worker
    from paper_replication.store import Store
    monkeypatch.setattr(worker, "_mark", lambda *args: None)
    model_dir, store = tmp_path / "model", Store(tmp_path / "out", tmp_path / "results")
    model_dir.mkdir()

    def train(hparams):
        _log(model_dir, [(step, {"loss": 2.5}) for step in (5, 10, 15, 20)])
        _write_checkpoint(model_dir, 20)

    monkeypatch.setattr(worker, "_pretraining", train)
    units = _segment_units(tmp_path, (20,))
    worker.do_pretrain(units, store)
    result = store.read(units[0]["id"])
    assert result["steps_timed"] == 20
    assert [entry["step"] for entry in result["train_log"]] == [15, 20]  # from_step is 10


def test_a_run_needed_only_up_to_an_early_segment_stops_there(tmp_path, monkeypatch, sigint_at_start):
    """When only the first segment of a 20-step run is pending (its probe was lost, the rest is
    done), the worker records it and stops training instead of running on to step 20 unrecorded."""
    from paper_replication import worker
    from paper_replication.store import Store
    monkeypatch.setattr(worker, "_mark", lambda *args: None)
    monkeypatch.setattr(worker, "WATCH_SECONDS", 0.01)
    model_dir, store, trained = tmp_path / "model", Store(tmp_path / "out", tmp_path / "results"), []
    model_dir.mkdir()

    def training(hparams):
        _write_checkpoint(model_dir, 10)
        for _ in range(500):  # steps 11-20, up to 5 s
            time.sleep(0.01)
            trained.append(1)
        _write_checkpoint(model_dir, 20)

    monkeypatch.setattr(worker, "_pretraining", training)
    units = _segment_units(tmp_path, (10,))
    units[0]["params"]["hparams"]["num_train_steps"] = 20
    worker.do_pretrain(units, store)
    assert store.read(units[0]["id"])["step"] == 10 and len(trained) < 500


def test_a_failing_probe_copy_stops_training(tmp_path, monkeypatch, sigint_at_start):
    """Should recording a segment fail (say, a full disk while its probe is copied), training stops
    (as on Ctrl-C: a checkpoint after the step it is in) instead of running on unrecorded while
    the probe's checkpoint is rotated out; the worker fails with the cause."""
    from paper_replication import worker
    from paper_replication.store import Store
    monkeypatch.setattr(worker, "_mark", lambda *args: None)
    monkeypatch.setattr(worker, "WATCH_SECONDS", 0.01)

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(worker, "_copy_probe", full_disk)
    model_dir, store, trained = tmp_path / "model", Store(tmp_path / "out", tmp_path / "results"), []
    model_dir.mkdir()

    def training(hparams):
        _write_checkpoint(model_dir, 10)
        for _ in range(500):  # steps, up to 5 s
            time.sleep(0.01)
            trained.append(1)
        _write_checkpoint(model_dir, 20)

    monkeypatch.setattr(worker, "_pretraining", training)
    with pytest.raises(RuntimeError, match="training was stopped") as raised:
        worker.do_pretrain(_segment_units(tmp_path, (10, 20)), store)
    assert isinstance(raised.value.__cause__, OSError) and len(trained) < 500
    assert store.read("s1/run/pretrain/10") is None


def test_a_failure_recorded_after_training_returned_still_names_its_cause(tmp_path, monkeypatch):
    """Training can return between the watcher's failure and its interrupt landing: the worker
    still fails with the cause, not with a bare KeyboardInterrupt."""
    from paper_replication import worker
    from paper_replication.store import Store
    monkeypatch.setattr(worker, "_mark", lambda *args: None)
    monkeypatch.setattr(worker, "WATCH_SECONDS", 0.01)

    copying = threading.Event()

    def full_disk(*args):
        copying.set()
        time.sleep(0.05)  # training returns meanwhile; the interrupt lands during the join
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(worker, "_copy_probe", full_disk)
    model_dir, store = tmp_path / "model", Store(tmp_path / "out", tmp_path / "results")
    model_dir.mkdir()

    def training(hparams):
        _write_checkpoint(model_dir, 10)
        assert copying.wait(5)  # the watcher is copying the probe when training returns

    monkeypatch.setattr(worker, "_pretraining", training)
    with pytest.raises(RuntimeError, match="training was stopped") as raised:
        worker.do_pretrain(_segment_units(tmp_path, (10,)), store)
    assert isinstance(raised.value.__cause__, OSError)


def test_a_stopped_workers_time_still_counts(tmp_path, monkeypatch):
    """A pretraining worker stopped mid-segment (a session ends) leaves its spent time behind; the
    worker that finishes the segment records only its own share in the unit file, and the stage's
    time (what budgets and totals use) adds both. Training is replaced by a fake that writes the
    checkpoint files TensorFlow would; the clock is a fake that only the fake training advances."""
    from paper_replication import worker
    from paper_replication.store import Store
    clock = {"now": 100.0}
    monkeypatch.setattr(worker, "_mark", lambda *args: None)
    monkeypatch.setattr(worker, "machine_seconds", lambda: clock["now"])
    monkeypatch.setattr(worker, "WATCH_SECONDS", 0.01)
    model_dir, store = tmp_path / "model", Store(tmp_path / "out", tmp_path / "results")
    units = _segment_units(tmp_path, (10, 20))

    def checkpoint(step):
        _write_checkpoint(model_dir, step)

    def train(seconds, until_recorded=None):
        clock["now"] += seconds
        for _ in range(500):  # until the watcher has noted the time (at most 5 s)
            records = store.unrecorded(until_recorded) if until_recorded else []
            if not until_recorded or (records and records[0]["machine_seconds"] == seconds):
                return
            time.sleep(0.01)
        raise AssertionError("the watcher never recorded the worker's time")

    def stopped_after_step_15(hparams):
        train(7.0)
        checkpoint(10)
        time.sleep(0.1)  # the watcher records segment 10
        train(3.0, until_recorded="s1/run/pretrain/20")  # steps 10-15 ...
        raise KeyboardInterrupt  # ... then the session ends before ckpt-20

    model_dir.mkdir()
    monkeypatch.setattr(worker, "_pretraining", stopped_after_step_15)
    with pytest.raises(KeyboardInterrupt):
        worker.do_pretrain(units, store)
    first = store.read("s1/run/pretrain/10")
    assert (first["steps_timed"], first["machine_seconds"]) == (10, 7.0) and store.read("s1/run/pretrain/20") is None
    for root in ("out", "results"):  # both copies hold the stopped worker's record
        (path,) = (tmp_path / root / "units" / "s1" / "run" / "pretrain" / "20.unrecorded").iterdir()
        assert json.loads(path.read_text())["machine_seconds"] == 3.0
    (left,) = store.unrecorded("s1/run/pretrain/20")  # the two copies, counted once
    assert (left["from_step"], left["machine_seconds"]) == (10, 3.0)
    assert not (tmp_path / "out" / "units" / "s1" / "run" / "pretrain" / "10.unrecorded").exists()  # cleared

    monkeypatch.setattr(worker, "_pretraining", lambda hparams: (train(5.0), checkpoint(20)))
    worker.do_pretrain(units[1:], store)
    finished = store.read("s1/run/pretrain/20")
    assert (finished["steps_timed"], finished["machine_seconds"]) == (10, 5.0)
    assert [r["machine_seconds"] for r in store.unrecorded("s1/run/pretrain/20")] == [3.0]
    ctx = Context(QUICK, tmp_path / "out", tmp_path / "results", tmp_path, tmp_path)
    segments = [Unit(u["id"], "pretrain", u["params"]) for u in units]
    assert ctx.spent(segments) == 7.0 + 5.0 + 3.0
    # A record of the worker that its unit file names (committed while it ran) is not counted again.
    store.write_unrecorded("s1/run/pretrain/20", finished["worker"], {"machine_seconds": 4.0, "seconds": 4.0})
    assert [r["machine_seconds"] for r in store.unrecorded("s1/run/pretrain/20")] == [3.0]
    # Every record names the CPU, so the report can split the time by machine; older ones did not.
    assert first["cpu"] == left["cpu"] == finished["cpu"] == worker.CPU
    assert ctx.spent_by_cpu(segments) == {worker.CPU: 15.0}
    store.write_unrecorded("s1/run/pretrain/20", "20261125T000000-1-abcdef", {"machine_seconds": 2.0, "seconds": 2.0})
    assert ctx.spent_by_cpu(segments) == {worker.CPU: 15.0, "not recorded": 2.0}
    # A segment trained again elsewhere (a new machine) keeps the earlier run's time and CPU on record.
    store.write("s1/run/pretrain/10", {"machine_seconds": 9.0, "seconds": 9.0, "cpu": "other CPU", "worker": "w2"})
    assert ctx.spent_by_cpu(segments) == {worker.CPU: 15.0, "not recorded": 2.0, "other CPU": 9.0}


def test_a_segment_keeps_the_training_log_of_a_worker_stopped_inside_it(tmp_path, monkeypatch):
    """SIGTERM inside a segment leaves a checkpoint (here ckpt-15) and the next worker resumes there:
    the segment's train_log holds the stopped worker's lines up to step 15 (kept with its unrecorded
    time) and the next worker's after it. A value that is not finite is kept as None."""
    from paper_replication import worker
    from paper_replication.store import Store
    monkeypatch.setattr(worker, "_mark", lambda *args: None)
    monkeypatch.setattr(worker, "WATCH_SECONDS", 0.01)
    model_dir, store = tmp_path / "model", Store(tmp_path / "out", tmp_path / "results")
    model_dir.mkdir()
    _write_checkpoint(model_dir, 10)
    units = _segment_units(tmp_path, (20,))  # from step 10

    def log(*steps):
        _log(model_dir, [(step, {"loss": float(step), "grad_norm": float("nan")}) for step in steps])

    def stopped_at_15(hparams):
        log(12, 14)
        for _ in range(500):  # until the watcher has kept the log with the worker's time (at most 5 s)
            records = store.unrecorded("s1/run/pretrain/20")
            if records and len(records[0]["train_log"]) == 2:
                break
            time.sleep(0.01)
        _write_checkpoint(model_dir, 15)  # as SIGTERM does: a checkpoint, then the stop
        raise KeyboardInterrupt

    monkeypatch.setattr(worker, "_pretraining", stopped_at_15)
    with pytest.raises(KeyboardInterrupt):
        worker.do_pretrain(units, store)
    monkeypatch.setattr(worker, "_pretraining",
                        lambda hparams: (log(16, 18, 20), _write_checkpoint(model_dir, 20)))
    worker.do_pretrain(units, store)
    train_log = store.read("s1/run/pretrain/20")["train_log"]
    assert [entry["step"] for entry in train_log] == [12, 14, 16, 18, 20]
    assert train_log[0] == {"step": 12, "loss": 12.0, "grad_norm": None}


def test_the_cpu_description_names_the_model_and_its_vector_extension():
    from paper_replication import worker
    model, _, rest = worker.CPU.rpartition(" (")
    assert model and rest.endswith(f", {worker.CORES} cores)")
    if Path("/proc/cpuinfo").is_file():
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        flags = next(line for line in lines if line.startswith("flags")).split()
        expected = ("AVX-512 + AMX" if "amx_tile" in flags else "AVX-512" if "avx512f" in flags
                    else "AVX2" if "avx2" in flags else "no AVX2")
        assert rest == f"{expected}, {worker.CORES} cores)"


def test_a_unit_stopped_midway_leaves_its_time(tmp_path, monkeypatch):
    """The same for any other unit (a fine-tuning trial, an evaluation): a worker stopped while it
    runs one leaves the time spent; the rerun's unit file holds its own share; both count."""
    from paper_replication import worker
    clock = {"now": 50.0}
    monkeypatch.setattr(worker, "machine_seconds", lambda: clock["now"])
    monkeypatch.setattr(worker, "WATCH_SECONDS", 0.01)
    monkeypatch.setattr(worker, "_mark", lambda *args: None)
    ctx = Context(QUICK, tmp_path / "out", tmp_path / "results", tmp_path, tmp_path)
    spec = {"output_dir": str(ctx.output_dir), "results_dir": str(ctx.results_dir),
            "units": [{"id": "s1/data/vocab_learned", "kind": "vocab", "params": {}}]}

    def stopped(params, output_dir):
        clock["now"] += 4.0
        for _ in range(500):  # until the watcher has noted the time (at most 5 s)
            if [r["machine_seconds"] for r in ctx.store.unrecorded("s1/data/vocab_learned")] == [4.0]:
                raise KeyboardInterrupt  # the session ends
            time.sleep(0.01)
        raise AssertionError("the watcher never recorded the unit's time")

    monkeypatch.setitem(worker.HANDLERS, "vocab", stopped)
    with pytest.raises(KeyboardInterrupt):
        worker.run_spec(spec)
    assert ctx.result("s1/data/vocab_learned") is None
    monkeypatch.setitem(worker.HANDLERS, "vocab", lambda params, output_dir: clock.update(now=clock["now"] + 1.5) or {})
    worker.run_spec(spec)
    assert ctx.result("s1/data/vocab_learned")["machine_seconds"] == 1.5
    assert ctx.spent([Unit("s1/data/vocab_learned", "vocab", {})]) == 1.5 + 4.0


def test_the_worker_loads_every_module_its_units_import_when_it_starts():
    """A worker imports what its handlers need before its first unit, so code edited during a
    long run cannot reach it half-way (a module imported late would be the new version beside old
    ones). Guard: every module a function of worker.py imports is in UNIT_MODULES."""
    import ast
    from paper_replication import worker
    tree = ast.parse(Path(worker.__file__).read_text())
    loaded, missing = set(worker.UNIT_MODULES) | {"importlib", "numpy"}, []  # numpy: loaded by all of them
    for function in (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)):
        for node in ast.walk(function):
            if isinstance(node, ast.Import):
                missing += [alias.name for alias in node.names if alias.name not in loaded]
            elif isinstance(node, ast.ImportFrom) and node.module not in loaded:  # or each name a loaded module
                missing += [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" not in loaded]
    assert not missing, missing


def test_a_trial_whose_checkpoint_is_gone_starts_from_the_committed_export(tmp_path, monkeypatch):
    """A trial of a run's final checkpoint starts from the checkpoint where this machine has the one
    the export was made from, and from the committed float16 export where it does not (a new
    machine, or the run trained again there), saying so in its result: another CPU trains another
    model, which the earlier trials did not fine-tune."""
    import finetune.runner
    from paper_replication import worker
    from paper_replication.units import checkpoint_fingerprint
    started = []

    def run(config, stream):
        started.append(config.init_checkpoint)
        return {"trials": [{"sst": {"accuracy": 50.0}}]}

    monkeypatch.setattr(finetune.runner, "run", run)
    probe, export = tmp_path / "probes" / "run" / "ckpt-20", tmp_path / "hf" / "run"
    params = {"task": "sst", "seed": 1, "export": str(export), "exported": None,
              "hparams": {"task_names": ["sst"], "init_checkpoint": str(probe),
                          "results_dir": str(tmp_path / "ft" / "results")}}
    gone = worker.do_finetune(params, tmp_path / "out")
    assert started == [str(export)] and gone["started_from"] == "float16 export"
    probe.parent.mkdir(parents=True)
    (probe.parent / "ckpt-20.index").write_text("the exported model")
    here = worker.do_finetune(params, tmp_path / "out")  # an export recorded without its checkpoint's print
    assert started[1] == str(probe) and "started_from" not in here and here["scores"] == {"sst": {"accuracy": 50.0}}
    params["exported"] = checkpoint_fingerprint(probe)
    assert "started_from" not in worker.do_finetune(params, tmp_path / "out") and started[2] == str(probe)
    (probe.parent / "ckpt-20.index").write_text("the run trained again")
    assert worker.do_finetune(params, tmp_path / "out")["started_from"] == "float16 export"
    assert started[3] == str(export)
