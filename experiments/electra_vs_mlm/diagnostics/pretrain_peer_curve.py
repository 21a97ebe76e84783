"""A peer's pretraining curve on the replication's own TFRecords (issue #17's defect-or-regime check).

The step-parity test proves our step's math for a given batch; it does not cover what reaches the
step (the TFRecords as our input pipeline reads them, the in-graph masking and sampling) nor a
whole run. This script trains an independent implementation of the same shape on the same TFRecord
files and prints its training metrics per window of steps beside the same windows of our run's
TensorBoard scalars.
Matching curves point to the regime; a clearly faster peer points to a defect on our side.

- `--objective bert` (the replication's pilots): HF transformers' `ElectraForMaskedLM`.
- `--objective electra` (stage 2's `s2_electra`): HF's `ElectraForMaskedLM` as the generator
  (`--generator-hidden-size` of the width: 0.25 by default, 64 wide, 1 head, FFN 256; 1.0 for stage
  4's `s4_full_generator`) and `ElectraForPreTraining` as the discriminator,
  sharing one embedding module (word, position and segment tables and their LayerNorm, docs/fidelity.md#tying) and
  the generator's output matrix; Gumbel-max samples (temperature 1, no gradient) written into every
  used slot; labels "sampled != original"; loss MLM + 50 x the discriminator's token-mean sigmoid
  cross-entropy over the real tokens (docs/fidelity.md#sampling, docs/fidelity.md#losses).

Both use the masking written here from the original's behaviour (docs/fidelity.md#masking: 15 % of
the real non-special tokens, 19 slots, 85 % of the used slots [MASK], the rest kept; positions
drawn without replacement, as the replication's runs pin `mask_with_replacement: false`, or with
`--with-replacement` as the original and our default) and the original's optimizer
(docs/fidelity.md#optimizer-and-schedule: AdamW without bias correction, decay off LayerNorm and
biases, global-norm clipping at 1.0, linear decay from step 0 to 0 at the run's full step count
times a linear warm-up factor).

    .venv/bin/python experiments/electra_vs_mlm/diagnostics/pretrain_peer_curve.py --data-dir /work/replication/data/learned_seq128 \
        --ours /work/replication/models/pilot_a [--steps 300]
    .venv/bin/python experiments/electra_vs_mlm/diagnostics/pretrain_peer_curve.py --objective electra --data-dir \
        /work/replication/data/learned_seq128 --ours /work/replication/models/s2_electra \
        --total-steps 4520 --warmup 271
    # a full run across sessions (peer_run.py): rerun the same command to resume
    .venv/bin/python experiments/electra_vs_mlm/diagnostics/pretrain_peer_curve.py --objective electra --data-dir \
        /work/replication/data/learned_seq128 --steps 4520 --total-steps 4520 --warmup 271 --init original \
        --output-dir /work/replication/peer_electra

Differences from our run that remain:
- initialisation: HF draws every matrix from a normal of 0.02; ours, as the original, from one
  truncated at 2 standard deviations, and `embeddings_project` and the discriminator's last layer
  from glorot uniform (a spread of 0.07-0.10 where HF's is 0.02). `--init original` redraws the
  peer's weights the original's way (`original_init`), so the initialisation can be told apart
  from the code;
- the example order and the random draws;
- the generator's output layer runs on the gathered slots only (as ours does; it is the same math
  as HF's all-position head at these slots);
- the printed `disc_loss` is the token mean over each batch (the loss trained on); ours logs the mean
  of per-example means, which differs little on packed rows;
- the discriminator's AUC here is exact over the window's real tokens; ours bins it at 200 thresholds;
- with `--with-replacement`, a position two slots drew gets the later slot's sample, where the
  original writes floor((a + b) / 2) (docs/fidelity.md#masking).
"""

import argparse
import glob
import json
import math
import re
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from electra_tf.cli import script_parser  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_run  # noqa: E402

