"""Who trains the embeddings that ELECTRA's generator and discriminator share? The gradient each loss sends them.

    python experiments/electra_vs_mlm/diagnostics/shared_embedding_gradients.py MODEL_DIR --records GLOB [--step N ...]
                                                   [--batches 4] [--batch-size 128] [--seed 0]

MODEL_DIR is a pretraining model dir (config.json, vocab.txt, ckpt-N) of the `electra` objective.
For each checkpoint asked for (`--step`; default every one the dir keeps) and for the same
architecture at random init, it runs the training forward pass on `--batches` batches of
`--records` (read in order) and prints, for every variable of the shared embedding block:
- the norm of the gradient from the generator's weighted loss (gen_weight x MLM) and from the
  discriminator's (disc_weight x RTD), the median over batches (the discriminator's is spiky),
  their ratio (median and largest) and their cosine (median). The two add up to the gradient of
  the loss the step minimises (tested);
- for a checkpoint with AdamW's slots, Adam's memory: the second-moment slot's sum, divided by
  1 - beta_2^step (the original's AdamW does no bias correction, so at step t the slot holds
  that fraction of its full weight), over the mean squared norm of the gradient the optimizer
  is fed now (the total, clipped at its global norm, 1 as in the original). Near 1, the slot
  holds gradients as large as today's; above 1, it remembers larger ones, and the variable's
  steps are smaller than today's gradients alone would make them, by about its square root.
Why: the replication's `electra` generator stayed near the unigram level for all 4,520 steps, and
one suspect was that the discriminator's 50x-weighted loss steers the table the two share
(experiments/electra_vs_mlm/REPORT.md). This measures at which steps it does.
"""

import argparse
import sys
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from electra_tf.checkpoints import model_dir  # noqa: E402
from electra_tf.errors import InputError  # noqa: E402
from electra_tf.optimization import AdamWeightDecay  # noqa: E402
from pretrain_data.input_pipeline import make_dataset  # noqa: E402


def shared_variables(model) -> List[tf.Variable]:
    """The embedding block both networks read (word, position, token-type tables and its LayerNorm)."""
    return list(model.network.embeddings.trainable_variables)


def loss_gradients(model, features, seed, variables, total: bool = True) -> Dict[str, List[np.ndarray]]:
    """Dense gradients of the generator's and the discriminator's weighted losses with respect to
    `variables`, and unless `total` is false of the total the training step minimises with respect
    to every trainable variable (`variables` first); one forward pass (training). A variable a
    loss does not reach gets zeros."""
    others = [v for v in model.trainable_variables if all(v is not w for w in variables)]
    with tf.GradientTape(persistent=True) as tape:
        output = model(features, training=True, seed=seed)
        losses = {"generator": model.config.gen_weight * output.mlm.loss,  # []
                  "discriminator": output.main_loss,  # [] disc_weight x RTD
                  "total": output.loss}
    if not total:  # only Adam's memory needs it: a backward pass saved at random init
        del losses["total"]
    grads = {}
    for name, loss in losses.items():
        targets = variables + others if name == "total" else variables
        grads[name] = [tf.convert_to_tensor(g).numpy() if g is not None else np.zeros(v.shape, v.dtype.as_numpy_dtype)
                       for v, g in zip(targets, tape.gradient(loss, targets))]
    return grads


