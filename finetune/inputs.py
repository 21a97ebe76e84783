"""From examples to padded batches: tokenization, BERT pair truncation, length-bucketed batching.

A featurized split (`Features`) keeps every example's token ids unpadded. Batches are padded when
they are made: to the longest example of the batch (`dynamic` padding; training batches are drawn
from length-sorted buckets of shuffled examples, so a batch holds examples of similar length) or
to `max_seq_length` (the original's fixed shapes). Every batch is a dict of NumPy arrays:

    input_ids, input_mask, segment_ids  int32 [B, L]
    task_id                             int32 [B]   which task (head) the example belongs to
    label_ids                           int32 [B]   class position (0 for regression tasks)
    targets                             float32 [B] regression target (0 for classification)
"""

import dataclasses
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np

from electra_tf.tokenization import Tokenizer

BUCKET_BATCHES = 50  # a training bucket holds this many batches' worth of shuffled examples
_TOKENIZE_CHUNK = 4096


@dataclasses.dataclass
class Features:
    token_ids: List[np.ndarray]  # each int32 [length]: [CLS] a [SEP] (b [SEP])
    segment_ids: List[np.ndarray]  # each int32 [length]
    task_id: np.ndarray  # int32 [N]
    label_ids: np.ndarray  # int32 [N]
    targets: np.ndarray  # float32 [N]
    cut: int = dataclasses.field(default=0, kw_only=True)  # examples max_seq_length cut short

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(ids) for ids in self.token_ids], np.int64)

    @staticmethod
    def concatenate(parts: Sequence["Features"]) -> "Features":
        return Features([t for p in parts for t in p.token_ids], [s for p in parts for s in p.segment_ids],
                        np.concatenate([p.task_id for p in parts]), np.concatenate([p.label_ids for p in parts]),
                        np.concatenate([p.targets for p in parts]), cut=sum(p.cut for p in parts))


def _tokenize(tokenizer: Tokenizer, texts: List[str]) -> List[np.ndarray]:
    pieces = []
    for start in range(0, len(texts), _TOKENIZE_CHUNK):
        flat, splits = tokenizer.tokenize_batch(texts[start:start + _TOKENIZE_CHUNK])
        pieces += [flat[splits[i]:splits[i + 1]] for i in range(len(splits) - 1)]
    return pieces


def truncate_pair(a: list, b: list, max_tokens: int) -> Tuple[list, list]:
    """BERT's `_truncate_seq_pair`: drop the last token of the longer text (b on ties) until they fit."""
    a, b = list(a), list(b)
    while len(a) + len(b) > max_tokens:
        if len(a) > len(b):
            a.pop()
        else:
            b.pop()
    return a, b


def featurize(examples, tokenizer: Tokenizer, max_seq_length: int, task_id: int,
              is_regression: bool) -> Features:
    """`[CLS] a [SEP]` (segment 0) `b [SEP]` (segment 1), truncated to max_seq_length tokens; an
    example whose second text has no tokens is `[CLS] a [SEP]` alone, as the original decides per
    example (`if tokens_b:`)."""
    tokens_a = _tokenize(tokenizer, [e.text_a for e in examples])
    pairs = examples[0].text_b is not None
    tokens_b = _tokenize(tokenizer, [e.text_b for e in examples]) if pairs else [[]] * len(examples)
    token_ids, segment_ids, cut = [], [], 0
    for a, b in zip(tokens_a, tokens_b):
        # the original's `if tokens_b:` before the cut (the budget) and after it (a second text cut to
        # nothing, at max_seq_length 4 and below, is no segment)
        budget = max_seq_length - (3 if len(b) else 2)
        cut += len(a) + len(b) > budget
        a, b = truncate_pair(a, b, budget)
        ids = [tokenizer.cls_id, *a, tokenizer.sep_id] + ([*b, tokenizer.sep_id] if len(b) else [])
        token_ids.append(np.asarray(ids, np.int32))
        segment_ids.append(np.asarray([0] * (len(a) + 2) + [1] * (len(ids) - len(a) - 2), np.int32))
    labels = [0.0 if e.label is None else e.label for e in examples]
    return Features(token_ids, segment_ids, np.full(len(examples), task_id, np.int32),
                    np.asarray([0 if is_regression else int(x) for x in labels], np.int32),
                    np.asarray([float(x) if is_regression else 0.0 for x in labels], np.float32), cut=cut)


