"""Training state on disk: periodic checkpoints, resuming from the latest, starting from another.

A checkpoint holds the model, the optimizer (slots and step) and the input iterator, so a resumed
run continues with the very batches it would have seen. TensorFlow writes a checkpoint's files
first and updates the `checkpoint` state file last, so a run killed mid-save resumes from the
previous complete one; a checkpoint whose files were damaged afterwards (a bad disk, a partial
copy) is skipped on resume in favour of the newest intact one. Under MultiWorkerMirroredStrategy
every worker takes part in a save, but only the chief's copy lands in the model dir; the others
write to a scratch dir and delete it.

A save that finds the disk full removes what it had written (`<prefix>_temp/`, and the new
checkpoint's files, which the `checkpoint` state file does not list yet) and raises `DiskFull`
naming the newest intact checkpoint; older checkpoints are deleted (`keep_checkpoint_max`) only
after a save completes, so the one to resume from is never lost. A resumed run first removes the
`_temp` dirs that killed runs left in its model dir.
"""

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, List, Optional

import tensorflow as tf
import tf_keras

from electra_tf import atomic_files, disk_full
from electra_tf.training import distribution
from electra_tf.errors import InputError


def holds_data_reader(path: str) -> bool:
    """Whether a checkpoint holds the input iterator's state: a training run's does, an imported
    checkpoint's (model and optimizer alone) does not. A damaged checkpoint raises."""
    return any(name.startswith("iterator/") for name, _ in tf.train.list_variables(path))


class Checkpoints:
    """A `tf.train.CheckpointManager` over `trackables` in `model_dir` (or a worker scratch dir).

    `restore_latest` runs first: it restores the newest intact checkpoint of the model dir, and
    the manager is made afterwards, so that it lists only the checkpoints that remain valid."""

    def __init__(self, model_dir, chief: bool, worker_id: int, keep_checkpoint_max: Optional[int],
                 **trackables):
        self.chief, self.model_dir, self.keep_checkpoint_max = chief, Path(model_dir), keep_checkpoint_max
        self.directory = self.model_dir if chief else self.model_dir / f".worker_{worker_id}_scratch"
        self.checkpoint = tf.train.Checkpoint(**trackables)
        # A checkpoint written by convert_checkpoint.py holds the model and optimizer only.
        self.imported = tf.train.Checkpoint(model=trackables["model"], optimizer=trackables["optimizer"])
        self.manager = None
        self.saved_step = None

    @property
    def latest(self) -> Optional[str]:
        """The model dir's newest checkpoint (the chief's, also seen from the other workers)."""
        return tf.train.latest_checkpoint(str(self.model_dir))

    def restore_latest(self, report: Callable[[str], None]) -> Optional[str]:
        """Restores the newest intact checkpoint of the model dir (every worker reads the chief's).

        A checkpoint whose files are damaged or missing is skipped, with a line to `report` naming
        it and the reader's complaint, and the chief drops it from the `checkpoint` state file. A
        checkpoint that is intact but does not fit the model is an error, as is a model dir whose
        checkpoints are all damaged."""
        if self.chief:  # the model dir's lock is held: no other process is saving there
            disk_full.remove_stale_temp_dirs(self.model_dir)
        candidates = _listed_checkpoints(self.model_dir)
        skipped = []
        restored = None
        for path in reversed(candidates):
            try:
                imported = not holds_data_reader(path)
                (self.imported if imported else self.checkpoint).restore(path).assert_existing_objects_matched()
            except (AssertionError, ValueError, IndexError, tf.errors.OpError) as error:
                damage = damaged(path)
                if damage is None:
                    raise InputError(f"checkpoint {path} does not match this run (was deterministic, precision or "
                                     f"optimizer changed?): {str(error).splitlines()[0]}") from None
                report(f"skipping checkpoint {path}: its files are damaged ({damage})")
                skipped.append(f"{Path(path).name} ({damage})")
                continue
            restored = path
            break
        if skipped and restored is None:
            raise InputError(f"no intact checkpoint in {self.model_dir}: {'; '.join(skipped)}. Restore the files "
                             "from a copy, or delete them (and the `checkpoint` file) to train from the start")
        if skipped and self.chief:
            _write_checkpoint_state(self.model_dir, candidates[:candidates.index(restored) + 1])
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(self.directory),
                                                  max_to_keep=self.keep_checkpoint_max or None)
        return restored

    def path(self, step: int) -> str:
        """Where the chief saves the checkpoint of `step`."""
        return str(self.model_dir / f"ckpt-{step}")

    def save(self, step: int) -> str:
        """Saves the state at `step` (once: a second call for the same step does nothing)."""
        if step == self.saved_step:
            return self.latest
        try:
            path = self.manager.save(checkpoint_number=step)
        except Exception as error:
            if not disk_full.is_no_space(error):
                raise
            prefix = self.directory / f"ckpt-{step}"
            failure = disk_full.disk_full(prefix, resume_point(self.model_dir))
            # unlisted files of this step are the failed save's own (listed ones: an earlier complete save)
            disk_full.remove_unfinished_checkpoint(prefix, str(prefix) not in _listed_checkpoints(self.directory))
            raise failure from None
        self.saved_step = step
        if not self.chief:
            shutil.rmtree(self.directory, ignore_errors=True)
        return path


