"""What a fine-tuning run holds while it writes: the lock of its tasks' fine-tuned models and
scores (`electra_tf.dir_lock`), and the one-line report of a write that found the disk full
(`electra_tf.disk_full`), saying which scores are kept."""

import contextlib
from pathlib import Path
from typing import Iterator

from electra_tf import disk_full
from electra_tf.dir_lock import DirLock
from finetune.config import FinetuningConfig


@contextlib.contextmanager
def guarded(config: FinetuningConfig, chief: bool = True) -> Iterator[None]:
    """The block runs `config`'s trials: with the lock when it trains (evaluation only reads) and is
    the chief (the one writer of a multi-worker run), and with a full disk reported as one line (a
    checkpoint it was saving removed)."""
    with lock(config) if config.do_train and chief else contextlib.nullcontext(), \
            disk_full.reported(lambda: kept_on_full_disk(config)):
        yield


def lock(config: FinetuningConfig) -> DirLock:
    """The lock of `config`'s tasks in the fine-tuned models dir: a second run of the same tasks on
    the same pretrained model is refused, while another task set (other files) may run beside it."""
    models = Path(config.finetuning_models_dir)
    return DirLock(models, models / f".{config.tasks_key}.lock", f"fine-tuning ({config.tasks_key}) dir")


def kept_on_full_disk(config: FinetuningConfig) -> str:
    """What a run that met a full disk keeps, and how to go on."""
    results = Path(config.results_dir) / f"{config.tasks_key}_results.json"
    return (f"{results} keeps the scores of the trials that finished, if any; free space and run the same "
            "command again")
