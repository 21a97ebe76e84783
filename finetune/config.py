"""Fine-tuning configuration: the original's `FinetuningConfig` fields and defaults
(docs/fidelity.md#fine-tuning-config).

Build it with `FinetuningConfig.from_hparams(model_name, data_dir, hparams)`; the merge is the
original's (defaults, user values, presets, user values again; `electra_tf.hparams`), and an
unknown key is an InputError. Presets, in order:
- size: large gets lr 5e-5 and layer-wise decay 0.9; small embedding_size 128 (tiny 64);
- recipe: "code" keeps the original code's defaults; "paper" applies Table 7 where it differs
  (small lr 3e-4 instead of 1e-4, weight decay 0 instead of 0.01);
- task: a single-task run of rte or sts trains 10 epochs, any other GLUE task 3; squad / squadv1
  alone: 512 tokens, 2 epochs; a tagging task (chunk too) alone: 256 tokens (the task's `presets`);
- debug: 1 trial, 100 rows per file, examples logged, and the original's debug model (3 layers, hidden 144).
Task names may be the original's (mrpc) or the GLUE folder's (MRPC); they are stored in the
original's form; `tasks` defines the user's own (finetune.task_specs). The QA fields set up
SQuAD; `use_tfrecords_if_existing` is
accepted for compatibility: features are built in memory here, never cached.
"""

import dataclasses
import os
from pathlib import Path
from typing import List, Optional

from electra_tf.checkpoints import CASING_FIELDS, casing_beside, vocab_beside
from electra_tf.config import ARCHITECTURES, DEBUG_ARCHITECTURE, DEBUG_ATTENTION_HEADS, PRECISIONS
from electra_tf.errors import InputError
from electra_tf.hparams import HParams, HParamsSource, recorded_flags
from electra_tf.modeling.bert_config import BertConfig, sized_encoder
from finetune.tasks import canonical_name, check_user_tasks, get_task

RUN_CONFIG = "finetuning_config.json"  # the run's FinetuningConfig, saved beside its fine-tuned models

RECIPES = ("code", "paper")
LOSS_REDUCTIONS = ("sum", "mean")
STRATEGIES = (None, "auto", "one_device", "mirrored", "multi_worker")
SIZE_PRESETS = {
    "small": dict(embedding_size=128),
    "small++": dict(embedding_size=128),
    "tiny": dict(embedding_size=64),
    "base": {},
    "large": dict(learning_rate=5e-5, layerwise_lr_decay=0.9),
}
PAPER_RECIPE = {"small": dict(learning_rate=3e-4), "small++": dict(learning_rate=3e-4)}
PAPER_WEIGHT_DECAY = 0.0
LONG_TASKS = ("rte", "sts")  # 10 epochs when trained alone
DEBUG_PRESETS = dict(num_trials=1, iterations_per_loop=1, train_batch_size=32, num_train_epochs=3.0,
                     log_examples=True, max_examples=100)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InputError(message)