def pad_batch(features: Features, indices: Sequence[int], pad_to: Optional[int] = None) -> dict:
    """The examples at `indices` as one batch, padded with id 0 to `pad_to` or to the longest."""
    length = pad_to or max(len(features.token_ids[i]) for i in indices)
    input_ids = np.zeros([len(indices), length], np.int32)
    segment_ids = np.zeros([len(indices), length], np.int32)
    input_mask = np.zeros([len(indices), length], np.int32)
    for row, i in enumerate(indices):
        n = len(features.token_ids[i])
        input_ids[row, :n] = features.token_ids[i]
        segment_ids[row, :n] = features.segment_ids[i]
        input_mask[row, :n] = 1
    indices = np.asarray(indices)
    return {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids,
            "task_id": features.task_id[indices], "label_ids": features.label_ids[indices],
            "targets": features.targets[indices]}


def epoch_batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator, dynamic: bool,
                  keep_partial: bool = True) -> List[np.ndarray]:
    """One epoch's batches of example indices, in random order: every example once, the remainder in
    a smaller batch, or with `keep_partial` false only the full batches. The original pads its data
    to a multiple of the batch with rows of zero loss: as many steps and real rows an epoch, its
    padding rows spread over the batches near each epoch's end; with the summed loss a padding row
    adds nothing. With `dynamic`, buckets of BUCKET_BATCHES batches of shuffled examples are sorted
    by length before being cut into batches."""
    order = rng.permutation(len(lengths))
    if dynamic:
        bucket = batch_size * BUCKET_BATCHES
        order = np.concatenate([chunk[np.argsort(lengths[chunk], kind="stable")]
                                for chunk in np.split(order, range(bucket, len(order), bucket))])
    end = len(order) if keep_partial else len(order) - batch_size + 1
    batches = [order[i:i + batch_size] for i in range(0, end, batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def train_batches(features: Features, batch_size: int, num_steps: int, rng: np.random.Generator,
                  dynamic: bool, max_seq_length: int, make_batch=pad_batch, start: int = 0,
                  keep_partial: bool = True) -> Iterator[dict]:
    """Training batches `start + 1` .. `num_steps`, epoch after epoch (made by `make_batch`, a task's
    own for SQuAD and chunking). The first `start` are drawn from `rng` but not made, so a resumed
    run gets the batches it would have had."""
    lengths = features.lengths
    produced = 0
    while produced < num_steps:
        for indices in epoch_batches(lengths, batch_size, rng, dynamic, keep_partial)[:num_steps - produced]:
            if produced >= start:
                yield make_batch(features, indices, None if dynamic else max_seq_length)
            produced += 1


def eval_batches(features: Features, batch_size: int, dynamic: bool, max_seq_length: int,
                 make_batch=pad_batch) -> Iterator[Tuple[np.ndarray, dict]]:
    """(example indices, batch) covering every example once; sorted by length when `dynamic`."""
    order = np.argsort(features.lengths, kind="stable") if dynamic else np.arange(len(features))
    for start in range(0, len(order), batch_size):
        indices = order[start:start + batch_size]
        yield indices, make_batch(features, indices, None if dynamic else max_seq_length)


def steps_per_epoch(num_examples: int, batch_size: int, keep_partial: bool = True) -> int:
    """The original's: its examples padded up to a multiple of the batch, then divided (`keep_partial`);
    else the full batches alone."""
    return -(-num_examples // batch_size) if keep_partial else num_examples // batch_size
