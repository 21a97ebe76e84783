"""tf.data reader of pretraining TFRecords, per replica under any tf.distribute strategy.

Training: shuffle the file list, repeat, interleave the files, shuffle records, batch with
drop_remainder (static shapes for XLA/TPU), parse the whole batch at once, prefetch. Evaluation:
files in order, one pass, no shuffling, and the last partial batch kept, so every held-out
example is seen. With an `InputContext` each input pipeline reads its own
files (or, when there are fewer files than pipelines, its own records) and batches
`global_batch_size / num_replicas` examples.

`deterministic=True` seeds every shuffle and keeps interleave order, so two runs see the same
batches in the same order (needed for reproducible and resumable training).
"""

from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import tensorflow as tf

from electra_tf.checkpoints import CASING_FIELDS
from electra_tf.errors import InputError
from electra_tf.hparams import flags_of, json_object
from pretrain_data.records import STATS_FILE, check_shard, file_sha256, parse_examples, record_length

DEFAULT_SHUFFLE_BUFFER = 10000  # the original's 100 barely mixes documents: neighbours share one


def resolve_files(patterns: str) -> List[str]:
    """Expands comma-separated globs into a sorted file list; an error names globs matching nothing."""
    files = []
    for pattern in (p.strip() for p in patterns.split(",")):
        if not pattern:
            continue
        matched = tf.io.gfile.glob(pattern)
        if not matched:
            raise InputError(f"pretraining data: no TFRecord file matches {pattern!r}")
        files.extend(matched)
    if not files:
        raise InputError(f"pretraining data: no file pattern given ({patterns!r})")
    return sorted(set(files))


def check_record_length(files: List[str], max_seq_length: int) -> None:
    """Fails early, naming the file, when the records were built for another max_seq_length."""
    for path in files:
        length = record_length(path)
        if length == -1:
            continue  # an empty shard
        if length != max_seq_length:
            raise InputError(f"{path}: records hold {length} tokens but max_seq_length is {max_seq_length}; "
                             "rebuild the data or set max_seq_length to match")
        return


def make_dataset(patterns: str, max_seq_length: int, global_batch_size: int, is_training: bool,
                 input_context: Optional[tf.distribute.InputContext] = None, deterministic: bool = False,
                 seed: int = 0, shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
                 cycle_length: int = 4) -> tf.data.Dataset:
    """Batches of {input_ids, input_mask, segment_ids}: int32 [per_replica_batch, max_seq_length]."""
    files = resolve_files(patterns)
    check_record_length(files, max_seq_length)
    batch_size = global_batch_size
    num_pipelines, pipeline_id = 1, 0
    if input_context is not None:
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        num_pipelines, pipeline_id = input_context.num_input_pipelines, input_context.input_pipeline_id
    shard_files = num_pipelines > 1 and len(files) >= num_pipelines

    dataset = tf.data.Dataset.from_tensor_slices(files)
    if shard_files:
        dataset = dataset.shard(num_pipelines, pipeline_id)
    if is_training:
        dataset = dataset.shuffle(len(files), seed=seed if deterministic else None,
                                  reshuffle_each_iteration=True).repeat()
    dataset = dataset.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(cycle_length, len(files)) if is_training else 1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic or not is_training)
    if num_pipelines > 1 and not shard_files:
        dataset = dataset.shard(num_pipelines, pipeline_id)
    if is_training:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed if deterministic else None)
    dataset = dataset.batch(batch_size, drop_remainder=is_training)
    parse = tf.autograph.experimental.do_not_convert(lambda records: parse_examples(records, max_seq_length))
    dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    options = tf.data.Options()
    options.deterministic = deterministic or not is_training
    if input_context is not None:
        # Sharding is done above; stop tf.distribute from sharding again.
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)



