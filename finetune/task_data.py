"""Reading and featurizing every split a run needs, once for all its trials.

`TaskData` holds, per task, the train features (all tasks concatenated into one training set, as
the original's multi-task runs do), each dev split (MNLI: matched and mismatched) and, when test
outputs are asked for, each test split with its examples (for their GLUE index).
"""

import dataclasses
import functools
from pathlib import Path
from typing import List, Optional

from electra_tf.errors import InputError
from electra_tf.tokenization import Tokenizer, load_vocab
from finetune.config import FinetuningConfig
from finetune.glue import Example, GlueTask, get_task, read_split, server_splits
from finetune.inputs import Features, featurize
from finetune.span_tasks import get_span_task


@dataclasses.dataclass
class EvalSplit:
    task_id: int
    task: GlueTask
    name: str  # file stem: dev, dev_matched, test_mismatched, diagnostic, ...
    prefix: str  # metric prefix ("mm_" for MNLI mismatched); for test splits the server file name
    examples: List[Example]
    features: Features


@dataclasses.dataclass
class TaskData:
    tasks: List[GlueTask]
    train: Optional[Features]
    dev: List[EvalSplit]
    test: List[EvalSplit]


def make_tokenizer(config: FinetuningConfig) -> Tokenizer:
    """The run's tokenizer; one per vocab and casing in a process, since building one (its WordPiece
    model and traced function) costs about half a second, a sixth of a tiny trial (the replication
    runs one trial per `run`)."""
    vocab = tuple(load_vocab(config.vocab_file))
    if len(vocab) != config.vocab_size:
        raise InputError(f"vocab file {config.vocab_file} has {len(vocab)} tokens but vocab_size is "
                         f"{config.vocab_size}; set \"vocab_size\": {len(vocab)} in --hparams")
    return _tokenizer(str(config.vocab_file), vocab, bool(config.do_lower_case))


@functools.lru_cache(maxsize=4)
def _tokenizer(vocab_file: str, vocab: tuple, do_lower_case: bool) -> Tokenizer:
    """Keyed by the vocab's tokens too: a file rewritten in place gets a new tokenizer."""
    return Tokenizer(vocab_file, do_lower_case=do_lower_case)


def _log_example(task: GlueTask, split: str, example: Example, features: Features, tokenizer: Tokenizer) -> None:
    tokens = " ".join(tokenizer.convert_ids_to_tokens(features.token_ids[0]))
    print(f"{task.name} {split} example 0: label {example.label!r}\n  tokens: {tokens}\n"
          f"  segment_ids: {' '.join(map(str, features.segment_ids[0]))}", flush=True)


def load_task_data(config: FinetuningConfig, tokenizer: Tokenizer) -> TaskData:
    root = Path(config.raw_data_dir)
    tasks = [get_span_task(name) or get_task(name) for name in config.task_names]
    limit = config.max_examples
    if len(tasks) > 1 and any(not isinstance(task, GlueTask) for task in tasks):
        raise InputError(f"task_names {config.task_names}: squad, squadv1 and chunk are fine-tuned alone, "
                         f"not in a multi-task run")

    def split_features(task_id, task, split):
        if not isinstance(task, GlueTask):  # SQuAD or chunking (finetune.span_tasks)
            examples = task.read(root, split, None if split == "test" else limit)  # test answers: every question
            return examples, task.featurize(examples, tokenizer, config, task_id, split)
        # max_examples never cuts a test file: a server submission needs every row
        rows = None if split in dict(server_splits(task)).values() else limit
        examples = read_split(root, task, split, rows, config.double_unordered)
        features = featurize(examples, tokenizer, config.max_seq_length, task_id, task.is_regression)
        if config.log_examples:
            _log_example(task, split, examples[0], features, tokenizer)
        return examples, features

    train_parts, dev, test = [], [], []
    for task_id, task in enumerate(tasks):
        if config.do_train:
            train_parts.append(split_features(task_id, task, "train")[1])
        if config.do_eval or config.keep_best_model:
            for prefix, stem in task.dev_files:
                dev.append(EvalSplit(task_id, task, stem, prefix, *split_features(task_id, task, stem)))
        if config.write_test_outputs and isinstance(task, GlueTask):
            for server_name, stem in server_splits(task):
                test.append(EvalSplit(task_id, task, stem, server_name, *split_features(task_id, task, stem)))
        elif config.write_test_outputs and getattr(task, "v2", False):  # SQuAD 2.0 (the original: no other)
            test.append(EvalSplit(task_id, task, "test", "", *split_features(task_id, task, "test")))
    train = None
    if train_parts:  # a single task keeps its own features (SQuAD's and chunking's carry more fields)
        train = train_parts[0] if len(train_parts) == 1 else Features.concatenate(train_parts)
    return TaskData(tasks, train, dev, test)  # fewer rows than a batch: one (partial) batch an epoch, as the original
