"""Packing sentences into fixed-length examples: the original release's `ExampleBuilder` algorithm.

Sentences (token-id lists) of one document accumulate until their total reaches the target
length, then become one example `[CLS] A [SEP] B [SEP]` padded with zeros:
- with probability 0.1 the example keeps a single segment (first-segment target 100000);
  otherwise the first segment's target is (target_length - 3) // 2;
- a sentence joins the first segment if the first segment is empty, or it still fits under that
  target, or (the second segment is still empty, the first is under its target and a coin flip
  < 0.5); otherwise it joins the second segment;
- the first segment is cut to max_length - 2 and the second to max_length - len(first) - 3
  tokens; what is cut is discarded, never carried over;
- after each example, with probability 0.05 the next target is randint(5, max_length), else
  max_length ("short" examples, so the model also sees short inputs);
- a document end (blank line or end of file) flushes whatever has accumulated.

The random draws happen in the original's order with the same probabilities; the only
difference is that the generator is an explicit `random.Random` (seeded per corpus file by the
caller) instead of the unseeded module-level one, which makes builds reproducible. The decisions
need only sentence lengths, so sentences are token spans and ids are copied once per example.
"""

import dataclasses
import random
from typing import List, Optional, Tuple

import numpy as np

SINGLE_SEGMENT_PROB = 0.1
SHORT_TARGET_PROB = 0.05
MIN_SHORT_TARGET = 5

Span = Tuple[int, int]  # [start, end) offsets of a sentence's tokens in the file's token array


@dataclasses.dataclass
class PackedExample:
    """One example as spans of the token array: which tokens form segments A and B."""

    first: List[Span]  # segment A, already truncated
    second: List[Span]  # segment B, already truncated; empty means a single segment
    first_length: int  # len(A)
    second_length: int  # len(B)
    single_segment_draw: bool  # the 10 % draw chose one segment (B can also be empty for other reasons)
    short_target: bool  # built under a random target length < max_length
    discarded: int  # tokens cut by truncation

    @property
    def length(self) -> int:
        """Tokens including [CLS] and the [SEP]s."""
        return self.first_length + 2 + (self.second_length + 1 if self.second_length else 0)


@dataclasses.dataclass
class PackingStats:
    """Counters over every example a builder produced."""

    examples: int = 0
    tokens: int = 0  # non-padding positions, [CLS]/[SEP] included
    single_segment: int = 0  # examples without a B segment, whatever the reason
    single_segment_draw: int = 0  # examples for which the 10 % draw chose a single segment
    short_target: int = 0
    discarded_tokens: int = 0

    def add(self, example: PackedExample) -> None:
        self.examples += 1
        self.tokens += example.length
        self.single_segment += example.second_length == 0
        self.single_segment_draw += example.single_segment_draw
        self.short_target += example.short_target
        self.discarded_tokens += example.discarded

    def merge(self, other: "PackingStats") -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


def _truncate(spans: List[Span], budget: int) -> List[Span]:
    """The spans cut to their first `budget` tokens."""
    kept = []
    for start, end in spans:
        if budget <= 0:
            break
        end = min(end, start + budget)
        kept.append((start, end))
        budget -= end - start
    return kept


class ExampleBuilder:
    """Accumulates sentences (token spans) and emits packed examples (see the module docstring).

    Only lengths drive the decisions, so sentences are passed as spans of one token array and the
    ids are filled in afterwards, all examples at once (`assemble`).
    """

    def __init__(self, max_length: int, rng: random.Random):
        self.max_length = max_length
        self.rng = rng
        self.target_length = max_length
        self.stats = PackingStats()
        self._sentences: List[Span] = []
        self._length = 0

    def add_sentence(self, start: int, end: int) -> Optional[PackedExample]:
        """Adds the sentence tokens[start:end]; returns an example once the target length is reached."""
        self._sentences.append((start, end))
        self._length += end - start
        if self._length >= self.target_length:
            return self._create_example()
        return None

    def end_document(self) -> Optional[PackedExample]:
        """A document boundary: flushes pending sentences into a (possibly short) example."""
        if self._length:
            return self._create_example()
        self._sentences = []
        return None

    def _create_example(self) -> PackedExample:
        rng = self.rng
        single_segment_draw = rng.random() < SINGLE_SEGMENT_PROB
        if single_segment_draw:
            first_target = 100000
        else:
            first_target = (self.target_length - 3) // 2
        first: List[Span] = []
        second: List[Span] = []
        first_length = second_length = 0
        for start, end in self._sentences:
            length = end - start
            # Emptiness is by token count, as the original's `len(first_segment) == 0`.
            if (first_length == 0 or first_length + length < first_target
                    or (second_length == 0 and first_length < first_target and rng.random() < 0.5)):
                first.append((start, end))
                first_length += length
            else:
                second.append((start, end))
                second_length += length
        total = first_length + second_length
        first_length = min(first_length, self.max_length - 2)
        second_length = min(second_length, max(0, self.max_length - first_length - 3))
        short_target = self.target_length < self.max_length
        self._sentences = []
        self._length = 0
        if rng.random() < SHORT_TARGET_PROB:
            self.target_length = rng.randint(MIN_SHORT_TARGET, self.max_length)
        else:
            self.target_length = self.max_length
        example = PackedExample(_truncate(first, first_length), _truncate(second, second_length),
                                first_length, second_length, single_segment_draw, short_target,
                                total - first_length - second_length)
        self.stats.add(example)
        return example


def assemble(examples: List[PackedExample], tokens: np.ndarray, max_length: int, cls_id: int,
             sep_id: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fills in token ids: `[CLS] A [SEP] (B [SEP])` zero-padded.

    Returns input_ids and segment_ids, int64 [n, max_length], and the lengths [n].
    """
    count = len(examples)
    ids = np.zeros([count, max_length], np.int64)
    segments = np.zeros([count, max_length], np.int64)
    lengths = np.empty([count], np.int64)
    for row, example in enumerate(examples):
        ids[row, 0] = cls_id
        end = 1 + example.first_length
        if example.first:
            ids[row, 1:end] = np.concatenate([tokens[a:b] for a, b in example.first])
        ids[row, end] = sep_id
        end += 1
        if example.second_length:
            stop = end + example.second_length
            ids[row, end:stop] = np.concatenate([tokens[a:b] for a, b in example.second])
            ids[row, stop] = sep_id
            segments[row, end:stop + 1] = 1
            end = stop + 1
        lengths[row] = end
    return ids, segments, lengths
