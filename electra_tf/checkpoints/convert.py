"""The conversions behind convert_checkpoint.py, one function per subcommand.

Each writes its output through a staging dir that is renamed into place only on success (see
`model_dir.staged_output`), and refuses an existing output dir unless `overwrite`.
"""

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Optional

from electra_tf.config import PretrainingConfig
from electra_tf.errors import InputError
from electra_tf.hparams import HParamsSource, load_hparams
from electra_tf.checkpoints import (CASING_FIELDS, PretrainedWeights, detect_format, hf, model_dir, original,
                                    read_pretrained)
from electra_tf.checkpoints.report import LoadReport


def _placed(output_dir) -> dict:
    """model_name, data_dir and model_dir for a model dir at `output_dir` (= D/models/M)."""
    out = Path(output_dir).resolve()
    data_dir = out.parent.parent if out.parent.name == "models" else out.parent
    return dict(model_name=out.name, data_dir=str(data_dir), model_dir=str(out),
                vocab_file=str(out / model_dir.VOCAB_FILE))


def import_weights(weights: PretrainedWeights, output_dir, hparams: HParamsSource = None,
                   vocab_file: Optional[str] = None, overwrite: bool = False, source=None) -> LoadReport:
    """Writes imported weights (read from `source`) as a model dir. The architecture is `hparams`
    when given (its shapes must then match the weights), else the one inferred from the weights."""
    vocab_file = vocab_file or weights.vocab_file
    if vocab_file is None:
        raise InputError("no vocab.txt beside the checkpoint: put one there (from-original also takes --vocab-file)")
    place = _placed(output_dir)
    if hparams is not None:
        user, _ = load_hparams(hparams)
        recorded = {name: getattr(weights.config, name) for name in ("vocab_size", *CASING_FIELDS)}  # unless set
        config = PretrainingConfig.from_hparams(place["model_name"], place["data_dir"],  # the table's size unless set
                                                {**recorded, **user,
                                                 "model_dir": place["model_dir"], "vocab_file": place["vocab_file"]})
    else:
        paths = dict.fromkeys(("pretrain_tfrecords", "eval_tfrecords", "results_txt", "results_json"))
        config = dataclasses.replace(weights.config, **place, **paths)
    return model_dir.write_model_dir(weights.values, config, vocab_file, output_dir, overwrite=overwrite,
                                     source=source)


def from_original(checkpoint, output_dir, hparams: HParamsSource = None, vocab_file: Optional[str] = None,
                  overwrite: bool = False) -> LoadReport:
    """An original-release TF1 checkpoint → a model dir (with its Adam slots and global_step)."""
    model_dir.check_output(output_dir, overwrite)
    kind = detect_format(checkpoint)
    if kind != "original":
        what = "an HF transformers dir (use from-hf)" if kind == "hf" else "a model dir of this project already"
        raise InputError(f"{checkpoint} is {what}, not an original-release checkpoint")
    return import_weights(read_pretrained(checkpoint), output_dir, hparams, vocab_file, overwrite, source=checkpoint)


def from_hf(hf_dir, output_dir, hparams: HParamsSource = None, overwrite: bool = False) -> LoadReport:
    """An HF transformers dir (discriminator and/or generator) → a model dir."""
    model_dir.check_output(output_dir, overwrite)
    if not hf.is_hf_dir(hf_dir):
        raise InputError(f"{hf_dir}: no HF ELECTRA config.json (model_type \"electra\") in it or in its "
                         "discriminator/ or generator/ subdirs")
    return import_weights(hf.read_hf(hf_dir), output_dir, hparams, None, overwrite, source=hf_dir)


def to_original(model_dir_path, output_dir, overwrite: bool = False, step: Optional[int] = None) -> str:
    """A model dir's latest checkpoint (or `ckpt-<step>`) → TF1 `model.ckpt-<step>` + vocab.txt +
    hparams.json (the original's --hparams for this architecture). Returns the checkpoint prefix."""
    model_dir.check_output(output_dir, overwrite)
    source = model_dir.checkpoint_at(model_dir_path, step)
    config, values = model_dir.read_model_dir(model_dir_path, source)
    # a checkpoint of the model alone has no global_step: its file name `ckpt-N` still says the step
    named_step = None if original.GLOBAL_STEP in values else model_dir.step_of(source)
    with model_dir.staged_output(output_dir, overwrite, source=model_dir_path) as staging:
        prefix = original.write_original(values, staging, named_step)
        shutil.copyfile(Path(model_dir_path) / model_dir.VOCAB_FILE, staging / model_dir.VOCAB_FILE)
        (staging / "hparams.json").write_text(json.dumps(original_hparams(config), indent=2) + "\n")
    return str(Path(output_dir) / Path(prefix).name)


def original_hparams(config: PretrainingConfig) -> dict:
    """The original run_pretraining.py's --hparams that build this architecture."""
    disc = config.discriminator_config()
    overrides = {name: getattr(disc, name) for name in (  # every BertConfig field the original's overrides set
        "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
        "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
        "initializer_range")}
    return {"model_size": "small" if config.model_size in ("small", "small++", "tiny") else config.model_size,
            "vocab_size": config.vocab_size, "embedding_size": disc.embedding_size,
            "model_hparam_overrides": overrides, "generator_hidden_size": config.generator_hidden_size,
            "generator_layers": config.generator_layers, "untied_generator": config.untied_generator,
            "untied_generator_embeddings": config.untied_generator_embeddings,
            "electra_objective": config.objective != "bert", "max_seq_length": config.max_seq_length}


def to_hf(model_dir_path, output_dir, overwrite: bool = False, step: Optional[int] = None,
          dtype: str = "float32") -> list:
    """A model dir's latest checkpoint (or `ckpt-<step>`) → `<out>/discriminator` and `<out>/generator` HF
    dirs, weights in `dtype` (float32 or float16)."""
    model_dir.check_output(output_dir, overwrite)
    config, values = model_dir.read_model_dir(model_dir_path, model_dir.checkpoint_at(model_dir_path, step))
    with model_dir.staged_output(output_dir, overwrite, source=model_dir_path) as staging:
        return hf.export_hf(values, config, Path(model_dir_path) / model_dir.VOCAB_FILE, staging, dtype)
