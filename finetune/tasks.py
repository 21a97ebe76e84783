"""Every task a run can name: the built-in presets and the user's tasks of its `tasks` hparam.

`get_task(name, config, card)` is the one place a task name becomes a `finetune.task.Task`; the
runner, the task data, the model builder and the SavedModel export take tasks from it and speak
to them through the interface alone.
"""

import re
from typing import Callable, Dict, List, Optional

from electra_tf.errors import InputError
from electra_tf.layerwise_decay import EMBEDDING_SCOPES
from finetune import chunking, glue, squad
from finetune.chunk_preset import ChunkPreset
from finetune.glue_presets import glue_preset
from finetune.squad_task import SquadTask
from finetune.task import Task
from finetune.task_specs import build_task, check_spec

# the original's name -> the preset, given the run's finetuning_data dir and a model's card
BUILT_IN: Dict[str, Callable[[Optional[str], dict], Task]] = {
    **{name: (lambda root, card, name=name: SquadTask(name)) for name in squad.TASKS},
    chunking.TASK_NAME: lambda root, card: ChunkPreset(root, card.get("tags")),
    **{name: (lambda root, card, name=name: glue_preset(name)) for name in glue.TASKS},
}


def is_built_in(name: str) -> bool:
    try:
        glue.canonical_task_name(name)
    except InputError:
        return False
    return True


def canonical_name(name: str, user_tasks: dict) -> str:
    """A user task's own name, or the original's name of a built-in one (InputError if neither)."""
    if isinstance(name, str) and name in user_tasks:
        return name
    try:
        return glue.canonical_task_name(name)
    except InputError as error:
        defined = f"; the tasks defined under \"tasks\": {', '.join(user_tasks)}" if user_tasks else \
            " (or define your own under \"tasks\": docs/finetuning.md)"
        raise InputError(f"{error}{defined}") from None


def check_user_tasks(user_tasks) -> None:
    """Each user task's spec is valid and its name is not a built-in task's."""
    if not isinstance(user_tasks, dict):
        raise InputError("tasks must be an object mapping task names to their specs")
    for name, spec in user_tasks.items():
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise InputError(f"tasks.{name}: a task name is letters, digits, '_', '-' and '.' (it names files "
                             f"and the head's variables)")
        if name in EMBEDDING_SCOPES:
            raise InputError(f"tasks.{name}: {name!r} names a part of the encoder (layer-wise decay finds it in "
                             f"variable names); give your task another name")
        if is_built_in(name):
            raise InputError(f"tasks.{name}: {name!r} is a built-in task's name; give your task another name")
        check_spec(name, spec)


def get_task(name: str, user_tasks: Optional[dict] = None, root: Optional[str] = None,
             card: Optional[dict] = None) -> Task:
    """The task `name`: a built-in one, or one of `user_tasks` ({name: spec}) with its files under
    `root` (the run's finetuning_data dir); `card` is a fine-tuned model's record of the task
    (its labels or tags), so that a model predicts without its train file."""
    user_tasks = user_tasks or {}
    name = canonical_name(name, user_tasks)
    if name in user_tasks:
        return build_task(name, user_tasks[name], root, card)
    return BUILT_IN[name](root, card or {})


def run_tasks(config, cards: Optional[Dict[str, dict]] = None) -> List[Task]:
    """The tasks of a FinetuningConfig, in `task_names` order (with their cards, when given)."""
    cards = cards or {}
    return [get_task(name, config.tasks, config.raw_data_dir, cards.get(name)) for name in config.task_names]
