"""This project's model dirs (what run_pretraining.py writes): read their weights, write new ones.

A model dir holds `config.json` (the effective PretrainingConfig), `vocab.txt` and TF2
object-based checkpoints `ckpt-<step>` of `tf.train.Checkpoint(model=PretrainingModel,
optimizer=..., ...)`. A dir written here holds the model and the optimizer (its `adam_m` /
`adam_v` slots and `iterations`, the original's global_step), so `run_pretraining.py` continues
from it (`init_checkpoint`, or resuming in place) and fine-tuning starts from its `electra/*`.
"""

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Dict, Iterator, NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tf_keras

from electra_tf.config import PretrainingConfig, has_discriminator_mlm_head
from electra_tf import disk_full
from electra_tf.errors import InputError
from electra_tf.optimization import create_optimizer, create_slots
from electra_tf.pretraining import PretrainingModel
from electra_tf.tokenization import continuation_ids, load_vocab, special_ids
from electra_tf.checkpoints.original import read_checkpoint
from electra_tf.checkpoints.report import GLOBAL_STEP, LoadReport, assign_weights, variable_name

CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.txt"
INITIALISED_FILE = "initialised.json"  # an import's variables that its source lacked: {"step", "variables"}
# Variables a pretraining model must get from any source. The generator may be absent (e.g. an
# HF discriminator download): it then starts as initialised, listed as missing; but a generator
# that is there must be complete.
REQUIRED = ("electra/", "discriminator_predictions/")
OPTIONAL = ("generator/", "generator_predictions/")
# replace_mlm / all_tokens_mlm: their discriminator's MLM head instead; the replaced-token head
# (unused, or the copy gate) is optional, as HF's ElectraForMaskedLM drops it when it saves.
REQUIRED_WITH_MLM_HEAD = ("electra/", "discriminator_mlm_predictions/")
OPTIONAL_WITH_MLM_HEAD = OPTIONAL + ("discriminator_predictions/",)


class Built(NamedTuple):
    model: PretrainingModel
    optimizer: object  # AdamWeightDecay or Lamb (legacy tf_keras optimizers)
    tracked_optimizer: object  # what the run checkpoints: the optimizer, or its loss-scale wrapper


def is_model_dir(path) -> bool:
    path = Path(path)
    return path.is_dir() and (path / CONFIG_FILE).is_file() and (path / "checkpoint").is_file()


def check_vocab(vocab_file, vocab_size: int) -> None:
    """The vocab must have as many tokens as the word-embedding table has rows."""
    size = len(load_vocab(vocab_file))
    if size != vocab_size:
        raise InputError(f"vocab file {vocab_file} has {size} tokens but the word-embedding table has "
                         f"{vocab_size} rows: it is not this model's vocab")


def build(config: PretrainingConfig, vocab_file) -> Built:
    """A PretrainingModel and its optimizer with all slots created (float32, no strategy)."""
    vocab = load_vocab(vocab_file)
    model = PretrainingModel(config, **special_ids(vocab), continuation_ids=continuation_ids(vocab))
    optimizer = create_optimizer(config.learning_rate, config.num_train_steps,
                                 weight_decay_rate=config.weight_decay_rate,
                                 warmup_steps=config.num_warmup_steps,
                                 lr_decay_power=config.lr_decay_power, optimizer=config.optimizer,
                                 bias_correction=config.adam_bias_correction)
    create_slots(optimizer, model.trainable_variables)
    tracked = optimizer
    if config.precision == "mixed_float16":  # as pretraining_runner wraps it
        tracked = tf_keras.mixed_precision.LossScaleOptimizer(optimizer)
    return Built(model, optimizer, tracked)


def optimizer_variables(optimizer) -> list:
    """The Adam slots, which carry the original's names `<variable>/adam_m` / `/adam_v`."""
    return [v for v in optimizer.variables() if variable_name(v).endswith(("/adam_m", "/adam_v"))]


def weights_of(built: Built, with_optimizer: bool = True) -> Dict[str, np.ndarray]:
    """Model variables, and unless `with_optimizer` is false the Adam slots and `global_step`
    (int64), keyed by TF1 name."""
    values = {variable_name(v): v.numpy() for v in built.model.variables}
    if with_optimizer:
        values.update({variable_name(v): v.numpy() for v in optimizer_variables(built.optimizer)})
        values[GLOBAL_STEP] = np.asarray(built.optimizer.iterations.numpy(), np.int64)
    return values