SLOTS, MASK_PROB, MASK_FRACTION = 19, 0.15, 0.85  # docs/fidelity.md#pretraining-config, docs/fidelity.md#masking
BETA_1, BETA_2, EPSILON, WEIGHT_DECAY = 0.9, 0.999, 1e-6, 0.01  # docs/fidelity.md#optimizer-and-schedule


def read_batches(pattern: str, batch: int, seed: int, skip: int = 0, held_out: bool = False):
    """Yields dicts of int64 numpy arrays [batch, seq] from the TFRecords: shuffled and repeated, the
    first `skip` batches left out (the same order as a run that took them: the shuffle's seed is
    fixed); or, `held_out`, each record once in file order, the last batch short."""
    import tensorflow as tf
    files = sorted(glob.glob(pattern))
    if not files:
        raise SystemExit(f"no TFRecords match {pattern}")
    features = {name: tf.io.VarLenFeature(tf.int64) for name in ("input_ids", "input_mask", "segment_ids")}
    dataset = tf.data.TFRecordDataset(files)
    if not held_out:
        dataset = dataset.repeat().shuffle(10000, seed=seed)
    dataset = dataset.map(lambda record: {k: tf.sparse.to_dense(v) for k, v in tf.io.parse_single_example(
        record, features).items()}).batch(batch, drop_remainder=not held_out).skip(skip)
    for example in dataset.as_numpy_iterator():
        yield example


def mask(batch, vocab, rng, with_replacement=False):
    """The original's dynamic masking (docs/fidelity.md#masking), in numpy: masked ids, slot positions,
    targets, weights.
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


def slot_logits(model, batch, masked, positions):
    """An `ElectraForMaskedLM`'s logits at the slots: [batch, slots, vocab]."""
    import torch
    hidden = model.electra(input_ids=torch.from_numpy(masked), attention_mask=torch.from_numpy(batch["input_mask"]),
                           token_type_ids=torch.from_numpy(batch["segment_ids"])).last_hidden_state
    index = torch.from_numpy(positions)[:, :, None].expand(-1, -1, hidden.shape[-1])
    at_slots = torch.gather(hidden, 1, index)  # [batch, slots, hidden]
    return model.generator_lm_head(model.generator_predictions(at_slots))


def slot_loss(logits, targets, weights):
    """Weighted mean NLL over the slots (duplicates count twice, docs/fidelity.md#losses) and the weighted accuracy."""
    import torch
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), torch.from_numpy(targets), reduction="none")
    w = torch.from_numpy(weights)
    correct = (logits.argmax(-1) == torch.from_numpy(targets)).float()
    return (w * nll).sum() / (w.sum() + 1e-6), float((w * correct).sum() / w.sum())


def gumbel_max(logits, generator):
    """The original's sample (docs/fidelity.md#sampling) at temperature 1: argmax(logits + g),
    g = -log(-log(u + 1e-9) + 1e-9), no gradient."""
    import torch
    u = torch.rand(logits.shape, generator=generator)
    return (logits.detach() - torch.log(-torch.log(u + 1e-9) + 1e-9)).argmax(-1)


def fake_input(ids, positions, weights, sampled):
    """The discriminator's input and labels (docs/fidelity.md#sampling): the original ids with the sample written into
    every used slot (the kept 15 % too); label 1 where the written id differs from the original."""
    fake = ids.copy()
    rows, slots = np.nonzero(weights > 0)
    fake[rows, positions[rows, slots]] = sampled[rows, slots]
    return fake, (fake != ids).astype(np.float32)


def disc_loss(logits, labels, input_mask):
    """docs/fidelity.md#losses: sigmoid cross-entropy summed over every real token, over (1e-6 + their count)."""
    import torch
    mask = torch.from_numpy(input_mask).to(logits.dtype)
    per_token = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.from_numpy(labels),
                                                                     reduction="none")
    return (per_token * mask).sum() / (mask.sum() + 1e-6)


