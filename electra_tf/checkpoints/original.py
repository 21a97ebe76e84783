"""The original release's TF1 checkpoints (docs/fidelity.md#checkpoint-names): read, write, and infer the model size.

A TF1 checkpoint is a prefix (`model.ckpt-4000000`) with `.index` and `.data-*` files, or a
directory whose `checkpoint` state file names the latest one. Its variables are keyed by the
original names (`electra/embeddings/word_embeddings`, `generator/encoder/layer_3/...`,
`<variable>/adam_m`, `global_step`), which are exactly this project's variable names.
"""

import os
from pathlib import Path
from typing import Dict, Optional

import numpy as np
import tensorflow as tf

from electra_tf.config import ARCHITECTURES, SIZE_PRESETS, PretrainingConfig
from electra_tf.errors import InputError
from electra_tf.checkpoints.report import GLOBAL_STEP

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"  # present in TF2 object-based checkpoints only
WORD_EMBEDDINGS = "electra/embeddings/word_embeddings"
CHECKPOINT_BASENAME = "model.ckpt"


def resolve_prefix(path) -> str:
    """A checkpoint prefix from a prefix or a directory holding a `checkpoint` state file."""
    path = str(path)
    if os.path.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise InputError(f"checkpoint {path}: the directory holds no checkpoint "
                             "(no `checkpoint` state file naming one)")
        return latest
    if not tf.io.gfile.exists(path + ".index"):
        raise InputError(f"checkpoint {path}: no such checkpoint ({path}.index not found)")
    return path


def read_checkpoint(prefix: str) -> Dict[str, np.ndarray]:
    """Every numeric tensor of a checkpoint by key (a run's input-iterator state, a tf.variant, is
    not one). A corrupt or partial checkpoint is an InputError."""
    try:
        reader = tf.train.load_checkpoint(prefix)
        return {name: reader.get_tensor(name) for name, dtype in reader.get_variable_to_dtype_map().items()
                if dtype.is_numpy_compatible}
    except (tf.errors.OpError, ValueError, IndexError) as error:  # IndexError: a truncated .data file
        raise InputError(f"checkpoint {prefix} is corrupt or incomplete: "
                         f"{str(error).strip().splitlines()[0]}") from None


def read_original(path) -> Dict[str, np.ndarray]:
    """The variables of an original-format checkpoint, checked to be an ELECTRA one."""
    prefix = resolve_prefix(path)
    values = read_checkpoint(prefix)
    if OBJECT_GRAPH_KEY in values:
        raise InputError(f"checkpoint {prefix} is a TF2 object-based checkpoint, not the original "
                         "release's TF1 format; pass the model dir that holds it instead")
    check_electra(values, prefix)
    return values


def check_electra(values: Dict[str, np.ndarray], source: str) -> None:
    """Refuses weights of another architecture: ELECTRA has `electra/embeddings/word_embeddings`
    and `electra/encoder/layer_0/...`."""
    if WORD_EMBEDDINGS not in values or _layer_count(values, "electra") == 0:
        scopes = sorted({name.split("/", 1)[0] for name in values})[:8]
        raise InputError(f"{source} is not an ELECTRA checkpoint: it has no {WORD_EMBEDDINGS} or no "
                         f"electra/encoder/layer_0 (its top-level scopes: {', '.join(scopes) or 'none'})")


def _layer_count(values: Dict[str, np.ndarray], scope: str) -> int:
    count = 0
    while f"{scope}/encoder/layer_{count}/attention/self/query/kernel" in values:
        count += 1
    return count


def _hidden_size(values, scope: str) -> int:
    return int(values[f"{scope}/encoder/layer_0/attention/self/query/kernel"].shape[1])


