"""Runs lists of units in one process (TensorFlow is imported once), writing each one's result.

    echo SPEC.json | python -m paper_replication.worker

Each line of input names a SPEC, run in turn; `@@idle` follows each. SPEC: {"output_dir",
"results_dir", "clock" (machine or wall; machine if absent), "quick" (grappler off), "units":
[{"id", "kind", "params"}, ...]}. Each unit prints `@@start <id>` and `@@end <id> <seconds>` for the
runner, which relays them as progress lines; everything else goes to the stage's log. A
pretraining run completes all its listed segments in one go: a watcher thread copies each probe
checkpoint aside as soon as TensorFlow has written it (before `keep_checkpoint_max` would delete
it) and records the segment; should that fail, training stops after the step it is in.
"""

import _thread
import contextlib
import importlib
import json
import os
import shutil
import signal
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

from electra_tf import atomic_files
from electra_tf.cli import use_pooled_cpu_allocator, use_tf_keras_only
from paper_replication.store import Store
from paper_replication.units import checkpoint_fingerprint, cpu_description, latest_checkpoint_step

WATCH_SECONDS = 2.0  # how often a pretraining worker records its segments and its time
CORES = os.cpu_count() or 1
WALL_CLOCK = False  # set from the spec (--clock wall): a dedicated machine, e.g. with a GPU
IDLE = "@@idle"  # after each spec's units: the runner may send the next


CPU = cpu_description(CORES)


def machine_seconds() -> float:
    """This process's CPU time (its finished children's included) over the machine's cores: the wall
    time its work would take on the machine alone. Budgets and the cap count these, so a shared
    machine does not shrink them. With WALL_CLOCK, wall seconds instead: where a GPU does the work,
    CPU time says little about it."""
    if WALL_CLOCK:
        return time.monotonic()
    times = os.times()
    return (times.user + times.system + times.children_user + times.children_system) / CORES


class Stopwatch:
    """Wall and machine seconds since it was started or last restarted, and the CPU they were spent
    on: what a unit's time is."""

    def __init__(self):
        self.restart()

    def restart(self) -> None:
        self.wall, self.machine = time.monotonic(), machine_seconds()

    def elapsed(self) -> dict:
        return {"seconds": time.monotonic() - self.wall, "machine_seconds": machine_seconds() - self.machine,
                "cpu": CPU}


