"""Pre-training configuration: every hparam of the original's `configure_pretraining.py`.

Build it with `PretrainingConfig.from_hparams(model_name, data_dir, hparams)`: defaults, the
user's values, the size and debug presets, the user's values again (see `electra_tf.hparams`).
Unlike the original, which applied only the small preset in code, every `model_size` has its
preset here, so `{"model_size": "large"}` alone gives the paper's large recipe.

The constructor takes literal values (no presets); it fills path defaults and the derived
`max_predictions_per_seq`, then validates. The original's `electra_objective`, `use_tpu`,
`electric_objective` and `two_tower_generator` are accepted as hparams and mapped to
`objective` / `strategy`; Electric (both of the latter) is not supported and is refused.
"""

import dataclasses
import os
from typing import Optional

from electra_tf.errors import InputError
from electra_tf.hparams import HParams, HParamsSource
from electra_tf.modeling.bert_config import BertConfig, generator_config, sized_encoder

# Encoder (hidden size, layers) per model_size (docs/fidelity.md#model-sizes); heads = H // 64 and FFN = 4H.
ARCHITECTURES = {
    "small": (256, 12),
    "small++": (256, 12),
    "base": (768, 12),
    "large": (1024, 24),
    "tiny": (128, 2),
}
# `debug: true` swaps in the original's debug model: 3 layers, hidden 144, FFN 576, 4 heads.
DEBUG_ARCHITECTURE = (144, 3)
DEBUG_ATTENTION_HEADS = 4

_SMALL = dict(embedding_size=128, generator_hidden_size=0.25, learning_rate=5e-4,
              train_batch_size=128, max_seq_length=128, mask_prob=0.15, num_warmup_steps=10000)
# Training values each size sets (docs/fidelity.md#model-sizes: the original's small defaults, and base / large from
# its commented-out block and the paper). embedding_size None means the hidden size (768, 1024).
# tiny is for tests and the CPU demo: hidden 128 is the narrowest width with 2 attention heads;
# embedding 64 gives the discriminator an embeddings projection while the 0.5 generator (64
# hidden, 1 head) has none, so one small model covers both branches; 2 layers keep a layer
# stack; lr 1e-3 and 100 warm-up steps suit a model this small trained for a few thousand steps.
SIZE_PRESETS = {
    "small": _SMALL,
    "small++": {**_SMALL, "generator_hidden_size": 1.0},  # the released ELECTRA-Small (issue #39)
    "base": dict(embedding_size=None, generator_hidden_size=0.33333, learning_rate=2e-4,
                 train_batch_size=256, max_seq_length=512, mask_prob=0.15, num_warmup_steps=10000),
    "large": dict(embedding_size=None, generator_hidden_size=0.25, learning_rate=2e-4,
                  train_batch_size=2048, max_seq_length=512, mask_prob=0.25,
                  num_warmup_steps=10000),
    "tiny": dict(embedding_size=64, generator_hidden_size=0.5, learning_rate=1e-3,
                 train_batch_size=32, max_seq_length=128, mask_prob=0.15, num_warmup_steps=100),
}
# The original's debug run (docs/fidelity.md#pretraining-config); unlike it, debug never wipes model_dir.
DEBUG_PRESETS = dict(train_batch_size=8, num_train_steps=20, eval_batch_size=4,
                     iterations_per_loop=1, num_eval_steps=2)

# electra: the paper's method; bert: MLM only (the original's electra_objective false);
# electra_15, replace_mlm, all_tokens_mlm: the paper's §3.2 efficiency ablations.
PRETRAINING_OBJECTIVES = ("electra", "bert", "electra_15", "replace_mlm", "all_tokens_mlm")
STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
# The policies that need no loss scaling: what fine-tuning and exported SavedModels offer.
UNSCALED_PRECISIONS = ("float32", "mixed_bfloat16")
OPTIMIZERS = ("adamw", "lamb")
# BertConfig fields that set variable shapes (dropout, activation and init range do not).
SHAPE_FIELDS = ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
                "num_attention_heads", "intermediate_size", "max_position_embeddings",
                "type_vocab_size")


def has_rtd_loss(objective: str) -> bool:
    """Whether the objective trains its discriminator on replaced token detection: electra (every
    token) and electra_15 (the masked ones). bert has no discriminator; replace_mlm and
    all_tokens_mlm train theirs with an MLM loss."""
    return objective in ("electra", "electra_15")


def has_discriminator_mlm_head(objective: str) -> bool:
    """Whether the discriminator predicts token identities with an MLM head of its own
    (`discriminator_mlm_predictions`): replace_mlm (at the masked positions) and all_tokens_mlm
    (everywhere, with `discriminator_predictions` as its copy gate)."""
    return objective in ("replace_mlm", "all_tokens_mlm")


