"""Human-readable views of built pretraining data, for the demo: statistics, decoded examples."""

from pathlib import Path

import tensorflow as tf

from electra_tf.tokenization import load_vocab
from pretrain_data.records import SHARD_PREFIX, parse_examples


def _decoded_example(data_dir: Path, vocab_file: Path, max_seq_length: int) -> str:
    """The first record of the first shard as tokens, segments separated by their [SEP]."""
    vocab = load_vocab(vocab_file)
    first_shard = sorted(data_dir.glob(f"{SHARD_PREFIX}*"))[0]
    record = next(iter(tf.data.TFRecordDataset(str(first_shard)).batch(1)))
    example = {name: values[0].numpy() for name, values in parse_examples(record, max_seq_length).items()}
    length = int(example["input_mask"].sum())
    tokens = [vocab[i] for i in example["input_ids"][:length]]
    segments = example["segment_ids"][:length]
    text = " ".join(tokens).replace(" ##", "")
    return (f"first example of {first_shard.name} ({length} tokens, segment B from position "
            f"{int(segments.argmax()) if segments.any() else '-'}):\n  {text}")


def data_report(stats: dict, data_dir: Path, vocab_file: Path) -> str:
    train, held_out = stats["train"], stats["eval"]
    lines = [
        f"{stats['files']} file(s), {stats['megabytes']:.2f} MB, {stats['lines']:,} sentences in "
        f"{stats['documents']:,} documents ({stats['eval_documents']:,} held out), "
        f"built in {stats['seconds']:.1f} s",
        f"training examples:  {train['examples']:,} in {stats['num_out_files']} shard(s), "
        f"{train['tokens']:,} tokens ({train['tokens'] / max(train['examples'], 1):.1f} per example)",
        f"held-out examples:  {held_out['examples']:,} in {data_dir / 'eval'}",
        f"single-segment share {train['single_segment_share']:.1%} "
        f"(drawn by the 10 % rule: {train['single_segment_draw_share']:.1%}), "
        f"short-target share {train['short_example_share']:.1%}, "
        f"tokens discarded by truncation {train['discarded_tokens']:,}",
        _decoded_example(data_dir, vocab_file, stats["max_seq_length"]),
    ]
    return "\n".join(lines)


def held_out_example(patterns: str, max_seq_length: int, sep_id: int, max_tokens: int) -> dict:
    """The first held-out record cut to `[CLS]` + its first segment's first `max_tokens - 2` tokens +
    `[SEP]` (short enough to read): {input_ids, input_mask, segment_ids} int32 [1, max_seq_length]."""
    from pretrain_data.input_pipeline import make_dataset
    ids = next(iter(make_dataset(patterns, max_seq_length, 1, is_training=False)))["input_ids"][0].numpy()
    first_sep = int((ids == sep_id).argmax())
    kept = [int(i) for i in ids[:min(first_sep, max_tokens - 1)]] + [sep_id]  # [CLS] A... [SEP]
    padding = [0] * (max_seq_length - len(kept))
    return {"input_ids": tf.constant([kept + padding]), "input_mask": tf.constant([[1] * len(kept) + padding]),
            "segment_ids": tf.zeros([1, max_seq_length], tf.int32)}