def _say(line: str) -> None:
    """One write per line: the runner reads markers from a pipe that TensorFlow's C++ logging shares."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _mark(event: str, unit_id: str, seconds: float = 0.0) -> None:
    _say(f"@@{event} {unit_id} {seconds:.1f}")


def _links(directory: Path, files) -> Path:
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    for path in files:
        (directory / Path(path).name).symlink_to(path)
    return directory


def do_vocab(params: dict, output_dir: Path) -> dict:
    from pretrain_data.vocab_learning import VocabOptions, build_vocab
    corpus = _links(output_dir / "data" / "corpus_train", params["corpus"])
    summary = build_vocab(VocabOptions(corpus=[str(corpus)], output=params["output"], vocab_size=params["vocab_size"],
                                       input_format="wikiextractor", max_lines=params.get("max_lines"),
                                       overwrite=True, quiet=True))
    shutil.copyfile(params["output"], output_dir / "data" / Path(params["output"]).name)  # see Context.vocab_file
    return {k: v for k, v in summary.items() if isinstance(v, (int, float, str))}


def do_build(params: dict, output_dir: Path) -> dict:
    from pretrain_data.build import BuildOptions, build_pretraining_dataset
    stats = {}
    for split, files in (("train", params["train_files"]), ("eval", params["held_out_files"])):
        corpus = _links(output_dir / "data" / f"corpus_{split}", files)
        built = build_pretraining_dataset(BuildOptions(
            str(corpus), params["vocab_file"], str(Path(params["output_dir"]) / split),
            max_seq_length=params["max_seq_length"], input_format="wikiextractor", overwrite=True, quiet=True,
            sentence_rules="english"))  # the rule every run so far trained on: the same examples for all
        stats[split] = {"examples": built["train"]["examples"], "tokens": built["train"]["tokens"],
                        "files": len(files), "megabytes": built.get("megabytes")}
    return stats


def _pretraining(hparams: dict):
    """Trains / evaluates a PretrainingConfig of `hparams`; returns the results dict."""
    from electra_tf.config import PretrainingConfig
    from electra_tf.training import pretraining_runner
    from pretrain_data.input_pipeline import check_pretraining_data, pretraining_dataset_fns
    config = PretrainingConfig.from_hparams(Path(hparams["model_dir"]).name, hparams["model_dir"], hparams)
    check_pretraining_data(config)
    train_fn, eval_fn = pretraining_dataset_fns(config)
    return pretraining_runner.run(config, train_fn, eval_fn, pretraining_runner.special_ids(config), sys.stdout).results


def do_throughput(params: dict, output_dir: Path) -> dict:
    """The step's speed on the machine alone: the library's examples/s at each logged step but the
    first (whose interval holds the tracing), in wall seconds, times the run's wall over machine
    seconds (a machine shared with other work shrinks the first, not the second)."""
    from paper_replication.training_log import TrainingLog
    hparams = params["hparams"]
    shutil.rmtree(hparams["model_dir"], ignore_errors=True)
    log, stopwatch = TrainingLog(hparams["model_dir"]), Stopwatch()
    _pretraining(hparams)
    spent = stopwatch.elapsed()
    to_machine = spent["seconds"] / spent["machine_seconds"]
    rates = [values["examples_per_second"] * to_machine / hparams["train_batch_size"]
             for _, values in log.points()[1:]]
    examples = statistics.median(rates) * hparams["train_batch_size"]
    shutil.rmtree(hparams["model_dir"], ignore_errors=True)
    return {"examples_per_machine_second": examples, "tokens_per_machine_second": examples * hparams["max_seq_length"],
            "objective": hparams["objective"], "steps_per_machine_second": rates, "cores": CORES}


def _checkpoint_written(model_dir: Path, step: int) -> bool:
    state = model_dir / "checkpoint"
    return (model_dir / f"ckpt-{step}.index").exists() and state.exists() and f'"ckpt-{step}"' in state.read_text()


def _copy_probe(model_dir: Path, step: int, probe: Path) -> None:
    """ckpt-<step> with the run's config.json and vocab.txt into the probe dir; the .index last."""
    probe.parent.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "vocab.txt"):
        shutil.copyfile(model_dir / name, probe.parent / name)
    for source in sorted(model_dir.glob(f"ckpt-{step}.data-*")) + [model_dir / f"ckpt-{step}.index"]:
        atomic_files.copy_file(source, probe.parent / source.name)


def _worker_name() -> str:
    """Names one worker's time records: start time, pid and a random suffix (unique per call)."""
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@contextlib.contextmanager
def _recording_time(store: Store, unit_id: str):
    """Keeps the unit's unrecorded-time record current (every WATCH_SECONDS) while the block runs,
    so a worker stopped mid-unit leaves its time behind; yields the worker's name for the unit file
    and the stopwatch whose time the record holds, and clears the record once the block has
    completed (the unit file then holds the time)."""
    worker, stopwatch = _worker_name(), Stopwatch()
    stop = threading.Event()

    def note():
        store.write_unrecorded(unit_id, worker, stopwatch.elapsed())

    def watch():
        while not stop.wait(WATCH_SECONDS):
            note()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield worker, stopwatch
    except BaseException:
        stop.set()
        watcher.join()
        note()  # the unit failed or was interrupted: its time so far stays on record
        raise
    stop.set()
    watcher.join()
    store.clear_unrecorded(unit_id, worker)


