"""Fine-tuning throughput: dynamic padding with length bucketing vs fixed max_seq_length padding.

    python benchmarks/finetune_padding.py [--task sst] [--model-size tiny] [--steps 60]

Trains the same randomly initialised model on the same real GLUE training rows twice, once with
every batch padded to max_seq_length (the original's fixed shapes) and once padded to the longest
example of each length-bucketed batch (`dynamic_padding`, the default), and prints examples/s,
the mean padded length and the speed-up. Warm-up steps (tracing) are not timed. With the tiny
model and the defaults it runs in about a minute on 2 CPU cores.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from electra_tf.cli import script_parser  # noqa: E402

SHARED = REPO.parent / "shared" / "data"
WARMUP_STEPS = 3


def measure(config, data, steps: int) -> tuple:
    """(examples per second, mean padded length) over `steps` timed training steps of a
    FinetuningConfig's model on its TaskData."""
    from finetune.inputs import train_batches
    from finetune.runner import Trial
    trial = Trial(config, data, 1, None)
    train_step = trial.compile_train_step(steps + WARMUP_STEPS)
    # full batches alone: the rate below counts batch x steps
    batches = list(train_batches(data.train, config.train_batch_size, steps + WARMUP_STEPS,
                                 np.random.default_rng(0), config.dynamic_padding, config.max_seq_length,
                                 keep_partial=False))
    for batch in batches[:WARMUP_STEPS]:
        train_step(batch)
    start = time.perf_counter()
    for batch in batches[WARMUP_STEPS:]:
        loss = train_step(batch)
    float(loss)  # wait for the last step
    elapsed = time.perf_counter() - start
    lengths = [batch["input_ids"].shape[1] for batch in batches[WARMUP_STEPS:]]
    return steps * config.train_batch_size / elapsed, float(np.mean(lengths))


def build_parser() -> argparse.ArgumentParser:
    parser = script_parser(__doc__, ".venv/bin/python benchmarks/finetune_padding.py --task mrpc")
    parser.add_argument("--task", default="sst", help="a GLUE task with a train.tsv in --glue-dir")
    parser.add_argument("--glue-dir", default=str(SHARED / "glue"), help="GLUE task folders")
    parser.add_argument("--vocab-file", default=str(SHARED / "vocab" / "vocab.txt"), help="WordPiece vocab")
    parser.add_argument("--model-size", default="tiny", help="a model_size preset, randomly initialised")
    parser.add_argument("--max-seq-length", type=int, default=128, help="the fixed padding length")
    parser.add_argument("--batch-size", type=int, default=32, help="examples per step")
    parser.add_argument("--steps", type=int, default=60, help="timed steps per padding mode")
    return parser


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    from finetune.config import FinetuningConfig
    from finetune.task_data import load_task_data, make_tokenizer

    with tempfile.TemporaryDirectory() as scratch:
        hparams = dict(task_names=[args.task], model_size=args.model_size, raw_data_dir=args.glue_dir,
                       vocab_file=args.vocab_file, random_init=True, do_eval=False,
                       max_seq_length=args.max_seq_length, train_batch_size=args.batch_size,
                       max_examples=max(2048, args.batch_size * (args.steps + WARMUP_STEPS)))
        fixed = FinetuningConfig.from_hparams("bench", scratch, {**hparams, "dynamic_padding": False})
        dynamic = FinetuningConfig.from_hparams("bench", scratch, hparams)
        data = load_task_data(fixed, make_tokenizer(fixed))
        fixed_rate, fixed_length = measure(fixed, data, args.steps)
        dynamic_rate, dynamic_length = measure(dynamic, data, args.steps)
    print(f"task {args.task}, model {args.model_size}, batch {args.batch_size}, max_seq_length "
          f"{args.max_seq_length}, {args.steps} timed steps, {len(data.train)} training rows")
    print(f"fixed padding:   {fixed_rate:8.1f} examples/s, mean padded length {fixed_length:.1f}")
    print(f"dynamic padding: {dynamic_rate:8.1f} examples/s, mean padded length {dynamic_length:.1f}")
    print(f"speed-up: {dynamic_rate / fixed_rate:.2f}x")


if __name__ == "__main__":
    main()