class WorkerFiles:
    """Where this process writes: the chief (or the only process) to the run's own paths, another
    worker of a multi-worker run to a scratch dir of its own, removed by `close`.

    TensorFlow needs every worker to take part in a checkpoint save (a variable synchronised on
    read is reduced across the workers as it is written), but only one copy may land; and two
    workers writing the same results file would race."""

    def __init__(self, strategy: tf.distribute.Strategy):
        self.chief = distribution.is_chief(strategy)
        self.scratch = None if self.chief else Path(tempfile.mkdtemp(prefix="electra_worker_"))
        self._barrier = None
        if distribution.num_workers(strategy) > 1:  # an all-reduce of nothing, compiled once
            self._barrier = tf.function(lambda: strategy.reduce(
                tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None), autograph=False)

    def barrier(self) -> None:
        """Returns once every worker got here (at once with one): what one wrote, all may read."""
        if self._barrier is not None:
            self._barrier()

    def results_dir(self, results_dir) -> str:
        """`results_dir` for the chief, a scratch dir for the others (what they write there is dropped)."""
        return str(results_dir) if self.chief else str(self.scratch / "results")

    def write_checkpoint(self, checkpoint: tf.train.Checkpoint, prefix) -> str:
        """`checkpoint.write(prefix)` on the chief, into scratch (then deleted) on the others; returns
        `prefix`, the copy that any worker may read once every worker has returned."""
        if self.chief:
            checkpoint.write(str(prefix))
        else:
            copy = self.scratch / "checkpoint"
            checkpoint.write(str(copy / Path(prefix).name))
            shutil.rmtree(copy)
        self.barrier()
        return str(prefix)

    def close(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def resume_point(model_dir) -> str:
    """What a run of `model_dir` that stops now keeps, and how to go on: for error messages."""
    latest = tf.train.latest_checkpoint(str(model_dir))
    if latest is None:
        return "no checkpoint was saved yet: free space and run the same command to start again"
    return f"the newest intact checkpoint is {latest}: free space and run the same command to resume from it"


def damaged(prefix: str) -> Optional[str]:
    """What is wrong with a checkpoint's files (unreadable index, missing or short data file, a
    tensor whose checksum fails), by reading every tensor; None when they are intact."""
    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (IndexError, ValueError, tf.errors.OpError) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return message.split("}} ")[-1].split(" [Op:")[0]
    return None


def _listed_checkpoints(model_dir: Path) -> List[str]:
    """The checkpoints the `checkpoint` state file of `model_dir` lists, oldest first."""
    state = tf.train.get_checkpoint_state(str(model_dir))
    if state is None:
        return []
    paths = list(state.all_model_checkpoint_paths)
    if state.model_checkpoint_path and state.model_checkpoint_path not in paths:
        paths.append(state.model_checkpoint_path)
    return [path if os.path.isabs(path) else str(model_dir / path) for path in paths]


def _write_checkpoint_state(model_dir: Path, paths: List[str]) -> None:
    """Rewrites the `checkpoint` state file to list `paths` (the last is the latest), atomically."""
    lines = [f'model_checkpoint_path: "{Path(paths[-1]).name}"']
    lines += [f'all_model_checkpoint_paths: "{Path(path).name}"' for path in paths]
    atomic_files.write_text(model_dir / "checkpoint", "\n".join(lines) + "\n")


def resolve_checkpoint(path: str) -> str:
    """A checkpoint prefix from a prefix or a directory (its latest checkpoint)."""
    if os.path.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise InputError(f"init_checkpoint {path}: directory holds no checkpoint")
        return latest
    if not tf.io.gfile.exists(path + ".index"):
        raise InputError(f"init_checkpoint {path}: no such checkpoint ({path}.index not found)")
    return path


def load_init_checkpoint(path: str, model, optimizer, reset_step: bool) -> str:
    """Starts from another run's weights: the model only (step 0), or with the optimizer's slots
    and step when `reset_step` is false. Variables missing from the checkpoint are an error."""
    prefix = resolve_checkpoint(path)
    trackables = {"model": model} if reset_step else {"model": model, "optimizer": optimizer}
    try:
        tf.train.Checkpoint(**trackables).read(prefix).assert_existing_objects_matched().expect_partial()
    except (AssertionError, ValueError, tf.errors.OpError) as error:
        raise InputError(f"init_checkpoint {prefix} does not match this model: {str(error).splitlines()[0]}") from None
    return prefix


def dropout_generators(model) -> list:
    """The random generators behind the model's Dropout layers, created now so that checkpoints
    hold them and a resumed deterministic run continues the same dropout masks.

    They exist only after `distribution.set_determinism(..., deterministic=True)` (tf_keras then
    gives each Dropout its own `tf.random.Generator`); tf_keras creates them lazily and does not
    track them, hence the reach into its `_random_generator`.
    """
    generators = []
    for layer in model.submodules:
        if isinstance(layer, tf_keras.layers.Dropout):
            layer._random_generator._maybe_init()
            if layer._random_generator._generator is not None:
                generators.append(layer._random_generator._generator)
    return generators
