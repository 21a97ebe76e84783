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
caller) instead of the unseeded module-level one, which makes builds reproducible.
"""

import dataclasses
import random
from typing import List, Optional, Sequence

SINGLE_SEGMENT_PROB = 0.1
SHORT_TARGET_PROB = 0.05
MIN_SHORT_TARGET = 5


@dataclasses.dataclass
class PackedExample:
    """One example before padding: the id sequence and how it was made."""

    input_ids: List[int]  # [CLS] A [SEP] (B [SEP]), unpadded
    first_length: int  # len(A)
    second_length: int  # len(B); 0 means a single segment
    single_segment_draw: bool  # the 10 % draw chose one segment (B can also be empty for other reasons)
    short_target: bool  # built under a random target length < max_length
    discarded: int  # tokens cut by truncation

    @property
    def segment_ids(self) -> List[int]:
        return [0] * (self.first_length + 2) + [1] * (len(self.input_ids) - self.first_length - 2)


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
        self.tokens += len(example.input_ids)
        self.single_segment += example.second_length == 0
        self.single_segment_draw += example.single_segment_draw
        self.short_target += example.short_target
        self.discarded_tokens += example.discarded

    def merge(self, other: "PackingStats") -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


class ExampleBuilder:
    """Accumulates sentences of token ids and emits packed examples (see the module docstring)."""

    def __init__(self, max_length: int, cls_id: int, sep_id: int, rng: random.Random):
        self.max_length = max_length
        self.cls_id = cls_id
        self.sep_id = sep_id
        self.rng = rng
        self.target_length = max_length
        self.stats = PackingStats()
        self._sentences: List[Sequence[int]] = []
        self._length = 0

    def add_sentence(self, token_ids: Sequence[int]) -> Optional[PackedExample]:
        """Adds one sentence; returns an example once the accumulated length reaches the target."""
        self._sentences.append(token_ids)
        self._length += len(token_ids)
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
        first: List[int] = []
        second: List[int] = []
        for sentence in self._sentences:
            if (not first or len(first) + len(sentence) < first_target
                    or (not second and len(first) < first_target and rng.random() < 0.5)):
                first.extend(sentence)
            else:
                second.extend(sentence)
        total = len(first) + len(second)
        first = first[:self.max_length - 2]
        second = second[:max(0, self.max_length - len(first) - 3)]
        short_target = self.target_length < self.max_length
        self._sentences = []
        self._length = 0
        if rng.random() < SHORT_TARGET_PROB:
            self.target_length = rng.randint(MIN_SHORT_TARGET, self.max_length)
        else:
            self.target_length = self.max_length
        input_ids = [self.cls_id, *first, self.sep_id]
        if second:
            input_ids += [*second, self.sep_id]
        example = PackedExample(input_ids, len(first), len(second), single_segment_draw, short_target,
                                total - len(first) - len(second))
        self.stats.add(example)
        return example