@contextlib.contextmanager
def _sigint_raises():
    """Makes SIGINT Python's within: the watcher stops training with `_thread.interrupt_main`, which
    does nothing while SIGINT is ignored, as it is in a process started with `nohup ... &`."""
    previous = signal.getsignal(signal.SIGINT)
    if callable(previous):  # Python's already (the default KeyboardInterrupt or training's own handler)
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def do_pretrain(units: list, store: Store) -> None:
    """Runs the units' pretraining run to its end, recording each segment when its probe is copied."""
    from paper_replication.training_log import TrainingLog
    hparams = units[0]["params"]["hparams"]
    model_dir = Path(hparams["model_dir"])
    pending = sorted(units, key=lambda u: u["params"]["step"])
    resumed = latest_checkpoint_step(model_dir)
    for unit in pending:
        step = unit["params"]["step"]
        if resumed > step and not _checkpoint_written(model_dir, step):
            raise RuntimeError(f"{unit['id']}: {model_dir} is past step {step} and its checkpoint is gone; "
                               f"delete {model_dir} to pretrain this run again")
    stopwatch, state = Stopwatch(), {"from": resumed}  # the time and first step of the segment being trained
    worker = _worker_name()
    log = TrainingLog(model_dir)
    _mark("start", pending[0]["id"])

    def collect():
        while pending and _checkpoint_written(model_dir, pending[0]["params"]["step"]):
            unit = pending.pop(0)
            params, step = unit["params"], unit["params"]["step"]
            _copy_probe(model_dir, step, Path(params["probe"]))
            spent = stopwatch.elapsed()
            seconds, machine = spent["seconds"], spent["machine_seconds"]
            steps = max(0, step - state["from"])  # 0: checkpointed before this worker; from 0 on a new machine
            tokens = steps * params["tokens_per_step"]
            # the segment's training log: what stopped workers logged up to this one's start, then its own
            earlier = {entry["step"]: entry for record in store.unrecorded(unit["id"])
                       for entry in record.get("train_log", []) if params["from_step"] < entry["step"] <= state["from"]}
            # its own lines of the segment: on a new machine it trained the earlier segments again, whose
            # recorded logs come from the first training, so their steps are not repeated here
            first = max(state["from"], params["from_step"])
            store.write(unit["id"], {
                **spent, "step": step, "steps_timed": steps,
                "tokens_per_second": tokens / seconds if steps > 0 < seconds else None,
                "tokens_per_machine_second": tokens / machine if steps > 0 < machine else None,
                "flops": step * params["flops_per_step"], "worker": worker,
                "train_log": [earlier[k] for k in sorted(earlier)]
                             + [entry for entry in log.entries() if first < entry["step"] <= step]})
            store.clear_unrecorded(unit["id"], worker)  # its time is in the unit file now
            _mark("end", unit["id"], seconds)
            stopwatch.restart()
            state["from"] = max(state["from"], step)
            if pending:
                _mark("start", pending[0]["id"])
        if pending:  # this worker's time and log on the segment so far, kept should it be stopped before the end
            store.write_unrecorded(pending[0]["id"], worker, {
                "from_step": state["from"], **stopwatch.elapsed(),
                "train_log": [entry for entry in log.entries()
                              if entry["step"] > max(state["from"], pending[0]["params"]["from_step"])]})

    stop, failed, needed_no_more = threading.Event(), [], []

    def watch():
        try:
            while not stop.wait(WATCH_SECONDS):
                collect()
                if not pending and state["from"] < hparams["num_train_steps"]:
                    # every needed segment is recorded (a new machine may need only early ones): stop
                    # here rather than train the rest of the run on time no unit records
                    needed_no_more.append(True)
                    _thread.interrupt_main()
                    return
        except BaseException as error:  # say, copying a probe: stop training before its checkpoint is rotated out
            failed.append(error)
            _thread.interrupt_main()  # as Ctrl-C: a checkpoint after the step it is in, then a stop

    collect()
    if pending:
        watcher = threading.Thread(target=watch, daemon=True)
        with _sigint_raises():
            watcher.start()
            try:
                try:
                    _pretraining(hparams)
                finally:
                    stop.set()
                    watcher.join()
            except BaseException:  # the watcher's interrupt may land after training returned, during the join
                if not (failed or needed_no_more):
                    raise
        if failed:
            raise RuntimeError(f"recording a segment of {model_dir} failed, so training was stopped") from failed[0]
        collect()
    if pending:
        raise RuntimeError(f"the run ended without checkpoints at steps {[u['params']['step'] for u in pending]}")


def do_eval(params: dict, output_dir: Path) -> dict:
    shutil.rmtree(params["hparams"]["model_dir"], ignore_errors=True)
    return {"step": params["step"], "flops": params["flops"], "metrics": _pretraining(params["hparams"])}


