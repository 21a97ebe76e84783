"""The packing rules of the original ExampleBuilder, driven by a scripted random generator."""

import random

import numpy as np
import pytest

from pretrain_data.packing import ExampleBuilder, assemble

CLS, SEP = 101, 102
TOKENS = np.arange(100000, dtype=np.int64)  # token id == its offset, so spans read as ids


class ScriptedRandom(random.Random):
    """random() returns the scripted values in order; randint returns the scripted integers."""

    def __init__(self, uniforms, integers=()):
        super().__init__(0)
        self.uniforms = list(uniforms)
        self.integers = list(integers)

    def random(self):
        return self.uniforms.pop(0)

    def randint(self, a, b):
        value = self.integers.pop(0)
        assert a <= value <= b
        return value


def sentence(start, length):
    """A sentence as the span of its tokens (ids start .. start + length - 1)."""
    return start, start + length


def ids(start, length):
    return list(range(start, start + length))


def rows(example, max_length):
    """The example's input_ids and segment_ids, unpadded, as lists."""
    input_ids, segment_ids, lengths = assemble([example], TOKENS, max_length, CLS, SEP)
    return input_ids[0, :lengths[0]].tolist(), segment_ids[0, :lengths[0]].tolist()


def test_two_segments_split_at_half_target():
    # draws: single-segment? no (0.5); coin for sentence 2 -> second (0.9); short target? no (0.9)
    builder = ExampleBuilder(16, ScriptedRandom([0.5, 0.9, 0.9]))
    assert builder.add_sentence(*sentence(1000, 4)) is None
    assert builder.add_sentence(*sentence(2000, 4)) is None
    example = builder.add_sentence(*sentence(3000, 8))  # 16 >= target 16
    # first target (16-3)//2 = 6: sentence 1 opens the first segment; 4+4 = 8 does not fit, the
    # second segment is empty and 4 < 6, so a coin decides: 0.9 >= 0.5 -> second segment.
    input_ids, segment_ids = rows(example, 16)
    assert example.first_length == 4
    # max 16: first 4, second cut to 16 - 4 - 3 = 9 of its 12 tokens
    assert example.second_length == 9 and example.discarded == 3
    assert input_ids == [CLS] + ids(1000, 4) + [SEP] + ids(2000, 4) + ids(3000, 5) + [SEP]
    assert segment_ids == [0] * 6 + [1] * 10 and example.length == 16


def test_coin_flip_puts_second_sentence_into_first_segment():
    # single? no (0.5); coin for sentence 2 (first=4 < 5, second empty): 0.2 < 0.5 -> first; short? no
    builder = ExampleBuilder(16, ScriptedRandom([0.5, 0.2, 0.9]))
    builder.add_sentence(*sentence(1000, 4))
    builder.add_sentence(*sentence(2000, 4))
    example = builder.add_sentence(*sentence(3000, 8))
    assert example.first_length == 8  # 4 + 4 (coin), then 8 >= target 6 -> second
    assert example.second_length == 5  # 16 - 8 - 3
    assert rows(example, 16)[0][1:9] == ids(1000, 4) + ids(2000, 4)


def test_single_segment_draw_and_truncation():
    # single segment (0.05 < 0.1); then short target (0.01 < 0.05) with randint -> 7
    builder = ExampleBuilder(12, ScriptedRandom([0.05, 0.01], integers=[7]))
    example = builder.add_sentence(*sentence(1000, 30))
    assert example.second_length == 0 and example.first_length == 10
    assert rows(example, 12) == ([CLS] + ids(1000, 10) + [SEP], [0] * 12)
    assert example.discarded == 20 and not example.short_target
    assert builder.target_length == 7
    # the next example is built under the short target and counted as short
    builder.rng.uniforms = [0.5, 0.9]
    assert builder.add_sentence(*sentence(2000, 3)) is None
    short = builder.add_sentence(*sentence(3000, 5))
    assert short.short_target
    # first target (7-3)//2 = 2 but the first segment takes the first sentence whatever its length
    assert short.first_length == 3 and short.second_length == 5
    assert builder.stats.examples == 2 and builder.stats.short_target == 1
    assert builder.stats.single_segment == 1 and builder.stats.discarded_tokens == 20
    assert builder.stats.single_segment_draw == 1 and example.single_segment_draw
    assert not short.single_segment_draw


def test_document_end_flushes_and_empty_flush_is_noop():
    builder = ExampleBuilder(64, ScriptedRandom([0.5, 0.9]))
    assert builder.end_document() is None
    builder.add_sentence(*sentence(1000, 5))
    example = builder.end_document()
    assert rows(example, 64)[0] == [CLS] + ids(1000, 5) + [SEP]
    assert builder.end_document() is None


def test_seeded_builders_are_reproducible():
    def run(seed):
        builder = ExampleBuilder(32, random.Random(seed))
        rng = random.Random(99)
        out = []
        for i in range(500):
            example = builder.add_sentence(*sentence(i * 100, rng.randint(1, 20)))
            if example:
                out.append(rows(example, 32)[0])
        return out

    assert run("a") == run("a")
    assert run("a") != run("b")


def test_empty_sentence_does_not_count_as_a_filled_first_segment():
    # The original tests len(first_segment) == 0 on tokens: after a sentence with no tokens, the next
    # sentence still opens segment A, however long; no coin is drawn (only single? and short? draws).
    builder = ExampleBuilder(16, ScriptedRandom([0.5, 0.9]))
    assert builder.add_sentence(*sentence(500, 0)) is None
    assert builder.add_sentence(*sentence(1000, 10)) is None
    example = builder.add_sentence(*sentence(2000, 8))
    assert (example.first_length, example.second_length) == (10, 3)
    assert rows(example, 16)[0] == [CLS] + ids(1000, 10) + [SEP] + ids(2000, 3) + [SEP]