@dataclasses.dataclass
class FinetuningConfig(HParams):
    """Every fine-tuning hyper-parameter of the original (docs/fidelity.md#fine-tuning-config) plus
    this project's additions."""

    model_name: str
    data_dir: str
    # General
    debug: bool = False
    log_examples: bool = False  # print the first featurized examples of each task
    num_trials: int = 1  # fine-tuning runs from the same checkpoint, seeds seed, seed + 1, ...
    do_train: bool = True
    do_eval: bool = True
    keep_all_models: bool = True  # keep each trial's finetuning_models/<tasks>_model_<trial>
    model_size: str = "small"
    task_names: List[str] = dataclasses.field(default_factory=lambda: ["chunk"])
    # the user's own tasks: {name: spec} (finetune.task_specs; docs/finetuning.md, "Your own tasks")
    tasks: dict = dataclasses.field(default_factory=dict)
    model_hparam_overrides: dict = dataclasses.field(default_factory=dict, metadata={"fields": BertConfig})
    embedding_size: Optional[int] = None
    vocab_size: int = 30522
    do_lower_case: Optional[bool] = None  # None: as init_checkpoint records it; True where it records nothing
    do_strip_accents: Optional[bool] = None  # as do_lower_case; not in the original, which always stripped
    # Training
    recipe: str = "code"  # "code": the original code's defaults; "paper": Table 7's values
    learning_rate: float = 1e-4
    weight_decay_rate: float = 0.01
    layerwise_lr_decay: float = 0.8
    # The original gives the top layer decay^2 (an off-by-one, docs/fidelity.md#layer-wise-decay);
    # true gives it decay^1.
    fixed_layerwise_decay: bool = False
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    save_checkpoints_steps: int = 1000000
    iterations_per_loop: int = 1000  # steps between progress lines
    use_tfrecords_if_existing: bool = True
    loss_reduction: str = "sum"  # "sum" over the batch as the original, or "mean"
    seed: int = 1234
    # None: one device as the original; "one_device", "mirrored" (every local GPU, or the CPU),
    # "multi_worker" (the cluster of the TF_CONFIG environment variable) or "auto" (mirrored with
    # more than one GPU): electra_tf.training.distribution.create_strategy's
    strategy: Optional[str] = None
    # "mixed_bfloat16": bfloat16 compute, float32 variables, losses and outputs (docs/finetuning.md);
    # "mixed_float16": float16 compute the same way, with dynamic loss scaling
    precision: str = "float32"
    # Evaluation, checkpoints, outputs
    evaluate_every_epoch: bool = True  # dev scores after each epoch
    # dev scores every this many steps (and after the last) instead of after each epoch
    eval_every_steps: Optional[int] = None
    keep_best_model: bool = False  # use (and keep) the epoch with the best dev score
    # stop after this many evaluations without a better main dev score, keeping the best (None: off)
    early_stopping_patience: Optional[int] = None
    write_test_outputs: bool = False  # GLUE-server TSVs in results/glue_test/, SQuAD 2.0's test answers
    n_writes_test: int = 5  # test predictions are considered for the first n trials
    # Sizing and inputs
    max_seq_length: int = 128
    train_batch_size: int = 32
    # each training batch as this many micro-batches, one update with the memory of one (not in the
    # original: the update of the whole batch, for a device too small to hold it)
    gradient_accumulation_steps: int = 1
    eval_batch_size: int = 32
    predict_batch_size: int = 32
    double_unordered: bool = True
    dynamic_padding: bool = True  # pad each batch to its longest example, length-bucketed
    # true: only full batches, floor(n / batch) steps an epoch (this package before 2026-11-27, which
    # the paper replication keeps); false: the original's ceil(n / batch), the remainder in a last batch
    drop_last_partial_batch: bool = False
    # SQuAD 1.1 training: leave out the windows without the answer (the original's comment says so,
    # but its code keeps them, pointing at [CLS]; false keeps them too)
    drop_windows_without_answer: bool = False
    # chunk F1 by conlleval's rules (the CoNLL-2000 standard) instead of the original's scorer, which
    # ends a chunk only at B-, S- or O and so merges malformed predictions (finetune.chunking)
    conlleval_chunks: bool = False
    max_examples: Optional[int] = None  # read at most this many rows per file (debug: 100)
    random_init: bool = False  # skip the pretrained weights: the randomly initialised baseline
    # QA (the original's; for the SQuAD tasks)
    max_query_length: int = 64
    doc_stride: int = 128
    n_best_size: int = 20
    max_answer_length: int = 30
    answerable_classifier: bool = True
    answerable_uses_start_logits: bool = True
    answerable_weight: float = 0.5
    joint_prediction: bool = True
    beam_size: int = 20
    qa_na_threshold: float = -2.75
    # Paths; None means the original's default under data_dir/models/model_name
    vocab_file: Optional[str] = None
    init_checkpoint: Optional[str] = None
    raw_data_dir: Optional[str] = None  # holds <task>/train.tsv, ...
    finetuning_models_dir: Optional[str] = None
    results_dir: Optional[str] = None

    FIXED = ("model_name", "data_dir")
    ADDED_FIELDS = {"do_strip_accents": True,  # every run saved before the field stripped accents
                    "gradient_accumulation_steps": 1}

    @classmethod
    def from_hparams(cls, model_name: str, data_dir, hparams: HParamsSource = None):
        return cls.merge({"model_name": model_name, "data_dir": str(data_dir)}, hparams)

    @classmethod
    def _translate(cls, user: dict, where: str) -> dict:
        if "task_names" in user:
            names = user["task_names"]
            _require(isinstance(names, list) and names and all(isinstance(n, str) for n in names),
                     f"task_names in {where} must be a non-empty list of task names")
            user_tasks = user.get("tasks", {})
            check_user_tasks(user_tasks)
            user = {**user, "task_names": [canonical_name(n, user_tasks) for n in names]}
        return user

    @classmethod
    def _presets(cls, values: dict) -> dict:
        size = values["model_size"]
        _require(size in ARCHITECTURES, f"model_size {size!r} is not one of: {', '.join(ARCHITECTURES)}")
        recipe = values["recipe"]
        _require(recipe in RECIPES, f"recipe {recipe!r} is not one of: {', '.join(RECIPES)}")
        presets = dict(SIZE_PRESETS[size])
        if recipe == "paper":
            presets.update(PAPER_RECIPE.get(size, {}), weight_decay_rate=PAPER_WEIGHT_DECAY)
        tasks = values["task_names"]
        if len(tasks) == 1:
            presets["num_train_epochs"] = 10.0 if tasks[0] in LONG_TASKS else 3.0
            presets.update(get_task(tasks[0], values["tasks"]).presets)  # squad*: 512 tokens, 2 epochs; tagging: 256
            if "max_seq_length" in presets:  # no longer than the model's position table
                positions = values["model_hparam_overrides"].get("max_position_embeddings",
                                                                 BertConfig.max_position_embeddings)  # type-checked
                presets["max_seq_length"] = min(presets["max_seq_length"], positions)
        if values["debug"]:
            presets.update(DEBUG_PRESETS)
        return presets

    def __post_init__(self):
        check_user_tasks(self.tasks)
        self.task_names = [canonical_name(name, self.tasks) for name in self.task_names]
        pretrained = os.path.join(self.data_dir, "models", self.model_name)
        defaults = {"init_checkpoint": pretrained,
                    "raw_data_dir": os.path.join(self.data_dir, "finetuning_data"),
                    "finetuning_models_dir": os.path.join(pretrained, "finetuning_models"),
                    "results_dir": os.path.join(pretrained, "results")}
        for name, value in defaults.items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if self.vocab_file is None:  # the vocab the weights to start from were trained with (the model dir's by default)
            self.vocab_file = (vocab_beside(self.init_checkpoint) or vocab_beside(pretrained)
                               or os.path.join(self.data_dir, "vocab.txt"))
        if None in (self.do_lower_case, self.do_strip_accents):  # as the weights to start from were trained
            trial = Path(self.init_checkpoint) / RUN_CONFIG  # a fine-tuned trial's dir, evaluated or trained further
            recorded = casing_beside(self.init_checkpoint) or recorded_flags(trial, CASING_FIELDS)
            for name in CASING_FIELDS:
                if getattr(self, name) is None:
                    setattr(self, name, recorded.get(name, True))
        self._validate()

    @property
    def tasks_key(self) -> str:
        """The tasks joined as the original names its files: `mrpc_sts`."""
        return "_".join(self.task_names)

    @property
    def keeps_best(self) -> bool:
        """Whether a trial ends with its best evaluation's weights (keep_best_model, or early stopping)."""
        return self.keep_best_model or self.early_stopping_patience is not None

    def model_dir(self, trial: int) -> str:
        return os.path.join(self.finetuning_models_dir, f"{self.tasks_key}_model_{trial}")

    def encoder_config(self) -> BertConfig:
        """The discriminator encoder of `model_size` (with `debug`, the original's debug model, as
        pretraining's), embedding_size and model_hparam_overrides."""
        hidden, layers = DEBUG_ARCHITECTURE if self.debug else ARCHITECTURES[self.model_size]
        overrides = {"embedding_size": self.embedding_size,
                     **({"num_attention_heads": DEBUG_ATTENTION_HEADS} if self.debug else {}),
                     **self.model_hparam_overrides}
        _require("vocab_size" not in overrides, "model_hparam_overrides may not set vocab_size: set the "
                 "vocab_size hparam (it must match the vocab file)")
        return sized_encoder(BertConfig(vocab_size=self.vocab_size),
                             hidden_size=overrides.pop("hidden_size", hidden),
                             num_hidden_layers=overrides.pop("num_hidden_layers", layers), **overrides)

    def _validate(self) -> None:
        _require(self.model_size in ARCHITECTURES, f"model_size {self.model_size!r} is not one of: "
                 f"{', '.join(ARCHITECTURES)}")
        _require(self.recipe in RECIPES, f"recipe {self.recipe!r} is not one of: {', '.join(RECIPES)}")
        _require(self.loss_reduction in LOSS_REDUCTIONS,
                 f"loss_reduction {self.loss_reduction!r} is not one of: {', '.join(LOSS_REDUCTIONS)}")
        _require(self.gradient_accumulation_steps >= 1,
                 f"gradient_accumulation_steps {self.gradient_accumulation_steps} must be at least 1")
        _require(self.precision in PRECISIONS,
                 f"precision {self.precision!r} is not one of: {', '.join(PRECISIONS)}")
        _require(self.strategy in STRATEGIES, f"strategy {self.strategy!r} is not one of: "
                 f"{', '.join(map(str, STRATEGIES))} (tpu fine-tuning is not supported yet)")
        _require(len(set(self.task_names)) == len(self.task_names),
                 f"task_names {self.task_names} names a task twice")
        _require(self.do_train or self.do_eval or self.write_test_outputs,
                 "do_train, do_eval and write_test_outputs are all false: nothing to do")
        _require(self.num_trials >= 1, f"num_trials {self.num_trials} must be at least 1 (the original's "
                 f"negative value, looping forever, is not supported)")
        for name in ("max_seq_length", "train_batch_size", "eval_batch_size", "predict_batch_size",
                     "iterations_per_loop", "save_checkpoints_steps", "vocab_size", "doc_stride", "max_query_length",
                     "n_best_size", "max_answer_length", "beam_size"):
            _require(getattr(self, name) >= 1, f"{name} {getattr(self, name)} must be at least 1")
        _require(self.max_seq_length >= 5, f"max_seq_length {self.max_seq_length} must be at least 5")
        for name in ("eval_every_steps", "early_stopping_patience"):
            _require(getattr(self, name) is None or getattr(self, name) >= 1,
                     f"{name} {getattr(self, name)} must be None or at least 1")
        _require(self.early_stopping_patience is None or self.do_eval,
                 "early_stopping_patience needs do_eval: it stops on the dev scores")
        _require(self.max_examples is None or self.max_examples >= 1,
                 f"max_examples {self.max_examples} must be None or at least 1")
        _require(0 <= self.seed and self.seed + self.num_trials - 1 < 2 ** 32,
                 f"seed {self.seed} must be at least 0, and seed + num_trials - 1 below 2**32 (NumPy's seeds)")
        _require(self.learning_rate > 0, f"learning_rate {self.learning_rate} must be positive")
        _require(self.num_train_epochs > 0, f"num_train_epochs {self.num_train_epochs} must be positive")
        _require(0 <= self.warmup_proportion <= 1, f"warmup_proportion {self.warmup_proportion} must be in [0, 1]")
        _require(self.weight_decay_rate >= 0, f"weight_decay_rate {self.weight_decay_rate} must not be negative")
        if self.do_train and self.init_checkpoint:
            source = os.path.realpath(self.init_checkpoint)
            for trial in range(1, self.num_trials + 1):
                replaced = os.path.realpath(self.model_dir(trial))  # wiped as the trial starts
                _require(os.path.commonpath([source, replaced]) != replaced,
                         f"init_checkpoint {self.init_checkpoint} lies in {self.model_dir(trial)}, which trial "
                         f"{trial} of this run replaces: copy it elsewhere first")
        encoder = self.encoder_config()
        _require(self.max_seq_length <= encoder.max_position_embeddings,
                 f"max_seq_length {self.max_seq_length} exceeds max_position_embeddings "
                 f"{encoder.max_position_embeddings}")