def gradient_split(model, batches, seed: int = 0, optimizer=None) -> Dict[str, Dict[str, float]]:
    """Per shared variable: the medians over `batches` of both gradients' norms, their ratio and
    cosine, the largest ratio, and with `optimizer` (AdamW, its slots read) Adam's memory."""
    variables = shared_variables(model)
    names = [v.name.split(":")[0].split("embeddings/", 1)[-1] for v in variables]
    rows = {name: [] for name in names}
    for index, features in enumerate(batches):
        grads = loss_gradients(model, features, tf.constant([seed, index]), variables, total=optimizer is not None)
        squares = [0.0] * len(variables)  # of the gradient the optimizer is fed, per shared variable
        if optimizer is not None:
            fed = grads["total"]
            if optimizer.global_clipnorm:  # as it clips (the original: 1.0): all scaled by min(1, limit / norm)
                fed = [g.numpy() for g in tf.clip_by_global_norm(fed, optimizer.global_clipnorm)[0]]
            squares = [float(np.sum(g ** 2)) for g in fed[:len(variables)]]
        for name, gen, disc, square in zip(names, grads["generator"], grads["discriminator"], squares):
            gen_norm, disc_norm = float(np.linalg.norm(gen)), float(np.linalg.norm(disc))
            rows[name].append((gen_norm, disc_norm, disc_norm / gen_norm,
                               float(gen.ravel() @ disc.ravel()) / (gen_norm * disc_norm), square))
    split = {}
    for variable, (name, values) in zip(variables, rows.items()):
        values = np.array(values)
        gen, disc, ratio, cosine = np.median(values[:, :4], axis=0)
        split[name] = {"generator": gen, "discriminator": disc, "ratio": ratio, "largest_ratio": values[:, 2].max(),
                       "cosine": cosine}
        if optimizer is not None:
            weight = 1.0 - optimizer.beta_2 ** int(optimizer.iterations.numpy())
            slot = float(tf.reduce_sum(optimizer.get_slot(variable, "adam_v")))
            split[name]["adam_memory"] = slot / weight / float(values[:, 4].mean())
    return split


def load(directory: Path, step: Optional[int], seed: int):
    """(model, AdamW with its slots or None) of the dir at ckpt-`step`; at random init (seeded,
    no optimizer) for step None. Under mixed_float16 a skipped step counts in `iterations` but not
    in the slots, so Adam's memory then reads a little low."""
    config = model_dir.load_config(directory)
    if config.objective != "electra":
        raise InputError(f"{directory}: objective {config.objective!r}; the generator and discriminator "
                         "share embeddings only under 'electra'")
    prefix = None if step is None else model_dir.checkpoint_at(directory, step)
    with_optimizer = prefix is not None and model_dir.has_optimizer_state(prefix)
    tf_keras.utils.set_random_seed(seed)
    built = model_dir.build(config, directory / model_dir.VOCAB_FILE)
    if prefix is None:
        return built.model, None
    model_dir.restore(built, prefix, directory, with_optimizer)
    # LAMB's slots are named m / v; at step 0 (an import) the slots have seen nothing
    adamw = with_optimizer and isinstance(built.optimizer, AdamWeightDecay) and int(built.optimizer.iterations) > 0
    return built.model, built.optimizer if adamw else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir", type=Path, help="a pretraining model dir of the electra objective")
    parser.add_argument("--records", required=True, help="TFRecord glob of pretraining examples (read in order)")
    parser.add_argument("--step", type=int, nargs="*", default=None,
                        help="checkpoints to measure (default: every ckpt-N the dir keeps); random init always")
    parser.add_argument("--batches", type=int, default=4, help="batches averaged over (default 4)")
    parser.add_argument("--batch-size", type=int, default=128, help="examples per batch (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="seeds masking, sampling and the random init")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = model_dir.load_config(args.model_dir)
        steps = args.step if args.step is not None else model_dir.kept_steps(args.model_dir)
        batches = list(make_dataset(args.records, config.max_seq_length, args.batch_size,
                                    is_training=False).take(args.batches))
        if not batches:
            raise InputError(f"--records {args.records}: no examples")
        print(f"{args.model_dir}: {len(batches)} batches of {args.records}; gen_weight {config.gen_weight:g}, "
              f"disc_weight {config.disc_weight:g}")
        for step in [None] + sorted(set(steps)):
            model, optimizer = load(args.model_dir, step, args.seed)
            split = gradient_split(model, batches, args.seed, optimizer)
            print(f"\n{'random init' if step is None else f'step {step}'}: gradient norm from each weighted loss "
                  "(medians over the batches)")
            print(f"{'variable':<24} {'generator':>10} {'discrim.':>10} {'disc/gen':>9} {'largest':>8} {'cosine':>7}"
                  + (f" {'Adam memory':>12}" if optimizer else ""))
            for name, row in split.items():
                print(f"{name:<24} {row['generator']:>10.4f} {row['discriminator']:>10.4f} {row['ratio']:>9.2f} "
                      f"{row['largest_ratio']:>8.2f} {row['cosine']:>+7.3f}"
                      + (f" {row['adam_memory']:>12.2f}" if optimizer else ""))
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