def load_config(model_dir) -> PretrainingConfig:
    path = Path(model_dir) / CONFIG_FILE
    try:
        return PretrainingConfig.from_json_file(path)
    except (OSError, ValueError) as error:
        raise InputError(f"{path}: cannot read the model's config ({error})") from None


def kept_steps(model_dir) -> list:
    """The steps N of the `ckpt-N` checkpoints in a dir, ascending."""
    steps = (step_of(str(path)[:-len(".index")]) for path in Path(model_dir).glob("ckpt-*.index"))
    return sorted(step for step in steps if step is not None)


def step_of(prefix) -> Optional[int]:
    """N of a checkpoint prefix `.../ckpt-N`, or None when its name carries no step."""
    name = Path(prefix).name
    return int(name[len("ckpt-"):]) if name.startswith("ckpt-") and name[len("ckpt-"):].isdigit() else None


def latest_checkpoint(model_dir) -> str:
    prefix = tf.train.latest_checkpoint(str(model_dir))
    if prefix is None:
        kept = kept_steps(model_dir)
        hint = (f"; it has ckpt-{', ckpt-'.join(map(str, kept))}: name one (its path, or convert_checkpoint.py's "
                "--step)" if kept else "")
        raise InputError(f"model dir {model_dir} holds no checkpoint (no `checkpoint` state file){hint}")
    return prefix


def checkpoint_at(model_dir, step: Optional[int] = None) -> str:
    """The prefix of a model dir's checkpoint `ckpt-<step>`, or of its latest when `step` is None
    (a run keeps `keep_checkpoint_max` of them, so earlier steps can still be exported)."""
    if step is None:
        return latest_checkpoint(model_dir)
    prefix = Path(model_dir) / f"ckpt-{step}"
    if not Path(f"{prefix}.index").is_file():
        raise InputError(f"model dir {model_dir} has no checkpoint ckpt-{step} "
                         f"(it keeps: {', '.join(map(str, kept_steps(model_dir))) or 'none'})")
    return str(prefix)


def read_model_dir(model_dir, prefix: Optional[str] = None):
    """(config, weights by TF1 name) of a model dir's latest checkpoint (or `prefix`). A
    checkpoint of the model alone (no optimizer) gives the model's weights alone."""
    config = load_config(model_dir)
    vocab_file = Path(model_dir) / VOCAB_FILE
    check_vocab(vocab_file, config.vocab_size)
    prefix = prefix or latest_checkpoint(model_dir)
    with_optimizer = has_optimizer_state(prefix)  # before building: the read's memory is freed first
    built = build(config, vocab_file)
    restore(built, prefix, model_dir, with_optimizer)
    return config, weights_of(built, with_optimizer)


def initialised_variables(model_dir, prefix: str) -> frozenset:
    """TF1 names of the variables that checkpoint `prefix` of `model_dir` holds only as initialised:
    those an import's source lacked (an HF discriminator alone has no generator), as long as the
    checkpoint is the import's own; a later one (pretraining resumed from it) has trained them."""
    path = Path(model_dir) / INITIALISED_FILE
    if not path.is_file():
        return frozenset()
    record = json.loads(path.read_text(encoding="utf-8"))
    return frozenset(record["variables"]) if step_of(prefix) == record["step"] else frozenset()


def has_optimizer_state(prefix: str) -> bool:
    """Whether a checkpoint holds an optimizer's state (not the model alone); also checks it reads."""
    return any(key.startswith("optimizer/") for key in read_checkpoint(prefix))


def restore(built: Built, prefix: str, model_dir, with_optimizer: bool) -> None:
    """Reads checkpoint `prefix` of `model_dir` into a built model, and with `with_optimizer` its
    optimizer state too. A checkpoint of another model is one InputError."""
    try:
        tf.train.Checkpoint(model=built.model).read(prefix).assert_existing_objects_matched().expect_partial()
    except (AssertionError, ValueError, tf.errors.OpError) as error:
        raise InputError(f"checkpoint {prefix} does not match the model of {Path(model_dir) / CONFIG_FILE}: "
                         f"{str(error).splitlines()[0]}") from None
    if with_optimizer:
        # The slots the run created. A variable its objective never trained (replace_mlm's unused
        # discriminator head) has none in a checkpoint written before its slots were created up
        # front (optimization.create_slots), and keeps zeros, as training would.
        tf.train.Checkpoint(model=built.model, optimizer=built.tracked_optimizer).read(prefix).expect_partial()


