"""A peer's MLM learning curve on the replication's own TFRecords (issue #17's defect-or-regime check).

The replication's pilot (a) (`bert` objective, learned 7,871-token vocab, lr 1e-3) sits at a held-out
MLM accuracy of about 0.19-0.20 from step 250 on. The step-parity test proves our step's math for
a given batch; it does not cover what reaches the step (the TFRecords as our input pipeline reads
them, the in-graph masking) nor a whole run. This script trains HF transformers'
`ElectraForMaskedLM` of the same shape on the same TFRecord files, with the masking written here
from the original's spec (§5.1: 15 % of the real non-special tokens, 19 slots, 85 % of the used
slots [MASK], the rest kept; positions drawn without replacement, as the pilots run (they pin
`mask_with_replacement: false`), or with `--with-replacement` as the original and our default)
and the original's optimizer (§7: AdamW without bias correction, decay off LayerNorm and biases,
global-norm clipping at 1.0, linear decay from step 0 to 0 at the pilot's full step count times a
linear warm-up factor), and prints its mean training loss and accuracy per window of steps beside
the same windows of our run's log. Matching curves point to the regime; a clearly faster peer
points to a defect on our side.

    .venv/bin/python benchmarks/mlm_peer_curve.py --data-dir /work/replication/data/learned_seq128 \
        --ours-log /work/replication/logs/stage1.log --ours-run s1/pilot_a [--steps 300]

Differences from our run that remain: HF initialises from a normal (ours: truncated normal), the
example order and the random draws differ, and HF's output layer runs here on the gathered slots
only (as ours does; it is the same math as HF's all-position head at these slots).
"""

import argparse
import glob
import math
import re
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from electra_tf.cli import script_parser  # noqa: E402

SLOTS, MASK_PROB, MASK_FRACTION = 19, 0.15, 0.85  # §3: int((0.15 + 0.005) * 128); §5.1
BETA_1, BETA_2, EPSILON, WEIGHT_DECAY = 0.9, 0.999, 1e-6, 0.01  # §7


def read_batches(pattern: str, batch: int, seed: int):
    """Yields dicts of int64 numpy arrays [batch, seq] from the TFRecords, shuffled, repeated."""
    import tensorflow as tf
    files = sorted(glob.glob(pattern))
    if not files:
        raise SystemExit(f"no TFRecords match {pattern}")
    features = {name: tf.io.VarLenFeature(tf.int64) for name in ("input_ids", "input_mask", "segment_ids")}
    dataset = (tf.data.TFRecordDataset(files).repeat().shuffle(10000, seed=seed)
               .map(lambda record: {k: tf.sparse.to_dense(v) for k, v in tf.io.parse_single_example(
                   record, features).items()}).batch(batch, drop_remainder=True))
    for example in dataset.as_numpy_iterator():
        yield example


