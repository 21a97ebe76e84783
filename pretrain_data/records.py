"""The pretraining TFRecord schema, identical to the original release's.

Each record is a `tf.train.Example` with three int64 lists of exactly `max_seq_length` values:
- `input_ids`: `[CLS] A [SEP] (B [SEP])` then zero padding;
- `input_mask`: 1 on real tokens, 0 on padding;
- `segment_ids`: 0 for `[CLS]`, A and the first `[SEP]`; 1 for B and the last `[SEP]`; 0 on padding.
No masking is stored: masking is dynamic, in the training graph. Shards are named
`pretrain_data.tfrecord-{i}-of-{n}` as the original, so either project reads the other's data.
"""

import functools
import hashlib
import re
from typing import Dict, List, Tuple

import numpy as np
import tensorflow as tf

from electra_tf.errors import InputError

FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids")
RECORD_FRAMING_BYTES = 16  # per TFRecord: 8-byte length, 4-byte CRC of it, the data, 4-byte CRC of the data
FULL_CHECK_BYTES = 64 << 20  # shards up to this size are checked whole at start-up (a few ms per MB)
PARTIAL_CHECK_RECORDS = 1000  # of larger shards, the first records only
SHARD_PREFIX = "pretrain_data.tfrecord"
EVAL_SUBDIR = "eval"  # held-out shards live in <output_dir>/eval/, outside the default training glob
STATS_FILE = "stats.json"  # a build's statistics and settings, vocab_sha256 among them, in <output_dir>


def file_sha256(path) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def shard_name(index: int, count: int) -> str:
    return f"{SHARD_PREFIX}-{index}-of-{count}"


@functools.lru_cache(maxsize=None)
def _varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative int (tags and lengths; few distinct values)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varints(values: np.ndarray) -> Tuple[bytes, np.ndarray]:
    """Varint-encodes a [n, L] array of non-negative ints at once.

    Returns the concatenated bytes (row-major) and the byte count of each row [n].
    """
    values = values.astype(np.uint64)
    groups = max(1, (int(values.max(initial=0)).bit_length() + 6) // 7)
    shifts = np.arange(groups, dtype=np.uint64) * np.uint64(7)
    sizes = 1 + sum((values >= np.uint64(1 << (7 * k))).astype(np.int64) for k in range(1, groups))  # [n, L]
    digits = ((values[..., None] >> shifts) & np.uint64(0x7F)).astype(np.uint8)  # [n, L, G]
    position = np.arange(groups)
    digits |= ((position < sizes[..., None] - 1) * 0x80).astype(np.uint8)  # continuation bits
    return digits[position < sizes[..., None]].tobytes(), sizes.sum(axis=1)


@functools.lru_cache(maxsize=None)
def _entry_header(name: bytes, payload_size: int) -> bytes:
    """The bytes before a packed payload in one `feature` map entry:
    {key: name, value: Feature{int64_list: Int64List{value: payload}}}."""
    int64_list = 1 + len(_varint(payload_size)) + payload_size
    feature = 1 + len(_varint(int64_list)) + int64_list
    entry = 1 + len(_varint(len(name))) + len(name) + 1 + len(_varint(feature)) + feature
    return (b"\x0a" + _varint(entry) + b"\x0a" + _varint(len(name)) + name
            + b"\x12" + _varint(feature) + b"\x1a" + _varint(int64_list) + b"\x0a" + _varint(payload_size))


def serialize_examples(input_ids: np.ndarray, segment_ids: np.ndarray, lengths: np.ndarray) -> List[bytes]:
    """Serializes padded examples ([n, max_seq_length] ids and segment ids, [n] lengths) in the
    original's schema.

    The protobuf bytes are assembled directly, vectorized over all examples: several times faster
    than building a `tf.train.Example` per record, and parsed identically (tested against
    `tf.train.Example`).
    """
    count, max_seq_length = input_ids.shape
    masks = (np.arange(max_seq_length) < lengths[:, None]).astype(np.uint8)
    segments = segment_ids.astype(np.uint8)  # 0/1: one byte per varint
    id_bytes, id_sizes = _varints(input_ids)
    offsets = np.concatenate([[0], np.cumsum(id_sizes)]).tolist()
    mask_header = _entry_header(b"input_mask", max_seq_length)
    segment_header = _entry_header(b"segment_ids", max_seq_length)
    records = []
    for row, size in enumerate(id_sizes.tolist()):
        body = b"".join((_entry_header(b"input_ids", size), id_bytes[offsets[row]:offsets[row + 1]],
                         mask_header, masks[row].tobytes(), segment_header, segments[row].tobytes()))
        records.append(b"\x0a" + _varint(len(body)) + body)
    return records


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


def check_shard(path: str, whole: bool = False) -> None:
    """Raises InputError naming `path` and the byte offset when its TFRecord framing or a CRC is
    broken: a file cut short (disk full, interrupted copy), damaged bytes, or not a TFRecord file.

    TensorFlow's reader verifies every length and data CRC; the sum of the record sizes must then
    be the file size, which also catches a cut inside a record header (that reader takes it for
    the end of the file). Shards up to FULL_CHECK_BYTES, or any with `whole`, are read entirely,
    larger ones up to their first PARTIAL_CHECK_RECORDS records.
    """
    size = tf.io.gfile.stat(path).length
    whole = whole or size <= FULL_CHECK_BYTES
    records = tf.data.TFRecordDataset(path)
    if not whole:
        records = records.take(PARTIAL_CHECK_RECORDS)
    try:
        count, payload = records.reduce(
            (tf.constant(0, tf.int64), tf.constant(0, tf.int64)),
            lambda state, record: (state[0] + 1, state[1] + tf.cast(tf.strings.length(record), tf.int64)))
    except tf.errors.DataLossError as error:
        raise InputError(f"{path}: damaged TFRecord file ({_reader_problem(error.message)}); "
                         "rebuild or re-copy it") from None
    end = int(count) * RECORD_FRAMING_BYTES + int(payload)
    if whole and end != size:
        raise InputError(f"{path}: damaged TFRecord file (truncated record at byte {end} of {size}); "
                         "rebuild or re-copy it")


def _reader_problem(message: str) -> str:
    """The reader's own words (`truncated record at 15800`, `corrupted record at 0`), without the op
    names around them."""
    found = re.search(r"(truncated|corrupted) record at (\d+)", message)
    if not found:
        return message.splitlines()[0]
    return f"{found.group(1)} record at byte {found.group(2)}"
