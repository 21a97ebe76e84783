"""A SavedModel of a fine-tuned model that reads raw text: tokenization runs inside the graph.

Its `serving_default` is the served task's server (`Task.server`): for classification,
multi-label and regression tasks, GLUE's or a user's, raw `text_a` (and `text_b` for a pair task)
in, probabilities and the label names, or the score on the task's scale, out (`finetune.servers`);
for a tagging task sentences in, tags and entity spans out (`finetune.tagging_server`); for SQuAD
question and context in, the answer and its span out (`finetune.qa_server`). Loading it
needs `import tensorflow_text` first (its WordPiece op). As the discriminator's, it computes in
float32 or, exported with `precision` "mixed_bfloat16", in bfloat16 with float32 outputs, and says
which in its `precision` variable (`electra_tf.checkpoints.saved_model`).

The source is a trial's model dir, `finetuning_models/<tasks>_model_<trial>`: its `finetuned`
checkpoint, the run's `finetuning_config.json`, its tasks' cards (`task_cards.json`: the label
names a user task learned) and `vocab.txt` (all written by the runner). A multi-task run holds a
head per task; one of them is exported (`task`). The export keeps those three files, and the
served task's name (`served_task`), in its `assets.extra/`, so that `predict.py` reads a
SavedModel as it reads the trial's dir (`load_finetuned`): the same featurizing in Python, the
encoder's and the head's weights read from the SavedModel's variables.
"""

import json
import shutil
from pathlib import Path
from typing import Optional

import numpy as np
import tensorflow as tf

from electra_tf.checkpoints.model_dir import VOCAB_FILE, check_output, check_vocab, staged_output
from electra_tf.checkpoints.saved_model import EMBED, SIGNATURE, check_precision
from electra_tf.errors import InputError
from electra_tf.tokenization import Tokenizer
from electra_tf.training.distribution import precision_scope
from finetune.config import RUN_CONFIG, FinetuningConfig
from finetune.model import FinetuningModel
from finetune.multitask import batch_spec, complete
from finetune.runner import FINETUNED, INTERRUPTED, TASK_CARDS
from finetune.tasks import canonical_name, get_task, run_tasks

EXTRA = "assets.extra"  # a SavedModel's files beside its graph: the run's config, cards and vocab
SERVED_TASK = "served_task"  # in EXTRA: the name of the task the SavedModel serves


def is_finetuned_dir(path) -> bool:
    """Whether `path` holds a fine-tuned model (a trial's model dir) rather than a pretrained one."""
    return (Path(path) / f"{FINETUNED}.index").is_file()


def is_trial_dir(path) -> bool:
    """Whether `path` is a fine-tuning trial's model dir, finished or not, rather than a pretrained one."""
    return is_finetuned_dir(path) or (Path(path) / RUN_CONFIG).is_file()


def is_saved_model(path) -> bool:
    return (Path(path) / "saved_model.pb").is_file()


def model_files(model_dir) -> Path:
    """Where a fine-tuned model's config, cards and vocab are: the trial's dir, or a SavedModel's EXTRA."""
    return Path(model_dir) / EXTRA if is_saved_model(model_dir) else Path(model_dir)


def read_run_config(model_dir: Path) -> FinetuningConfig:
    path = model_dir / RUN_CONFIG
    if not path.is_file():
        raise InputError(f"{path} is missing: export a trial dir written by run_finetuning.py with "
                         f"keep_all_models true (finetuning_models/<tasks>_model_<trial>)")
    return FinetuningConfig.from_json_file(path)


def choose_task(config: FinetuningConfig, task: Optional[str], model_dir: Path) -> str:
    """The name of the task to serve: `task`, which the run must have trained, or the run's only task."""
    if task is None:
        if len(config.task_names) > 1:
            raise InputError(f"{model_dir} holds the tasks {', '.join(config.task_names)}: pass --task to "
                             f"choose the one to export")
        task = config.task_names[0]
    name = canonical_name(task, config.tasks)
    if name not in config.task_names:
        raise InputError(f"--task {task}: {model_dir} was fine-tuned on {', '.join(config.task_names)} only")
    return name


def read_cards(model_dir: Path) -> dict:
    """The tasks' cards saved with the model ({} for a model dir written before they were)."""
    path = model_dir / TASK_CARDS
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def load_finetuned(model_dir, task: Optional[str] = None, precision: str = "float32"):
    """(FinetuningModel with a trial's fine-tuned weights, its run's FinetuningConfig, the Task to
    serve), the model's layers computing in `precision`."""
    check_precision(precision)
    model_dir = Path(model_dir)
    if is_saved_model(model_dir):
        return _load_saved_model(model_dir, task, precision)
    if not is_finetuned_dir(model_dir):
        raise InputError(f"{model_dir} holds no fine-tuned model ({FINETUNED}.index); " + (
            "its trial stopped before it ended: run its run_finetuning.py command again to finish it"
            if (model_dir / f"{INTERRUPTED}.json").is_file() else
            "a trial's model dir is finetuning_models/<tasks>_model_<trial>, kept when keep_all_models is true"))
    config = read_run_config(model_dir)
    served = choose_task(config, task, model_dir)
    check_vocab(model_dir / VOCAB_FILE, config.vocab_size)
    tasks = run_tasks(config, read_cards(model_dir))
    with precision_scope(precision):  # the layers keep it; their variables are float32 either way
        model = FinetuningModel(config.encoder_config(), tasks, config)
    model(complete({"input_ids": np.ones([1, 3], np.int32), "input_mask": np.ones([1, 3], np.int32),
                    "segment_ids": np.zeros([1, 3], np.int32)}, batch_spec(tasks)))  # creates the variables
    try:
        tf.train.Checkpoint(finetuning_model=model).read(str(model_dir / FINETUNED)).assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as error:
        raise InputError(f"checkpoint {model_dir / FINETUNED} does not match {model_dir / RUN_CONFIG}: "
                         f"{str(error).splitlines()[0]}") from None
    return model, config, tasks[config.task_names.index(served)]


