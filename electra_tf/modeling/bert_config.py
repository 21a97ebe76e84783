"""Transformer architecture config (the original's `BertConfig`) and generator sizing.

Field names and defaults are the original release's (`model/modeling.py`); `embedding_size`
joins them because in this package one object describes a whole encoder (None = hidden_size).
"""

import dataclasses
import json
from typing import Optional

from electra_tf.errors import InputError


@dataclasses.dataclass
class BertConfig:
    """Architecture of one transformer encoder (discriminator or generator)."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"  # exact erf GELU, as the original
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    embedding_size: Optional[int] = None  # None means hidden_size

    def __post_init__(self):
        if self.embedding_size is None:
            self.embedding_size = self.hidden_size
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings", "type_vocab_size", "embedding_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InputError(f"{name} {value!r} must be an integer of at least 1")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise InputError(f"{name} {value!r} must be in [0, 1)")
        if self.hidden_size % self.num_attention_heads:
            raise InputError(f"hidden_size {self.hidden_size} is not divisible by "
                             f"num_attention_heads {self.num_attention_heads}")
        if self.hidden_act not in ("gelu", "relu", "tanh", "linear"):
            raise InputError(f"hidden_act {self.hidden_act!r}: expected gelu, relu, tanh or linear")

    @classmethod
    def from_dict(cls, values: dict) -> "BertConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise InputError(f"unknown BertConfig field(s) {unknown}; valid: {sorted(known)}")
        return cls(**values)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def sized_encoder(base: BertConfig, hidden_size: int, num_hidden_layers: int, **overrides) -> BertConfig:
    """An encoder of the given width and depth; heads = max(1, H // 64) and FFN = 4H as the original.

    `overrides` (the original's `model_hparam_overrides`) win over those derived values and are
    applied in the same step, so e.g. hidden 200 with 4 heads is valid although 200 // 64 = 3 is not.
    """
    known = {f.name for f in dataclasses.fields(BertConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise InputError(f"unknown BertConfig field(s) {unknown}; valid: {sorted(known)}")
    values = dict(num_attention_heads=max(1, hidden_size // 64), intermediate_size=4 * hidden_size)
    values.update(overrides)
    return dataclasses.replace(base, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers, **values)


def generator_config(discriminator: BertConfig, generator_hidden_size: float,
                     generator_layers: float) -> BertConfig:
    """Generator sizing (paper §3.2): a fraction of the discriminator's width and depth.

    hidden = round(H * generator_hidden_size), layers = round(L * generator_layers); the
    embedding width stays the discriminator's so the whole embedding block can be shared.
    """
    return sized_encoder(
        discriminator,
        hidden_size=int(round(discriminator.hidden_size * generator_hidden_size)),
        num_hidden_layers=int(round(discriminator.num_hidden_layers * generator_layers)),
    )
