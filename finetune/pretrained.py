"""Where fine-tuning starts: the pretrained discriminator's `electra/*` weights.

Any source `electra_tf.checkpoints.read_pretrained` reads will do: a model dir of this project
(`config.json` + `ckpt-N`), an original-release TF1 checkpoint or an HF transformers dir. The
weights meet the fine-tuning encoder's variables by their original TF1 names.
"""

import functools
from typing import Iterable

import tensorflow as tf

from electra_tf.checkpoints import LoadReport, PretrainedWeights, assign_weights, read_pretrained
from electra_tf.errors import InputError

ENCODER_SCOPE = "electra/"


@functools.lru_cache(maxsize=1)
def _pretrained(source: str) -> PretrainedWeights:
    """The source's weights, read once for all the trials of a run."""
    return read_pretrained(source)


def load_encoder_weights(encoder_variables: Iterable[tf.Variable], source) -> LoadReport:
    """Assigns every `electra/*` variable its pretrained value. A variable the source lacks, or
    whose shape differs, is an InputError naming it (and both shapes); nothing is assigned then."""
    try:
        pretrained = _pretrained(str(source))
    except InputError as error:
        raise InputError(f"pretrained model (init_checkpoint; set random_init true to fine-tune from "
                         f"random weights): {error}") from None
    try:
        return assign_weights(encoder_variables, pretrained.values, required_prefix=ENCODER_SCOPE)
    except InputError as error:
        config = pretrained.config
        hint = "" if config is None else (
            f"; the pretrained model has model_size {config.model_size!r}, embedding_size "
            f"{config.embedding_size} and model_hparam_overrides {config.model_hparam_overrides}: "
            "fine-tune with the same")
        raise InputError(f"{error}{hint}") from None