def mask(batch, vocab, rng, with_replacement=False):
    """The original's dynamic masking (§5.1), in numpy: masked ids, slot positions, targets, weights.
    Only the used slots (weight 1) can become [MASK]; the original points the others at position 0,
    which its scatter ignores. Without replacement, a row's used slots are distinct positions."""
    ids, input_mask = batch["input_ids"], batch["input_mask"]
    special = np.isin(ids, [vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"]])
    candidates = (input_mask == 1) & ~special  # [batch, seq]
    counts = np.maximum(1, np.minimum(SLOTS, np.rint(input_mask.sum(1) * MASK_PROB))).astype(int)
    positions = np.zeros((len(ids), SLOTS), dtype=np.int64)
    for row in range(len(ids)):
        allowed = np.flatnonzero(candidates[row])
        counts[row] = counts[row] if with_replacement else min(counts[row], len(allowed))
        drawn = rng.choice(allowed, size=SLOTS if with_replacement else counts[row], replace=with_replacement)
        positions[row, :len(drawn)] = drawn
    weights = (np.arange(SLOTS)[None, :] < counts[:, None]).astype(np.float32)  # [batch, slots]
    targets = np.take_along_axis(ids, positions, 1)
    masked = ids.copy()
    to_mask = (rng.random((len(ids), SLOTS)) < MASK_FRACTION) & (weights > 0)
    rows = np.repeat(np.arange(len(ids)), SLOTS).reshape(len(ids), SLOTS)
    masked[rows[to_mask], positions[to_mask]] = vocab["[MASK]"]
    return masked, positions, targets, weights


def slot_loss(model, batch, masked, positions, targets, weights):
    """Weighted mean NLL over the slots (duplicates count twice, §5.4) and the weighted accuracy."""
    import torch
    hidden = model.electra(input_ids=torch.from_numpy(masked), attention_mask=torch.from_numpy(batch["input_mask"]),
                           token_type_ids=torch.from_numpy(batch["segment_ids"])).last_hidden_state
    index = torch.from_numpy(positions)[:, :, None].expand(-1, -1, hidden.shape[-1])
    at_slots = torch.gather(hidden, 1, index)  # [batch, slots, hidden]
    logits = model.generator_lm_head(model.generator_predictions(at_slots))  # [batch, slots, vocab]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), torch.from_numpy(targets), reduction="none")
    w = torch.from_numpy(weights)
    correct = (logits.argmax(-1) == torch.from_numpy(targets)).float()
    return (w * nll).sum() / (w.sum() + 1e-6), float((w * correct).sum() / w.sum())


def learning_rate(step: int, peak: float, warmup: int, total: int) -> float:
    """The original's schedule (§7): linear decay from step 0 to 0 at `total`, times min(1, step / warmup)."""
    return peak * (1.0 - min(step, total) / total) * min(1.0, step / warmup)


def adamw_step(named_params, state, lr):
    """The original's AdamWeightDecay (no bias correction; decay on the update, off LayerNorm/bias).
    `state`: {name: (m, v)}, zeros before the first step."""
    import torch
    with torch.no_grad():
        for name, p in named_params:
            m, v = state[name]
            m.mul_(BETA_1).add_(p.grad, alpha=1 - BETA_1)
            v.mul_(BETA_2).addcmul_(p.grad, p.grad, value=1 - BETA_2)
            update = m / (v.sqrt() + EPSILON)
            if not re.search("LayerNorm|bias", name):
                update = update + WEIGHT_DECAY * p
            p.sub_(lr * update)


def our_windows(log_path: str, run: str, window: int):
    """{step: (loss, accuracy)} of the full `window`-step windows of one run (e.g. "s1/pilot_a") in
    the replication's log: its progress lines (`step N/TOTAL ... masked_lm_loss L ...`) inside the
    run's `@@start <run>/pretrain/...` blocks. A line counts only when the previous progress line
    (or the checkpoint the block resumed from) was `window` steps before: our metrics restart with
    each segment, so a segment's first line can cover fewer steps. A resumed segment repeats steps:
    the first full window is kept."""
    progress = re.compile(r"step (\d+)/\d+ .*masked_lm_loss ([\d.]+) masked_lm_accuracy ([\d.]+)")
    windows, inside, previous, segment_end = {}, False, 0, 0
    for line in Path(log_path).read_text().splitlines():
        if line.startswith("@@start "):
            inside = line.split()[1].startswith(f"{run}/pretrain/")
            previous = segment_end  # a segment starts from the last finished one's checkpoint
        elif line.startswith(f"@@end {run}/pretrain/"):
            segment_end = int(line.split()[1].rsplit("/", 1)[1])
        elif inside and (resumed := re.search(r"resuming from .*ckpt-(\d+)", line)):
            previous = int(resumed.group(1))
        elif inside and (match := progress.search(line)):
            step = int(match.group(1))
            if step - previous == window and step not in windows:
                windows[step] = (float(match.group(2)), float(match.group(3)))
            previous = step
    return windows


def build_parser() -> argparse.ArgumentParser:
    parser = script_parser(__doc__.split("\n")[0], ".venv/bin/python benchmarks/mlm_peer_curve.py --data-dir "
                           "/work/replication/data/learned_seq128 --ours-log /work/replication/logs/stage1.log")
    parser.add_argument("--data-dir", required=True, help="the replication's data dir of one vocab (train/, eval/)")
    parser.add_argument("--vocab-file", default=str(REPO / "benchmarks/replication/vocab/learned_8192.txt"),
                        help="the vocab the data dir was built with")
    parser.add_argument("--ours-log", default=None, help="the replication's log, for the side-by-side windows")
    parser.add_argument("--ours-run", default="s1/pilot_a", help="the run of --ours-log to compare with")
    parser.add_argument("--with-replacement", action="store_true",
                        help="draw masked positions with replacement, as the original (the pilots: without)")
    parser.add_argument("--steps", type=int, default=300, help="training steps of the HF model")
    parser.add_argument("--total-steps", type=int, default=3312, help="the schedule's length (the pilot's)")
    parser.add_argument("--warmup", type=int, default=199, help="warm-up steps (the pilot's)")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="peak learning rate (the pilot's)")
    parser.add_argument("--batch", type=int, default=128, help="examples per step (the pilot's)")
    parser.add_argument("--window", type=int, default=50, help="steps per printed window")
    parser.add_argument("--seed", type=int, default=1, help="initialisation, order and masking seed")
    return parser


def main():
    args = build_parser().parse_args()

    import torch
    from transformers import ElectraConfig, ElectraForMaskedLM
    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    vocab = {token: i for i, token in enumerate(Path(args.vocab_file).read_text().splitlines())}
    config = ElectraConfig(vocab_size=len(vocab), embedding_size=128, hidden_size=256, num_hidden_layers=4,
                           num_attention_heads=4, intermediate_size=1024, max_position_embeddings=512,
                           hidden_act="gelu", layer_norm_eps=1e-12)
    model = ElectraForMaskedLM(config).train()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    rng = np.random.default_rng(args.seed)
    state = {name: (torch.zeros_like(p), torch.zeros_like(p)) for name, p in named}
    losses, accuracies = [], []
    ours = our_windows(args.ours_log, args.ours_run, args.window) if args.ours_log else {}
    print(f"{'steps':>11} {'peer loss':>10} {'peer acc':>9} {'our loss':>9} {'our acc':>8}   s/step")
    started = time.time()
    batches = read_batches(str(Path(args.data_dir) / "train" / "*.tfrecord*"), args.batch, args.seed)
    for step in range(1, args.steps + 1):
        batch = next(batches)
        loss, accuracy = slot_loss(model, batch, *mask(batch, vocab, rng, args.with_replacement))
        model.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in named], 1.0)
        adamw_step(named, state, learning_rate(step - 1, args.learning_rate, args.warmup, args.total_steps))
        losses.append(float(loss.detach()))
        accuracies.append(accuracy)
        if step % args.window == 0:
            our_loss, our_acc = ours.get(step, (math.nan, math.nan))
            print(f"{step - args.window + 1:>5}-{step:<5} {np.mean(losses[-args.window:]):>10.4f} "
                  f"{np.mean(accuracies[-args.window:]):>9.4f} {our_loss:>9.4f} {our_acc:>8.4f}   "
                  f"{(time.time() - started) / step:.2f}", flush=True)


if __name__ == "__main__":
    main()