def check_pretraining_data(config) -> None:
    """Fails before any work when the files a run will read are missing, of another length, or
    damaged (`records.check_shard`: cut short, bad bytes, not TFRecords)."""
    for wanted, patterns in ((config.do_train, config.pretrain_tfrecords), (config.do_eval, config.eval_tfrecords)):
        if wanted:
            files = resolve_files(patterns)
            for path in files:
                check_shard(path)
            check_record_length(files, config.max_seq_length)
            check_build_vocab(files, config.vocab_file)
            if config.do_train:  # what config.json will record; evaluating pre-tokenized records needs no casing
                check_build_casing(files, config)


def _build_stats(files: List[str]) -> Iterator[Tuple[Path, Path, dict]]:
    """(folder, its stats.json, what it records) of each folder of `files` whose build wrote one
    (beside its shards, or above its eval/); data written by other tools, or the original's, has none."""
    for folder in sorted({Path(path).parent for path in files}):
        stats = next((f / STATS_FILE for f in (folder, folder.parent) if (f / STATS_FILE).is_file()), None)
        if stats is None:
            continue
        recorded = json_object(stats)
        if recorded:  # else not a build's statistics
            yield folder, stats, recorded


def check_build_vocab(files: List[str], vocab_file: str) -> None:
    """Fails, naming both, when a build's `stats.json` records another vocab than the run's: token
    ids would then index the wrong rows (or past the table)."""
    if not vocab_file or not Path(vocab_file).is_file():
        return  # the run's own vocab check names it
    wanted = None
    for folder, stats, recorded in _build_stats(files):
        built = recorded.get("vocab_sha256")
        wanted = wanted or file_sha256(vocab_file)
        if built is not None and built != wanted:
            raise InputError(f"{folder}: its records were built with another vocab than vocab_file {vocab_file} "
                             f"({stats} records sha256 {built[:12]}..., the vocab_file's is {wanted[:12]}...); "
                             f"rebuild the data with this vocab or set vocab_file to the build's")


def check_build_casing(files: List[str], config) -> None:
    """Fails, naming both, when a build's `stats.json` records other casing than the run's
    `do_lower_case` and `do_strip_accents` (the latter only where both lower-case): the model's
    config.json records the run's, and fine-tuning, predicting and serving normalise text as it
    says, so it must be how the model's training text was normalised."""
    for folder, stats, recorded in _build_stats(files):
        built = flags_of(recorded, CASING_FIELDS)  # a build before a field records nothing of it
        both_lower = config.do_lower_case and built.get("do_lower_case")  # accents are stripped only then
        compared = ["do_lower_case"] + (["do_strip_accents"] if both_lower else [])
        for name in (name for name in compared if name in built):
            if built[name] != getattr(config, name):
                raise InputError(f"{folder}: its records were built with {name} {str(built[name]).lower()} ({stats}), "
                                 f"but the run's {name} is {str(getattr(config, name)).lower()}: set "
                                 f"\"{name}\": {str(built[name]).lower()} in --hparams (fine-tuning follows what the "
                                 f"model's config.json records)")


def locate_damaged_training_data(config) -> None:
    """Reads every training file whole, after the reader reported damage mid-run: raises InputError
    naming the damaged file and the byte offset (returns when none is found)."""
    for path in resolve_files(config.pretrain_tfrecords):
        check_shard(path, whole=True)


def pretraining_dataset_fns(config):
    """(train, eval) dataset functions of a `PretrainingConfig`, for `distribute_datasets_from_function`.

    Training reads `pretrain_tfrecords` in batches of `train_batch_size` (global), evaluation reads
    the held-out `eval_tfrecords` once, in batches of `eval_batch_size`.
    """
    def train_fn(input_context=None):
        return make_dataset(config.pretrain_tfrecords, config.max_seq_length, config.train_batch_size, True,
                            input_context, deterministic=config.deterministic, seed=config.seed)

    def eval_fn(input_context=None):
        return make_dataset(config.eval_tfrecords, config.max_seq_length, config.eval_batch_size, False,
                            input_context, deterministic=True)

    return train_fn, eval_fn