def roc_auc(scores, labels) -> float:
    """Exact ROC AUC, ties counted half (the Mann-Whitney U over the positives' average ranks)."""
    values, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    rank_of_value = np.cumsum(counts) - (counts - 1) / 2.0  # 1-based average rank of each distinct value
    positive = labels > 0
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    return float((rank_of_value[inverse][positive].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def learning_rate(step: int, peak: float, warmup: int, total: int) -> float:
    """The original's schedule (docs/fidelity.md#optimizer-and-schedule): linear decay from step 0 to 0
    at `total`, times min(1, step / warmup)."""
    return peak * (1.0 - min(step, total) / total) * (min(1.0, step / warmup) if warmup else 1.0)


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


def our_windows(model_dir: str, window: int):
    """{step: {metric: value}} of the full `window`-step windows of our run, from the scalars it
    logged for TensorBoard under `model_dir/train` (electra_tf.training.reporting). Each events file
    there is one process's training, whose metrics start afresh from the checkpoint it resumed
    from, which the file does not name: its first point counts only at step `window` (a start from
    step 0), any other only when the point before it in the file is `window` steps earlier. A
    resumed run repeats steps: the first full window is kept."""
    from electra_tf.training.reporting import event_files, logged_points
    windows = {}
    for path in event_files(Path(model_dir) / "train"):
        previous = 0
        for index, (step, values) in enumerate(logged_points(path)):
            if step - previous == window and step not in windows and (index > 0 or step == window):
                windows[step] = values
            previous = step
    return windows


def build_models(objective: str, vocab_size: int, generator_hidden_size: float = 0.25):
    """(generator, discriminator) of the replication's shape (4 layers, 256 wide, embedding 128), the
    generator `generator_hidden_size` times as wide; for `bert` the generator is the full-width MLM
    and there is no discriminator."""
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

    def config(hidden):  # docs/fidelity.md#model-sizes: heads max(1, hidden // 64), FFN 4 x hidden
        return ElectraConfig(vocab_size=vocab_size, embedding_size=128, hidden_size=hidden, num_hidden_layers=4,
                             num_attention_heads=max(1, hidden // 64), intermediate_size=4 * hidden,
                             max_position_embeddings=512, hidden_act="gelu", layer_norm_eps=1e-12)
    if objective == "bert":
        return ElectraForMaskedLM(config(256)).train(), None
    discriminator = ElectraForPreTraining(config(256)).train()
    generator = ElectraForMaskedLM(config(int(256 * generator_hidden_size))).train()
    # docs/fidelity.md#tying: one `electra/embeddings` scope
    generator.electra.embeddings = discriminator.electra.embeddings
    generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
    return generator, discriminator


def original_init(*models) -> None:
    """Redraws the models' weights as the original's `modeling.py` and `run_pretraining.py` draw
    theirs (docs/fidelity.md#model-sizes): every matrix and table from a normal of 0.02 truncated at
    2 standard deviations, biases 0, LayerNorm 1 and 0; `embeddings_project` and the
    discriminator's output layer from glorot uniform (`tf.layers.dense`'s default)."""
    import torch
    with torch.no_grad():
        for model in models:
            for name, module in model.named_modules():
                if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                    if name.endswith(("embeddings_project", "dense_prediction")):
                        torch.nn.init.xavier_uniform_(module.weight)
                    else:
                        torch.nn.init.trunc_normal_(module.weight, std=0.02, a=-0.04, b=0.04)
                    if getattr(module, "bias", None) is not None:
                        torch.nn.init.zeros_(module.bias)
                    if isinstance(module, torch.nn.Embedding):
                        module.padding_idx = None  # the original's [PAD] row trains as any other
                elif isinstance(module, torch.nn.LayerNorm):
                    torch.nn.init.ones_(module.weight)
                    torch.nn.init.zeros_(module.bias)


def trainable(**models):
    """[(name, parameter)] over the models, each shared parameter once (under its first model's name)."""
    seen, named = set(), []
    for prefix, model in models.items():
        for name, parameter in model.named_parameters() if model is not None else ():
            if parameter.requires_grad and id(parameter) not in seen:
                seen.add(id(parameter))
                named.append((f"{prefix}.{name}", parameter))
    return named


def build_parser() -> argparse.ArgumentParser:
    parser = script_parser(__doc__.split("\n")[0], ".venv/bin/python experiments/electra_vs_mlm/diagnostics/pretrain_peer_curve.py --data-dir "
                           "/work/replication/data/learned_seq128 --ours /work/replication/models/pilot_a")
    parser.add_argument("--objective", choices=("bert", "electra"), default="bert",
                        help="MLM alone, or generator and discriminator trained jointly")
    parser.add_argument("--data-dir", required=True, help="the replication's data dir of one vocab (train/, eval/)")
    parser.add_argument("--vocab-file", default=str(REPO / "experiments/electra_vs_mlm/results/vocab/learned_8192.txt"),
                        help="the vocab the data dir was built with")
    parser.add_argument("--ours", default=None,
                        help="our run's model dir (its train/ TensorBoard scalars), for the side-by-side windows")
    parser.add_argument("--with-replacement", action="store_true",
                        help="draw masked positions with replacement, as the original (the replication: without)")
    parser.add_argument("--steps", type=int, default=300, help="training steps of the peer")
    parser.add_argument("--total-steps", type=int, default=3312, help="the schedule's length (the run's)")
    parser.add_argument("--warmup", type=int, default=199, help="warm-up steps (the run's)")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="peak learning rate (the run's)")
    parser.add_argument("--batch", type=int, default=128, help="examples per step (the run's)")
    parser.add_argument("--window", type=int, default=50, help="steps per printed window")
    parser.add_argument("--generator-hidden-size", type=float, default=0.25,
                        help="the generator's width over the discriminator's (`electra`; the run's)")
    parser.add_argument("--init", choices=("hf", "original"), default="hf",
                        help="HF's initialisation, or the original's (original_init)")
    parser.add_argument("--seed", type=int, default=1, help="initialisation, order, masking and sampling seed")
    parser.add_argument("--output-dir", default=None,
                        help="save the run here every --checkpoint-every steps and resume from it; at the "
                             "schedule's end (--steps = --total-steps) also its held-out metrics and its "
                             "discriminator in HF's format (peer_run.py)")
    parser.add_argument("--checkpoint-every", type=int, default=250, help="steps between saves (a multiple of --window)")
    return parser


DISC_WEIGHT = 50.0  # docs/fidelity.md#losses: 1 x MLM + 50 x disc
METRICS = {"bert": ("masked_lm_loss", "masked_lm_accuracy"),
           "electra": ("masked_lm_loss", "masked_lm_accuracy", "disc_loss", "disc_auc")}


def train_step(generator, discriminator, batch, vocab, rng, sampler, with_replacement):
    """One step's loss and metrics; for `electra` also the real tokens' (logits, labels) for the AUC."""
    import torch
    masked, positions, targets, weights = mask(batch, vocab, rng, with_replacement)
    logits = slot_logits(generator, batch, masked, positions)
    loss, accuracy = slot_loss(logits, targets, weights)
    metrics, scored = {"masked_lm_loss": float(loss.detach()), "masked_lm_accuracy": accuracy}, None
    if discriminator is not None:
        fake, labels = fake_input(batch["input_ids"], positions, weights, gumbel_max(logits, sampler).numpy())
        disc_logits = discriminator(input_ids=torch.from_numpy(fake), attention_mask=torch.from_numpy(
            batch["input_mask"]), token_type_ids=torch.from_numpy(batch["segment_ids"])).logits  # [batch, seq]
        disc = disc_loss(disc_logits, labels, batch["input_mask"])
        loss = loss + DISC_WEIGHT * disc
        metrics["disc_loss"] = float(disc.detach())
        real = batch["input_mask"] == 1
        scored = (disc_logits.detach().numpy()[real], labels[real])
    return loss, metrics, scored


def main(argv=None):
    args = build_parser().parse_args(argv)
    output = Path(args.output_dir) if args.output_dir else None
    if output and args.checkpoint_every % args.window:
        raise SystemExit(f"--checkpoint-every {args.checkpoint_every} must be a multiple of --window {args.window}")

    import torch
    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    sampler = torch.Generator().manual_seed(args.seed)
    vocab = {token: i for i, token in enumerate(Path(args.vocab_file).read_text().splitlines())}
    generator, discriminator = build_models(args.objective, len(vocab), args.generator_hidden_size)
    if args.init == "original":
        original_init(*(model for model in (generator, discriminator) if model is not None))
    named = trainable(generator=generator, discriminator=discriminator)
    rng = np.random.default_rng(args.seed)
    state = {name: (torch.zeros_like(p), torch.zeros_like(p)) for name, p in named}
    models = {"generator": generator, "discriminator": discriminator}
    settings = peer_run.run_settings(args, len(vocab))
    done, windows = peer_run.load_state(output, settings, models, state, rng, sampler) if output else (0, [])
    names, history, scored = METRICS[args.objective], [], []
    ours = our_windows(args.ours, args.window) if args.ours else {}
    print(f"{'steps':>11} " + " ".join(f"{'peer ' + n:>24} {'ours':>8}" for n in names) + "   s/step  ETA",
          flush=True)
    started = time.time()
    batches = read_batches(str(Path(args.data_dir) / "train" / "*.tfrecord*"), args.batch, args.seed, skip=done)
    for step in range(done + 1, args.steps + 1):
        loss, metrics, step_scored = train_step(generator, discriminator, next(batches), vocab, rng, sampler,
                                                args.with_replacement)
        for _, p in named:
            p.grad = None
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in named], 1.0)
        adamw_step(named, state, learning_rate(step - 1, args.learning_rate, args.warmup, args.total_steps))
        history.append(metrics)
        if step_scored is not None:
            scored.append(step_scored)
        if step % args.window == 0:
            peer = {n: float(np.mean([m[n] for m in history[-args.window:]])) for n in names if n != "disc_auc"}
            if scored:
                logits, labels = (np.concatenate(part) for part in zip(*scored))
                peer["disc_auc"] = roc_auc(logits, labels)
                scored = []
            windows.append({"step": step, **peer})
            theirs = ours.get(step, {})
            per_step = (time.time() - started) / (step - done)
            print(f"{step - args.window + 1:>5}-{step:<5} " + " ".join(
                f"{peer[n]:>24.4f} {theirs.get(n, math.nan):>8.4f}" for n in names)
                + f"   {per_step:.2f}  {(args.steps - step) * per_step / 3600:.1f} h", flush=True)
        if output and (step % args.checkpoint_every == 0 or step == args.total_steps
                       or (step == args.steps and step % args.window == 0)):  # windows stay whole
            peer_run.save_state(output, step, settings, models, state, rng, sampler, windows)
    if output and args.steps == args.total_steps and discriminator is not None:
        finish(output, generator, discriminator, vocab, args)


def finish(output: Path, generator, discriminator, vocab, args) -> None:
    """At the schedule's end: the held-out metrics (dropout off, masking and sampling drawn afresh
    from the seed) and the exported discriminator, each once."""
    import torch
    if not (output / peer_run.HELD_OUT).is_file():
        generator.eval()
        discriminator.eval()
        rng, sampler = np.random.default_rng(args.seed), torch.Generator().manual_seed(args.seed)
        batches = read_batches(str(Path(args.data_dir) / "eval" / "*.tfrecord*"), args.batch, args.seed,
                               held_out=True)
        metrics = peer_run.held_out(lambda batch: train_step(generator, discriminator, batch, vocab, rng, sampler,
                                                             args.with_replacement), batches, roc_auc)
        peer_run.write_held_out(output, {"step": args.total_steps, **metrics})
        print(f"held out: {json.dumps(metrics)}", flush=True)
    if not (output / peer_run.DISCRIMINATOR).is_dir():
        print(f"discriminator: {peer_run.export_discriminator(discriminator, args.vocab_file, output)}", flush=True)


if __name__ == "__main__":
    main()