def _load_saved_model(model_dir: Path, task: Optional[str], precision: str):
    """`load_finetuned` of a SavedModel that `export_finetuned` wrote: a model of the served task alone."""
    served_file = model_dir / EXTRA / SERVED_TASK
    if not served_file.is_file():
        raise InputError(f"{model_dir} is a SavedModel without a fine-tuned task ({EXTRA}/{SERVED_TASK}): the "
                         f"discriminator's, or exported before predict read SavedModels; give the trial's model dir, "
                         f"or export it again with convert_checkpoint.py saved-model")
    config, served_task = read_served(model_dir / EXTRA)
    served = served_task.name
    if task is not None and task != served and not _names(task, served, config):
        raise InputError(f"--task {task}: {model_dir} is a SavedModel of task {served} (a {served_task.type_name} "
                         f"task) only; export the trial's dir with --task {task} to predict {task}")
    with precision_scope(precision):
        model = FinetuningModel(config.encoder_config(), [served_task], config)
    model(complete({"input_ids": np.ones([1, 3], np.int32), "input_mask": np.ones([1, 3], np.int32),
                    "segment_ids": np.zeros([1, 3], np.int32)}, batch_spec([served_task])))  # creates the variables
    model.encoder.freeze_qkv()  # the export's encoder holds Q/K/V as one variable
    variables = model_dir / "variables" / "variables"
    try:
        tf.train.Checkpoint(encoder=model.encoder, head=model.head_of(served)).read(
            str(variables)).assert_existing_objects_matched().expect_partial()  # not the server's own
    except (AssertionError, ValueError, tf.errors.OpError) as error:
        raise InputError(f"SavedModel {model_dir} does not match its {EXTRA}/{RUN_CONFIG}: "
                         f"{str(error).splitlines()[0]}") from None
    return model, config, served_task


def copy_model_files(model_dir, directory: Path, served: str) -> None:
    """Writes into `directory` what featurizing needs beside the weights: the trial's run config,
    task cards and vocab, and the name of the served task (`read_served` reads them back)."""
    directory.mkdir(exist_ok=True)
    source = model_files(model_dir)  # a trial's dir, or a SavedModel's EXTRA
    for name in (RUN_CONFIG, TASK_CARDS, VOCAB_FILE):
        if (source / name).is_file():
            shutil.copyfile(source / name, directory / name)
    (directory / SERVED_TASK).write_text(served + "\n", encoding="utf-8")


def read_served(directory: Path):
    """(the run's FinetuningConfig, the served Task) from the files `copy_model_files` wrote."""
    config = read_run_config(directory)
    served_file = directory / SERVED_TASK
    if not served_file.is_file():
        raise InputError(f"{served_file} is missing: an export names the task it serves there; "
                         f"write the export again with convert_checkpoint.py")
    served = served_file.read_text(encoding="utf-8").strip()
    check_vocab(directory / VOCAB_FILE, config.vocab_size)
    return config, get_task(served, config.tasks, config.raw_data_dir, read_cards(directory).get(served))


def _names(task: str, served: str, config: FinetuningConfig) -> bool:
    """Whether --task `task` names the task `served` (its own name or, for a built-in task, another)."""
    try:
        return canonical_name(task, config.tasks) == served
    except InputError:
        return False


def build_server(model_dir, task: Optional[str] = None, precision: str = "float32") -> tf.Module:
    """The served task's server on a trial's model dir, its fine-tuned weights restored, computing
    in `precision`."""
    model, config, served = load_finetuned(model_dir, task, precision)
    model.encoder.freeze_qkv()
    tokenizer = Tokenizer.of_config(model_files(model_dir) / VOCAB_FILE, config)
    return served.server(tokenizer, model, config, precision)


def export_finetuned(model_dir, output_dir, task: Optional[str] = None, overwrite: bool = False,
                     precision: str = "float32") -> tf.Module:
    """Writes a trial's fine-tuned model (for `task`) as a SavedModel computing in `precision`; returns
    the server it saved."""
    check_precision(precision)  # before reading the checkpoint
    check_output(output_dir, overwrite)
    server = build_server(model_dir, task, precision)
    with staged_output(output_dir, overwrite, source=model_dir) as staging:
        tf.saved_model.save(server, str(staging), signatures={SIGNATURE: server.serve, EMBED: server.embed})
        copy_model_files(model_dir, staging / EXTRA, server.task.name)
    return server