def check_output(output_dir, overwrite: bool) -> None:
    """An existing output dir is refused unless `overwrite` (checked first, before any work)."""
    if Path(output_dir).exists() and not overwrite:
        raise InputError(f"output dir {output_dir} exists; pass --overwrite to replace it")


@contextlib.contextmanager
def staged_output(output_dir, overwrite: bool, source=None) -> Iterator[Path]:
    """A temporary dir beside `output_dir` that becomes `output_dir` only when the block succeeds,
    so a failed conversion leaves nothing half-written. An existing `output_dir` is an error
    unless `overwrite` (then it is replaced at the end), and so is one that is or holds `source`,
    the dir being read (replacing it would delete it). A write that finds the disk full is one
    line (`DiskFull`) naming `output_dir`, after which the staging dir is removed."""
    output_dir = Path(output_dir)
    check_output(output_dir, overwrite)
    if source is not None and output_dir.exists() and output_dir.resolve() in (Path(source).resolve(),
                                                                               *Path(source).resolve().parents):
        raise InputError(f"--output-dir {output_dir} holds the model being read ({source}): replacing it would "
                         f"delete that model; write elsewhere")
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    kept = f"nothing was written to {output_dir}" + (" (the existing one is untouched)" if output_dir.exists() else "")
    try:
        with disk_full.reported(lambda: f"{kept}: free space and run the same command again", path=output_dir):
            yield staging
        if output_dir.exists():
            shutil.rmtree(output_dir)
        os.replace(staging, output_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_model_dir(values: Dict[str, np.ndarray], config: PretrainingConfig, vocab_file, output_dir,
                    overwrite: bool = False, source=None) -> LoadReport:
    """Writes a model dir (config.json, vocab.txt, ckpt-<global_step>) holding `values` (read
    from `source`, which the output may not replace: `staged_output`).

    Model variables under REQUIRED, and under each OPTIONAL scope the values have, must all be
    present with matching shapes; Adam slots and `global_step` are loaded when present (slots
    absent start at zero, step absent is 0).
    """
    check_vocab(vocab_file, config.vocab_size)
    scopes = (REQUIRED_WITH_MLM_HEAD, OPTIONAL_WITH_MLM_HEAD) if has_discriminator_mlm_head(config.objective) \
        else (REQUIRED, OPTIONAL)
    required = scopes[0] + tuple(scope for scope in scopes[1] if any(name.startswith(scope) for name in values))
    built = build(config, vocab_file)
    report = assign_weights(built.model.variables, values, required_prefix=required)
    initialised = report.missing  # left as initialised (`initialised_variables`)
    slots = assign_weights(optimizer_variables(built.optimizer), values, required_prefix=None)
    step = int(values.get(GLOBAL_STEP, 0))
    built.optimizer.iterations.assign(step)
    used = set(report.loaded) | set(slots.loaded) | ({GLOBAL_STEP} if GLOBAL_STEP in values else set())
    report = LoadReport(loaded=sorted(report.loaded + slots.loaded + sorted(used & {GLOBAL_STEP})),
                        missing=sorted(report.missing + slots.missing),
                        unused=sorted(set(values) - used))
    save_built(built, config, vocab_file, output_dir, overwrite, source, initialised)
    return report


def save_built(built: Built, config: PretrainingConfig, vocab_file, output_dir, overwrite: bool = False,
               source=None, initialised=()) -> str:
    """Writes a built model and optimizer as a model dir; returns the checkpoint's path.
    `initialised`: the variables no source gave a value (recorded in INITIALISED_FILE)."""
    step = int(built.optimizer.iterations.numpy())
    with staged_output(output_dir, overwrite, source) as staging:
        shutil.copyfile(vocab_file, staging / VOCAB_FILE)
        config.save(staging / CONFIG_FILE)
        if initialised:
            (staging / INITIALISED_FILE).write_text(json.dumps({"step": step, "variables": sorted(initialised)},
                                                               indent=1) + "\n", encoding="utf-8")
        checkpoint = tf.train.Checkpoint(model=built.model, optimizer=built.tracked_optimizer)
        tf.train.CheckpointManager(checkpoint, str(staging), max_to_keep=None).save(checkpoint_number=step)
    return str(Path(output_dir) / f"ckpt-{step}")

