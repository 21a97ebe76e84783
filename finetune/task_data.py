"""Reading and featurizing every split a run needs, once for all its trials.

`TaskData` holds the run's tasks (`finetune.task.Task`, from `finetune.tasks.run_tasks`), the
training examples of all of them as one set (one task's own features, or `MixedFeatures`: the
original's multi-task runs shuffle every task's examples together), each dev split (MNLI: matched
and mismatched) and, when test outputs are asked for, each test split. `train_batch` makes a
training batch of any of them; every batch carries `batch_spec`'s keys.
"""

import dataclasses
import functools
from typing import Callable, Dict, List, Optional, Union

import tensorflow as tf

from electra_tf.errors import InputError
from electra_tf.tokenization import Tokenizer, load_vocab
from finetune.config import FinetuningConfig
from finetune.inputs import Features
from finetune.multitask import MixedFeatures, batch_spec, complete, mixed_batch
from finetune.task import EvalSplit, Task
from finetune.tasks import run_tasks


@dataclasses.dataclass
class TaskData:
    tasks: List[Task]
    train: Optional[Union[Features, MixedFeatures]]
    dev: List[EvalSplit]
    test: List[EvalSplit]

    @property
    def batch_spec(self) -> Dict[str, tf.TensorSpec]:
        return batch_spec(self.tasks)

    def train_batch(self, features, indices, pad_to: Optional[int] = None) -> dict:
        """A training batch of `train`'s examples at `indices` (`finetune.inputs.train_batches`' maker)."""
        if len(self.tasks) > 1:
            return mixed_batch(features, indices, pad_to, self.batch_spec)
        return complete(self.tasks[0].make_batch(features, indices, pad_to), self.batch_spec)

    def split_batch(self, split: EvalSplit) -> Callable[..., dict]:
        """`(features, indices, pad_to) -> batch` for an evaluation split (one task's examples)."""
        spec = self.batch_spec
        return lambda features, indices, pad_to=None: complete(split.task.make_batch(features, indices, pad_to), spec)


def make_tokenizer(config: FinetuningConfig) -> Tokenizer:
    """The run's tokenizer; one per vocab and casing in a process, since building one (its WordPiece
    model and traced function) costs about half a second, a sixth of a tiny trial (the replication
    runs one trial per `run`)."""
    vocab = tuple(load_vocab(config.vocab_file))
    if len(vocab) != config.vocab_size:
        raise InputError(f"vocab file {config.vocab_file} has {len(vocab)} tokens but vocab_size is "
                         f"{config.vocab_size}; set \"vocab_size\": {len(vocab)} in --hparams")
    return _tokenizer(str(config.vocab_file), vocab, bool(config.do_lower_case), bool(config.do_strip_accents))


@functools.lru_cache(maxsize=4)
def _tokenizer(vocab_file: str, vocab: tuple, do_lower_case: bool, do_strip_accents: bool) -> Tokenizer:
    """Keyed by the vocab's tokens too: a file rewritten in place gets a new tokenizer."""
    return Tokenizer(vocab_file, do_lower_case=do_lower_case, strip_accents=do_strip_accents)


def _log_example(task: Task, split: str, features: Features, tokenizer: Tokenizer) -> None:
    tokens = " ".join(tokenizer.convert_ids_to_tokens(features.token_ids[0]))
    print(f"{task.name} {split} example 0:\n  tokens: {tokens}\n"
          f"  segment_ids: {' '.join(map(str, features.segment_ids[0]))}", flush=True)


def load_task_data(config: FinetuningConfig, tokenizer: Tokenizer) -> TaskData:
    tasks = run_tasks(config)

    def split_features(task_id: int, task: Task, split: str, limit: Optional[int]):
        examples = task.read(config, split, limit)
        features = task.featurize(examples, tokenizer, config, task_id, split)
        if features.cut:  # the original cuts silently; a user's long texts should not be
            print(f"{task.name} {split}: {features.cut:,} of {len(examples):,} examples do not fit "
                  f"max_seq_length {config.max_seq_length} tokens and were cut", flush=True)
        if config.log_examples and len(features):
            _log_example(task, split, features, tokenizer)
        return examples, features

    train_parts, dev, test = [], [], []
    for task_id, task in enumerate(tasks):
        if config.do_train:
            train_parts.append(split_features(task_id, task, "train", config.max_examples)[1])
        if config.do_eval or config.keep_best_model:
            for prefix, stem in task.dev_files:
                dev.append(EvalSplit(task_id, task, stem, prefix, *split_features(task_id, task, stem,
                                                                                  config.max_examples)))
        if config.write_test_outputs:  # max_examples never cuts a test file: a submission needs every row
            for name, stem in task.test_splits(config):
                test.append(EvalSplit(task_id, task, stem, name, *split_features(task_id, task, stem, None)))
    train = None
    if train_parts:  # a single task keeps its own features
        train = train_parts[0] if len(train_parts) == 1 else MixedFeatures(tasks, train_parts)
    return TaskData(tasks, train, dev, test)  # fewer rows than a batch: one (partial) batch an epoch, as the original
