"""Where the time of one pretraining step goes: TensorFlow's profiler over a few steps of "ours".

Builds `run_pretraining.py`'s step (PretrainingModel + make_train_step, pooled allocator, CPU
kernels) at the given size on fixed synthetic rows (no input pipeline: that is measured by the
runs themselves), times a few steps, traces a few more, and prints the op time on TensorFlow's
compute threads per step, by op type and for the MLM output layer (`generator_predictions`,
whose E x V matmuls grow with the vocab), with the step's MFU against `--gemm-peak`.
The replication's size is the default: `small` with 4 layers, batch 128, seq 128.

    .venv/bin/python benchmarks/profile_step.py [--objective bert] [--vocab-size 30522]
        [--layers 4] [--batch 128] [--steps 3] [--gemm-peak 220]
"""

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.pretrain_throughput import EMBEDDING, encoder_macs_per_token  # noqa: E402
from benchmarks.pretrain_throughput import SEQ as THROUGHPUT_SEQ  # noqa: E402
from electra_tf.cli import script_parser, use_pooled_cpu_allocator  # noqa: E402

SEQ = 128
SPECIAL_IDS = dict(cls_id=101, sep_id=102, mask_id=103)
WRAPPERS = {"Process", "ParallelFor"}  # executor events that enclose op events


def matmul_flops_per_token(hidden: int, layers: int, ffn: int, embedding: int, vocab: int, predictions: int) -> float:
    """3 x forward FLOPs (2 per MAC) of a `bert` step: the encoder's matmuls (counted as in
    pretrain_throughput.py) and the MLM head (H->E, E x V) at the masked positions only."""
    assert embedding == EMBEDDING and SEQ == THROUGHPUT_SEQ, "pretrain_throughput counts ELECTRA-Small's shape"
    head = predictions / SEQ * (hidden * embedding + embedding * vocab)
    return 3 * 2 * (encoder_macs_per_token(hidden, layers, ffn) + head)


def build_step(args):
    """(step(i), config): one training step of "ours" on fixed rows, blocking until done."""
    use_pooled_cpu_allocator()
    import numpy as np
    import tensorflow as tf
    from electra_tf.config import PretrainingConfig
    from electra_tf.optimization import create_optimizer
    from electra_tf.pretraining import PretrainingModel
    from electra_tf.training import make_train_step
    config = PretrainingConfig.from_hparams("profile", "/unused", dict(
        model_size="small", model_hparam_overrides={"num_hidden_layers": args.layers}, objective=args.objective,
        train_batch_size=args.batch, max_seq_length=SEQ, vocab_size=args.vocab_size))
    model = PretrainingModel(config, **SPECIAL_IDS)
    optimizer = create_optimizer(config.learning_rate, config.num_train_steps, config.weight_decay_rate,
                                 config.num_warmup_steps)
    optimizer.iterations.assign(config.num_warmup_steps)  # past warm-up: a non-zero LR
    step = tf.function(make_train_step(model, optimizer))
    ids = np.random.RandomState(0).randint(1000, args.vocab_size, size=(args.batch, SEQ)).astype(np.int32)
    ids[:, 0], ids[:, -1] = SPECIAL_IDS["cls_id"], SPECIAL_IDS["sep_id"]
    features = dict(input_ids=tf.constant(ids), input_mask=tf.ones_like(ids), segment_ids=tf.zeros_like(ids))
    return (lambda i: step(features, tf.constant([0, i])).numpy()), config


def op_times(trace_dir: str, steps: int):
    """(ms per step by op type, ms per step of the MLM output layer) on the compute threads."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    space = xplane_pb2.XSpace()
    space.ParseFromString(sorted(Path(trace_dir).rglob("*.xplane.pb"))[-1].read_bytes())
    by_type, mlm_output = collections.Counter(), 0.0
    for plane in (p for p in space.planes if p.name == "/host:CPU"):
        for line in (l for l in plane.lines if l.name.startswith("tf_Compute")):
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name  # "<op name>:<op type>"
                op_type, ms = name.rsplit(":", 1)[-1], event.duration_ps / 1e9 / steps
                if op_type not in WRAPPERS:
                    by_type[op_type] += ms
                    mlm_output += ms if "generator_predictions" in name else 0.0
    return by_type, mlm_output


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    step, config = build_step(args)
    import tensorflow as tf
    for i in range(2):  # tracing, allocator warm-up
        step(i)
    times = []
    for i in range(args.steps):
        start = time.perf_counter()
        step(10 + i)
        times.append(time.perf_counter() - start)
    seconds = sorted(times)[len(times) // 2]
    disc = config.discriminator_config()
    flops = matmul_flops_per_token(disc.hidden_size, disc.num_hidden_layers, disc.intermediate_size,
                                   disc.embedding_size, args.vocab_size, config.max_predictions_per_seq)
    tokens = args.batch * SEQ / seconds
    print(f"{args.objective}, vocab {args.vocab_size:,}, {args.layers} layers, batch {args.batch} x {SEQ}: "
          f"median step {seconds:.3f} s of {[round(t, 3) for t in times]}, {tokens:,.0f} tokens/s")
    if args.objective == "bert":
        print(f"matmul FLOPs {flops / 1e6:.2f} M per token: {flops * tokens / 1e9:.1f} GFLOP/s, "
              f"{100 * flops * tokens / 1e9 / args.gemm_peak:.0f} % of a {args.gemm_peak:g} GFLOP/s GEMM peak")
    with tempfile.TemporaryDirectory() as trace_dir:
        tf.profiler.experimental.start(trace_dir)
        for i in range(args.steps):
            step(20 + i)
        tf.profiler.experimental.stop()
        by_type, mlm_output = op_times(trace_dir, args.steps)
    total = sum(by_type.values())
    print(f"op time on the compute threads: {total:,.0f} ms per step (two threads run ops side by side)")
    for op_type, ms in by_type.most_common(args.top):
        print(f"  {ms:8.1f} ms {100 * ms / total:5.1f} %  {op_type}")
    print(f"  MLM output layer (generator_predictions, forward and backward): {mlm_output:.1f} ms, "
          f"{100 * mlm_output / total:.1f} %")


def build_parser() -> argparse.ArgumentParser:
    parser = script_parser(__doc__.split("\n")[0], ".venv/bin/python benchmarks/profile_step.py --vocab-size 30522")
    parser.add_argument("--objective", default="bert", help="PretrainingConfig objective")
    parser.add_argument("--vocab-size", type=int, default=30522, help="30522: BERT's vocab; 7871: the learned one")
    parser.add_argument("--layers", type=int, default=4, help="num_hidden_layers of the `small` preset")
    parser.add_argument("--batch", type=int, default=128, help="examples per step")
    parser.add_argument("--steps", type=int, default=3, help="timed steps, then as many traced ones")
    parser.add_argument("--gemm-peak", type=float, default=220.0,
                        help="GFLOP/s of the machine's best tf.matmul (benchmarks/pretrain_throughput.py prints it)")
    parser.add_argument("--top", type=int, default=12, help="op types listed")
    return parser


if __name__ == "__main__":
    main()