def infer_config(values: Dict[str, np.ndarray], model_name: str, data_dir: str,
                 objective: Optional[str] = None) -> PretrainingConfig:
    """The PretrainingConfig whose model has these weights' shapes, trained with `objective` (one
    with a discriminator) when the weights' source names one: shapes cannot tell electra from
    electra_15, and an MLM discriminator may have lost its replaced-token head.

    Sizes come from the tables and kernels: vocab and embedding width from the word table,
    H and L from the discriminator's layers, the generator's fraction of both from `generator/`,
    its tying from which scopes exist. `model_size` is the preset of that (H, L) when there is
    one (small++ for small with a full-size generator, as the released Small), else small with
    model_hparam_overrides. Attention heads do not show in shapes: H // 64, as the original.
    """
    check_electra(values, "the checkpoint")
    vocab_size, embedding_size = (int(n) for n in values[WORD_EMBEDDINGS].shape)
    hidden, layers = _hidden_size(values, "electra"), _layer_count(values, "electra")
    intermediate = int(values["electra/encoder/layer_0/intermediate/dense/kernel"].shape[1])
    has_generator_head = "generator_predictions/output_bias" in values
    # an objective named by the weights' source is one with a discriminator (its head may be gone)
    has_discriminator_head = "discriminator_predictions/dense/kernel" in values or objective is not None
    gen_layers = _layer_count(values, "generator")
    hparams = dict(model_size="small", vocab_size=vocab_size, embedding_size=embedding_size,
                   max_seq_length=min(128, int(values["electra/embeddings/position_embeddings"].shape[0])))
    if objective is not None:
        hparams["objective"] = objective
    if has_generator_head and not has_discriminator_head:
        hparams["objective"] = "bert"
    elif has_generator_head and gen_layers == 0:
        hparams["untied_generator"] = False  # the generator is the discriminator itself
    elif gen_layers:
        hparams["generator_hidden_size"] = _hidden_size(values, "generator") / hidden
        hparams["generator_layers"] = gen_layers / layers
        hparams["untied_generator_embeddings"] = "generator/embeddings/word_embeddings" in values
    preset = next((size for size, arch in ARCHITECTURES.items() if arch == (hidden, layers)
                   and (size != "tiny" or embedding_size == SIZE_PRESETS["tiny"]["embedding_size"])), None)
    if preset is None:
        hparams["model_hparam_overrides"] = dict(hidden_size=hidden, num_hidden_layers=layers)
    else:
        hparams["model_size"] = preset
        if preset == "small" and hparams.get("generator_hidden_size") == 1.0:
            hparams["model_size"] = "small++"
        hparams.setdefault("generator_hidden_size", SIZE_PRESETS[preset]["generator_hidden_size"])
    overrides = hparams.setdefault("model_hparam_overrides", {})
    for name, value in (("intermediate_size", intermediate),
                        ("max_position_embeddings",
                         int(values["electra/embeddings/position_embeddings"].shape[0])),
                        ("type_vocab_size", int(values["electra/embeddings/token_type_embeddings"].shape[0]))):
        if value != {"intermediate_size": 4 * hidden, "max_position_embeddings": 512,
                     "type_vocab_size": 2}[name]:
            overrides[name] = value
    return PretrainingConfig.from_hparams(model_name, data_dir, hparams)


def write_original(values: Dict[str, np.ndarray], directory, step: Optional[int] = None) -> str:
    """Writes `values` as a TF1 checkpoint `<directory>/model.ckpt-<step>` with its `checkpoint`
    state file, as the original's Saver does; returns the prefix. `step` defaults to the
    `global_step` among the values (0 if none)."""
    if step is None:
        step = int(values[GLOBAL_STEP]) if GLOBAL_STEP in values else 0
    prefix = str(Path(directory) / f"{CHECKPOINT_BASENAME}-{step}")
    names = sorted(values)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(values[name]) for name in names])
    name = os.path.basename(prefix)  # relative, so the dir can be moved
    (Path(directory) / "checkpoint").write_text(f'model_checkpoint_path: "{name}"\n'
                                                f'all_model_checkpoint_paths: "{name}"\n')
    return prefix