def encoder_shapes(config: BertConfig) -> dict:
    """The fields of an encoder config that set its variables' shapes."""
    return {name: getattr(config, name) for name in SHAPE_FIELDS}


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InputError(message)


def _one_of(name: str, value, valid) -> None:
    _require(value in valid, f"{name} {value!r} is not one of: {', '.join(valid)}")


@dataclasses.dataclass
class PretrainingConfig(HParams):
    """Every pre-training hyper-parameter (docs/fidelity.md#pretraining-config) plus this project's additions."""

    model_name: str
    data_dir: str
    # Run control
    debug: bool = False  # debug presets and a 3-layer model; never wipes anything
    do_train: bool = True
    do_eval: bool = False  # evaluates on eval_tfrecords, a held-out set
    # Objective and losses
    objective: str = "electra"  # one of PRETRAINING_OBJECTIVES
    gen_weight: float = 1.0  # weight of the generator's MLM loss
    disc_weight: float = 50.0  # weight of the discriminator loss
    two_stage_generator_steps: int = 0  # paper §3.2 two-stage training: generator alone first
    # Masking
    mask_prob: float = 0.15
    mask_token_fraction: float = 0.85  # of masked positions: [MASK]; the original's 85%
    random_token_fraction: float = 0.0  # a random token; the rest keep theirs (BERT: 0.8 / 0.1)
    mask_with_replacement: bool = True  # True: the original's draw, duplicates possible; False: distinct positions
    whole_word_masking: bool = False  # draw whole words, a word's "##" pieces with it (BERT's; not the original's)
    # Optimisation
    optimizer: str = "adamw"  # one of OPTIMIZERS
    learning_rate: float = 5e-4
    lr_decay_power: float = 1.0  # 1.0 is linear decay
    weight_decay_rate: float = 0.01
    num_warmup_steps: int = 10000
    gradient_accumulation_steps: int = 1
    per_replica_clipping: bool = False  # True: each replica clips its own gradient (the original's TPU runs)
    adam_bias_correction: bool = False  # True: AdamW with Adam's bias correction (not the original's)
    # Steps, checkpoints, logging
    iterations_per_loop: int = 200  # steps per compiled loop
    save_checkpoints_steps: int = 1000
    num_train_steps: int = 1000000
    num_eval_steps: int = 100  # at most this many held-out batches (the last may be partial)
    eval_every_steps: int = 0  # with do_train and do_eval: also evaluate every N steps (a curve)
    keep_checkpoint_max: Optional[int] = 5  # 0 or None keeps all
    log_every: int = 100
    init_checkpoint: Optional[str] = None  # weights to start from when model_dir has none
    init_checkpoint_reset_step: bool = True  # start at step 0 after loading init_checkpoint
    # Model
    model_size: str = "small"  # one of ARCHITECTURES
    model_hparam_overrides: dict = dataclasses.field(default_factory=dict, metadata={"fields": BertConfig})
    embedding_size: Optional[int] = None  # None means the hidden size
    vocab_size: int = 30522
    do_lower_case: bool = True
    # Not a field of the original's configure_pretraining: its build had the flag (--no-strip-accents)
    # but fine-tuning always stripped; here the model records how its text was normalised.
    do_strip_accents: bool = True  # drop accents when lower-casing (no effect without it)
    uniform_generator: bool = False  # fake tokens drawn uniformly; no generator network
    untied_generator_embeddings: bool = False  # generator gets its own embeddings
    untied_generator: bool = True  # True: a separate generator; False: the discriminator itself
    generator_layers: float = 1.0  # fraction of the discriminator's layers
    generator_hidden_size: float = 0.25  # fraction of the discriminator's hidden size
    disallow_correct: bool = False  # sampled tokens must differ from the original
    temperature: float = 1.0  # generator sampling temperature
    # Batches
    max_seq_length: int = 128
    train_batch_size: int = 128  # global batch, split into gradient_accumulation_steps
    eval_batch_size: int = 128
    # Devices and numerics
    strategy: str = "auto"  # one of STRATEGIES
    precision: str = "float32"  # one of PRECISIONS
    jit_compile: bool = False
    deterministic: bool = False
    seed: int = 1234
    num_tpu_cores: int = 1
    tpu_job_name: Optional[str] = None
    tpu_name: Optional[str] = None
    tpu_zone: Optional[str] = None
    gcp_project: Optional[str] = None
    # Paths; None means the default built from data_dir, model_name and model_dir
    pretrain_tfrecords: Optional[str] = None  # comma-separated globs allowed
    eval_tfrecords: Optional[str] = None
    vocab_file: Optional[str] = None
    model_dir: Optional[str] = None
    results_txt: Optional[str] = None
    results_json: Optional[str] = None
    # Derived
    max_predictions_per_seq: int = dataclasses.field(
        init=False, metadata={"derived": "int((mask_prob + 0.005) * max_seq_length)"})

    FIXED = ("model_name", "data_dir")
    ALIASES = {"electra_objective": bool, "use_tpu": bool, "electric_objective": bool,
               "two_tower_generator": bool}

    @classmethod
    def from_hparams(cls, model_name: str, data_dir, hparams: HParamsSource = None):
        """The original's `PretrainingConfig(model_name, data_dir, **hparams)` with its merge;
        `hparams` is a JSON object string, a path ending in `.json`, a dict or None."""
        return cls.merge({"model_name": model_name, "data_dir": str(data_dir)}, hparams)

    @classmethod
    def _translate(cls, user: dict, where: str) -> dict:
        user = dict(user)
        for flag in ("electric_objective", "two_tower_generator"):
            _require(not user.pop(flag, False),
                     f"{flag} in {where}: the Electric objective and its two-tower generator "
                     f"are not supported by electra_tf")
        if "electra_objective" in user:
            implied = "electra" if user.pop("electra_objective") else "bert"
            given = user.setdefault("objective", implied)
            _require((given == "bert") == (implied == "bert"),
                     f"electra_objective {implied != 'bert'} and objective {given!r} in {where} "
                     f"disagree (electra_objective false means objective \"bert\")")
        if user.pop("use_tpu", False):
            given = user.setdefault("strategy", "tpu")
            _require(given == "tpu", f"use_tpu true and strategy {given!r} in {where} disagree")
        return user

    @classmethod
    def _presets(cls, values: dict) -> dict:
        _one_of("model_size", values["model_size"], ARCHITECTURES)
        presets = dict(SIZE_PRESETS[values["model_size"]])
        if values["debug"]:
            presets.update(DEBUG_PRESETS)
        return presets

    def __post_init__(self):
        default_paths = {
            "pretrain_tfrecords": (self.data_dir, "pretrain_tfrecords", "pretrain_data.tfrecord*"),
            "eval_tfrecords": (self.data_dir, "pretrain_tfrecords", "eval",
                               "pretrain_data.tfrecord*"),
            "vocab_file": (self.data_dir, "vocab.txt"),
            "model_dir": (self.data_dir, "models", self.model_name),
        }
        for name, parts in default_paths.items():
            if getattr(self, name) is None:
                setattr(self, name, os.path.join(*parts))
        for name, extension in (("results_txt", "txt"), ("results_json", "json")):
            if getattr(self, name) is None:
                setattr(self, name, os.path.join(self.model_dir, "results",
                                                 f"unsup_results.{extension}"))
        self.max_predictions_per_seq = int((self.mask_prob + 0.005) * self.max_seq_length)
        self._validate()

    def discriminator_config(self) -> BertConfig:
        """The discriminator's encoder: the size (or debug) preset, embedding_size, then
        model_hparam_overrides; an overridden hidden size also re-derives heads and FFN, as
        the original's `get_bert_config` does."""
        hidden, layers = DEBUG_ARCHITECTURE if self.debug else ARCHITECTURES[self.model_size]
        overrides = {"embedding_size": self.embedding_size}
        if self.debug:
            overrides["num_attention_heads"] = DEBUG_ATTENTION_HEADS
        if "vocab_size" in self.model_hparam_overrides:
            raise InputError("model_hparam_overrides may not set vocab_size: set the vocab_size hparam "
                             "(it must match the vocab file)")
        overrides.update(self.model_hparam_overrides)
        return sized_encoder(BertConfig(vocab_size=self.vocab_size),
                             hidden_size=overrides.pop("hidden_size", hidden),
                             num_hidden_layers=overrides.pop("num_hidden_layers", layers), **overrides)

    def generator_config(self) -> BertConfig:
        """The generator's encoder: the discriminator's own config for objective "bert" or
        untied_generator false, else generator_hidden_size / generator_layers of it."""
        discriminator = self.discriminator_config()
        if self.objective == "bert" or not self.untied_generator:
            return discriminator
        generator = generator_config(discriminator, self.generator_hidden_size,
                                     self.generator_layers)
        if self.untied_generator_embeddings:  # own embeddings at the generator's width
            generator = dataclasses.replace(generator, embedding_size=generator.hidden_size)
        return generator

    def architecture_dict(self) -> dict:
        """What decides which variables exist and their shapes; a run resuming from a model_dir
        must match the one that created it."""
        return {
            "objective": self.objective,
            "uniform_generator": self.uniform_generator,
            "untied_generator": self.untied_generator,
            "untied_generator_embeddings": self.untied_generator_embeddings,
            "discriminator": encoder_shapes(self.discriminator_config()),
            "generator": encoder_shapes(self.generator_config()),
        }

    def _validate(self) -> None:
        """One InputError naming the field(s) for the first invalid value."""
        _one_of("model_size", self.model_size, ARCHITECTURES)
        _one_of("objective", self.objective, PRETRAINING_OBJECTIVES)
        _one_of("strategy", self.strategy, STRATEGIES)
        _one_of("precision", self.precision, PRECISIONS)
        _one_of("optimizer", self.optimizer, OPTIMIZERS)
        _require(not self.adam_bias_correction or self.optimizer == "adamw",
                 f"adam_bias_correction applies to optimizer 'adamw', not {self.optimizer!r}")
        _require(self.do_train or self.do_eval,
                 "do_train and do_eval are both false: nothing to do")
        _require(0 < self.mask_prob < 1, f"mask_prob {self.mask_prob} must be in (0, 1)")
        for name in ("mask_token_fraction", "random_token_fraction"):
            _require(0 <= getattr(self, name) <= 1,
                     f"{name} {getattr(self, name)} must be in [0, 1]")
        _require(self.mask_token_fraction + self.random_token_fraction <= 1,
                 f"mask_token_fraction {self.mask_token_fraction} + random_token_fraction "
                 f"{self.random_token_fraction} exceeds 1")
        for name in ("max_seq_length", "train_batch_size", "eval_batch_size", "num_eval_steps",
                     "iterations_per_loop", "save_checkpoints_steps", "log_every", "vocab_size",
                     "gradient_accumulation_steps", "num_tpu_cores"):
            _require(getattr(self, name) >= 1, f"{name} {getattr(self, name)} must be at least 1")
        for name in ("num_train_steps", "num_warmup_steps", "two_stage_generator_steps",
                     "gen_weight", "disc_weight", "weight_decay_rate", "lr_decay_power",
                     "eval_every_steps"):
            _require(getattr(self, name) >= 0, f"{name} {getattr(self, name)} must not be negative")
        for name in ("learning_rate", "temperature", "generator_hidden_size", "generator_layers"):
            _require(getattr(self, name) > 0, f"{name} {getattr(self, name)} must be positive")
        _require(self.keep_checkpoint_max is None or self.keep_checkpoint_max >= 0,
                 f"keep_checkpoint_max {self.keep_checkpoint_max} must be None or at least 0")
        _require(self.embedding_size is None or self.embedding_size >= 1,
                 f"embedding_size {self.embedding_size} must be None or at least 1")
        _require(self.train_batch_size % self.gradient_accumulation_steps == 0,
                 f"train_batch_size {self.train_batch_size} is not divisible by "
                 f"gradient_accumulation_steps {self.gradient_accumulation_steps}")
        _require(self.max_predictions_per_seq >= 1,
                 f"mask_prob {self.mask_prob} with max_seq_length {self.max_seq_length} gives "
                 f"max_predictions_per_seq {self.max_predictions_per_seq}; it must be at least 1")
        discriminator = self._checked_encoder(
            "discriminator", self.discriminator_config,
            f"model_size {self.model_size!r}, debug {self.debug}")
        generator = self._checked_encoder(
            "generator", self.generator_config,
            f"generator_hidden_size {self.generator_hidden_size}, generator_layers "
            f"{self.generator_layers}")
        _require(self.max_seq_length <= discriminator.max_position_embeddings,
                 f"max_seq_length {self.max_seq_length} exceeds max_position_embeddings "
                 f"{discriminator.max_position_embeddings}")
        if self.two_stage_generator_steps:
            # Paper §3.2: the discriminator starts from the generator's weights, so sizes match.
            _require(self.objective == "electra" and self.untied_generator
                     and not self.uniform_generator,
                     "two_stage_generator_steps needs objective \"electra\", untied_generator true "
                     "and uniform_generator false")
            _require(encoder_shapes(generator) == encoder_shapes(discriminator),
                     "two_stage_generator_steps needs a generator as large as the discriminator "
                     "(generator_hidden_size 1.0, generator_layers 1.0) and embeddings of its shape (with "
                     "untied_generator_embeddings they are as wide as the generator's hidden size)")
            _require(self.two_stage_generator_steps < self.num_train_steps,
                     f"two_stage_generator_steps {self.two_stage_generator_steps} must be below "
                     f"num_train_steps {self.num_train_steps}")

    def _checked_encoder(self, role: str, build, inputs: str) -> BertConfig:
        """`build()`, with its error prefixed by the fields the encoder came from."""
        try:
            return build()
        except InputError as err:
            raise InputError(f"{role} architecture ({inputs}, model_hparam_overrides "
                             f"{self.model_hparam_overrides}): {err}") from None
