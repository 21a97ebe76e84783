"""The pretraining TFRecord schema, identical to the original release's.

Each record is a `tf.train.Example` with three int64 lists of exactly `max_seq_length` values:
- `input_ids`: `[CLS] A [SEP] (B [SEP])` then zero padding;
- `input_mask`: 1 on real tokens, 0 on padding;
- `segment_ids`: 0 for `[CLS]`, A and the first `[SEP]`; 1 for B and the last `[SEP]`; 0 on padding.
No masking is stored: masking is dynamic, in the training graph. Shards are named
`pretrain_data.tfrecord-{i}-of-{n}` as the original, so either project reads the other's data.
"""

from typing import Dict, Sequence

import tensorflow as tf

FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids")
SHARD_PREFIX = "pretrain_data.tfrecord"
EVAL_SUBDIR = "eval"  # held-out shards live in <output_dir>/eval/, outside the default training glob


def shard_name(index: int, count: int) -> str:
    return f"{SHARD_PREFIX}-{index}-of-{count}"


def serialize_example(input_ids: Sequence[int], segment_ids: Sequence[int], max_seq_length: int) -> bytes:
    """Pads one example to `max_seq_length` and serializes it in the original's schema."""
    length = len(input_ids)
    padding = [0] * (max_seq_length - length)
    features = {
        "input_ids": list(input_ids) + padding,
        "input_mask": [1] * length + padding,
        "segment_ids": list(segment_ids) + padding,
    }
    example = tf.train.Example(features=tf.train.Features(feature={
        name: tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        for name, values in features.items()
    }))
    return example.SerializeToString()


def feature_spec(max_seq_length: int) -> Dict[str, tf.io.FixedLenFeature]:
    return {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in FEATURE_NAMES}


def parse_examples(serialized: tf.Tensor, max_seq_length: int) -> Dict[str, tf.Tensor]:
    """Parses a batch of serialized records ([B] strings) into int32 tensors [B, max_seq_length]."""
    parsed = tf.io.parse_example(serialized, feature_spec(max_seq_length))
    return {name: tf.cast(parsed[name], tf.int32) for name in FEATURE_NAMES}


def record_length(path: str) -> int:
    """The length of the `input_ids` list in the first record of a file (to check max_seq_length)."""
    for raw in tf.data.TFRecordDataset(path).take(1):
        example = tf.train.Example.FromString(raw.numpy())
        return len(example.features.feature["input_ids"].int64_list.value)
    return -1
