"""Checkpoint interop: the original release's TF1 checkpoints, HF transformers dirs, this
project's model dirs, and SavedModels on raw text (issue #5).

Every format is read into one currency, `PretrainedWeights`: numpy arrays keyed by the original
TF1 variable names (docs/fidelity.md#checkpoint-names, without ":0"), plus the PretrainingConfig of the model they fit.
`assign_weights` puts them into any model built with this project's layers and reports what was
loaded, missing and unused.
"""

from pathlib import Path
from typing import Dict, NamedTuple, Optional

import numpy as np

from electra_tf.config import PretrainingConfig
from electra_tf.errors import InputError
from electra_tf.hparams import recorded_flags
from electra_tf.checkpoints.report import LoadReport, assign_weights, variable_name


class PretrainedWeights(NamedTuple):
    values: Dict[str, np.ndarray]  # TF1 name (no ":0") → array; may include slots and global_step
    config: Optional[PretrainingConfig]  # the model these weights fit (read or inferred)
    vocab_file: Optional[str]  # the vocab beside the weights, when there is one
    initialised: frozenset = frozenset()  # names in `values` holding initial values, never trained or imported


def detect_format(source) -> str:
    """"model_dir", "hf" or "original" for a path (a dir or a checkpoint prefix)."""
    from electra_tf.checkpoints import hf, model_dir, original
    path = Path(source)
    if not path.exists() and not Path(str(path) + ".index").exists():
        raise InputError(f"{source}: no such directory or checkpoint ({source}.index not found either)")
    if model_dir.is_model_dir(path):
        return "model_dir"
    if hf.is_hf_dir(path):
        return "hf"
    if path.is_dir() or Path(str(path) + ".index").exists():
        prefix = original.resolve_prefix(path)
        parent = Path(prefix).parent
        if (parent / model_dir.CONFIG_FILE).is_file() and Path(prefix).name.startswith("ckpt-"):
            return "model_dir"
        return "original"
    raise InputError(f"{source}: neither a model dir, an HF transformers dir nor a checkpoint")


def vocab_beside(source) -> Optional[str]:
    """The `vocab.txt` in a checkpoint's dir (the dir itself, or a `ckpt-N` prefix's parent; an HF
    export's discriminator/ or generator/ when its top has none) when there is one: the vocab its
    weights were trained with."""
    from electra_tf.checkpoints import hf, model_dir
    path = Path(source)
    if path.is_dir():
        directories = [path, *hf.network_dirs(path).values()]
    else:
        directories = [path.parent] if Path(f"{path}.index").is_file() else []
    vocabs = [directory / model_dir.VOCAB_FILE for directory in directories]
    return next((str(vocab) for vocab in vocabs if vocab.is_file()), None)


CASING_FIELDS = ("do_lower_case", "do_strip_accents")  # how a model's text was normalised before WordPiece


def casing_beside(source) -> Dict[str, bool]:
    """How the model at `source` (a model dir or its ckpt-N, an HF dir or export) had its text
    normalised, as it records it: the CASING_FIELDS of the model dir's config.json (their defaults
    where an older one lacks them) or of the HF dir's tokenizer_config.json; {} where nothing
    records it (an original TF1 checkpoint, a path that does not exist)."""
    from electra_tf.checkpoints import hf, model_dir
    path = Path(source)
    if path.is_dir():
        directory = path if model_dir.is_model_dir(path) else None
    else:  # a checkpoint prefix: a model dir's ckpt-N, or an original TF1 checkpoint (which records nothing)
        prefix = Path(f"{path}.index").is_file() and path.name.startswith("ckpt-")
        directory = path.parent if prefix and (path.parent / model_dir.CONFIG_FILE).is_file() else None
    if directory is not None:
        return recorded_flags(directory / model_dir.CONFIG_FILE, CASING_FIELDS, default=True)
    return hf.recorded_casing(path) if path.is_dir() else {}


def read_pretrained(source, model_name: str = "imported", data_dir: Optional[str] = None) -> PretrainedWeights:
    """Weights from a model dir (or one of its `ckpt-N` prefixes), an original TF1 checkpoint
    (dir or prefix; its size inferred from the shapes) or an HF transformers dir."""
    from electra_tf.checkpoints import hf, model_dir, original
    kind = detect_format(source)
    path = Path(source)
    if kind == "model_dir":
        directory = path if path.is_dir() else path.parent
        prefix = model_dir.latest_checkpoint(directory) if path.is_dir() else str(path)
        config, values = model_dir.read_model_dir(directory, prefix)
        return PretrainedWeights(values, config, str(directory / model_dir.VOCAB_FILE),
                                 model_dir.initialised_variables(directory, prefix))
    if kind == "hf":
        return hf.read_hf(path, model_name=model_name, data_dir=data_dir)
    values = original.read_original(path)
    directory = path if path.is_dir() else path.parent
    config = original.infer_config(values, model_name, data_dir or str(directory))
    return PretrainedWeights(values, config, vocab_beside(path))


__all__ = ["PretrainedWeights", "LoadReport", "assign_weights", "read_pretrained", "detect_format", "vocab_beside",
           "variable_name"]