def do_finetune(params: dict, output_dir: Path) -> dict:
    """One trial, from the checkpoint, or from its committed float16 export where this machine does
    not have the checkpoint the export was made from (`units.finetune_units`); the result says which."""
    import tf_keras
    from finetune.config import FinetuningConfig
    from finetune.runner import run
    hparams, start = params["hparams"], {}
    if params.get("export"):
        here = checkpoint_fingerprint(hparams["init_checkpoint"])
        exported = params.get("exported") or here  # unknown for an export recorded before it was kept
        if here is None or here != exported:  # gone, or trained again since the export
            hparams, start = {**hparams, "init_checkpoint": params["export"]}, {"started_from": "float16 export"}
    scratch = Path(hparams["results_dir"]).parent
    shutil.rmtree(scratch, ignore_errors=True)
    document = run(FinetuningConfig.from_hparams("replication", str(output_dir), hparams), stream=sys.stdout)
    shutil.rmtree(scratch, ignore_errors=True)
    tf_keras.backend.clear_session()
    return {"task": params["task"], "seed": params["seed"], "scores": document["trials"][0], **start}


def do_export(params: dict, output_dir: Path) -> dict:
    """The final discriminator (for bert, its MLM model) as an HF dir in float16; kept only if under 20 MB."""
    from electra_tf.checkpoints import hf, model_dir
    probe = Path(params["probe"])
    config, values = model_dir.read_model_dir(probe.parent, str(probe))
    staging = output_dir / "export" / params["run"]
    shutil.rmtree(staging, ignore_errors=True)
    hf.export_hf(values, config, probe.parent / "vocab.txt", staging, dtype="float16")
    role = "discriminator" if (staging / "discriminator").is_dir() else "generator"  # bert: its MLM model
    discriminator = staging / role
    size = sum(p.stat().st_size for p in discriminator.iterdir())
    target = Path(params["output"])
    if size < 20e6:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(discriminator, target)
    # a committed export's path is relative to the results dir, where this record is committed too
    return {"role": role, "bytes": size, "committed": size < 20e6, "probe_sha256": checkpoint_fingerprint(probe),
            "path": str(target.relative_to(target.parents[1]) if size < 20e6 else discriminator)}


HANDLERS = {"vocab": do_vocab, "build": do_build, "throughput": do_throughput, "eval": do_eval,
            "finetune": do_finetune, "export": do_export}
# Every module the handlers import, loaded when the worker starts: a worker runs for hours, and a
# module first imported midway would be the code on disk by then, mixed with what it loaded
# before (a run once failed so: `cannot import name` after an edit). One worker, one version.
UNIT_MODULES = ("electra_tf.checkpoints.hf", "electra_tf.checkpoints.model_dir", "electra_tf.config",
                "electra_tf.training.pretraining_runner", "paper_replication.training_log", "finetune.config",
                "finetune.runner", "pretrain_data.build", "pretrain_data.input_pipeline", "pretrain_data.vocab_learning",
                "safetensors.numpy", "tensorflow", "tf_keras")


def run_spec(spec: dict) -> None:
    """Runs the spec's units in order (a pretraining run's consecutive segments together)."""
    global WALL_CLOCK
    WALL_CLOCK = spec.get("clock") == "wall"
    if spec.get("quick"):  # tiny units: grappler's time per function is more than it saves
        import tensorflow as tf
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    output_dir = Path(spec["output_dir"])
    store = Store(output_dir, spec["results_dir"])
    units = spec["units"]
    index = 0
    while index < len(units):
        unit = units[index]
        if unit["kind"] == "pretrain":  # the run's consecutive segments together
            group = [unit]
            while (index + len(group) < len(units) and units[index + len(group)]["kind"] == "pretrain"
                   and units[index + len(group)]["params"]["run"] == unit["params"]["run"]):
                group.append(units[index + len(group)])
            do_pretrain(group, store)
            index += len(group)
            continue
        _mark("start", unit["id"])
        with _recording_time(store, unit["id"]) as (worker, stopwatch):
            result = HANDLERS[unit["kind"]](unit["params"], output_dir)
            spent = stopwatch.elapsed()
            store.write(unit["id"], {**result, **spent, "worker": worker})
        _mark("end", unit["id"], spent["seconds"])
        index += 1


def main() -> int:
    """Runs the spec whose path arrives on each line of stdin, answering IDLE when it is done; ends
    at the end of input. A failed unit ends the process with its traceback."""
    use_tf_keras_only()  # as the scripts, before the imports below
    use_pooled_cpu_allocator()
    for module in UNIT_MODULES:
        importlib.import_module(module)
    for line in iter(sys.stdin.readline, ""):
        run_spec(json.loads(Path(line.strip()).read_text()))
        _say(IDLE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
