"""Training state on disk: periodic checkpoints, resuming from the latest, starting from another.

A checkpoint holds the model, the optimizer (slots and step) and the input iterator, so a resumed
run continues with the very batches it would have seen. TensorFlow writes a checkpoint's files
first and updates the `checkpoint` state file last, so a run killed mid-save resumes from the
previous complete one. Under MultiWorkerMirroredStrategy every worker takes part in a save, but
only the chief's copy lands in the model dir; the others write to a scratch dir and delete it.
"""

import os
import shutil
from pathlib import Path
from typing import Optional

import tensorflow as tf
import tf_keras

from electra_tf.errors import InputError


class Checkpoints:
    """A `tf.train.CheckpointManager` over `trackables` in `model_dir` (or a worker scratch dir)."""

    def __init__(self, model_dir, chief: bool, worker_id: int, keep_checkpoint_max: Optional[int],
                 **trackables):
        self.chief = chief
        self.directory = Path(model_dir) if chief else Path(model_dir) / f".worker_{worker_id}_scratch"
        self.checkpoint = tf.train.Checkpoint(**trackables)
        # A checkpoint written by convert_checkpoint.py holds the model and optimizer only.
        self.imported = tf.train.Checkpoint(model=trackables["model"], optimizer=trackables["optimizer"])
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(self.directory),
                                                  max_to_keep=keep_checkpoint_max or None)

    @property
    def latest(self) -> Optional[str]:
        return tf.train.latest_checkpoint(str(self.directory)) if self.chief else None

    def restore_latest(self, model_dir) -> Optional[str]:
        """Restores the newest checkpoint of `model_dir` (every worker reads the chief's)."""
        path = tf.train.latest_checkpoint(str(model_dir))
        if path:
            try:
                imported = not any(name.startswith("iterator/") for name, _ in tf.train.list_variables(path))
                (self.imported if imported else self.checkpoint).restore(path).assert_existing_objects_matched()
            except (AssertionError, ValueError, tf.errors.OpError) as error:
                raise InputError(f"checkpoint {path} does not match this run (was deterministic, precision or "
                                 f"optimizer changed?): {str(error).splitlines()[0]}") from None
        return path

    def save(self, step: int) -> str:
        path = self.manager.save(checkpoint_number=step)
        if not self.chief:
            shutil.rmtree(self.directory, ignore_errors=True)
        return path


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
