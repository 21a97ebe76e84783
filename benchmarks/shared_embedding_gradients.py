"""Who trains the embeddings that ELECTRA's generator and discriminator share? The gradient each loss sends them.

    python benchmarks/shared_embedding_gradients.py MODEL_DIR --records GLOB [--step N ...]
                                                   [--batches 4] [--batch-size 128] [--seed 0]

MODEL_DIR is a pretraining model dir (config.json, vocab.txt, ckpt-N) of the `electra` objective.
For each checkpoint asked for (`--step`; default every one the dir keeps) and for the same
architecture at random init (step 0), it runs the training forward pass on `--batches` batches of
`--records` (read in order) and prints, for every variable of the shared embedding block:
- the norm of the gradient from the generator's weighted loss (gen_weight x MLM) and from the
  discriminator's (disc_weight x RTD), the median over batches (the discriminator's is spiky),
  their ratio (median and largest) and their cosine (median). The two add up to the gradient of
  the loss the step minimises (tested);
- for a checkpoint with its Adam slots, Adam's memory: the sum of the second-moment slot over the
  median squared norm of the gradient the optimizer sees now (the total, clipped at the
  optimizer's global norm, 1 as in the original). Near 1, the slot tracks today's gradients; far above 1, it remembers
  larger ones and shrinks the variable's steps by about its square root.
Why: the replication's `electra` generator stayed near the unigram level for all 4,520 steps, and
one suspect was that the discriminator's 50x-weighted loss steers the table the two share
(benchmarks/RESULTS.md, the paper replication). This measures at which steps it does.
"""

import argparse
import sys
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from electra_tf.checkpoints import model_dir  # noqa: E402
from electra_tf.errors import InputError  # noqa: E402
from pretrain_data.input_pipeline import make_dataset  # noqa: E402


def shared_variables(model) -> List[tf.Variable]:
    """The embedding block both networks read (word, position, token-type tables and its LayerNorm)."""
    return list(model.network.embeddings.trainable_variables)


def loss_gradients(model, features, seed, variables) -> Dict[str, List[np.ndarray]]:
    """Dense gradients of the generator's and the discriminator's weighted losses with respect to
    `variables`, and of the total the training step minimises with respect to every trainable
    variable (`variables` first); one forward pass (training)."""
    others = [v for v in model.trainable_variables if all(v is not w for w in variables)]
    with tf.GradientTape(persistent=True) as tape:
        output = model(features, training=True, seed=seed)
        losses = {"generator": model.config.gen_weight * output.mlm.loss,  # []
                  "discriminator": output.main_loss,  # [] disc_weight x RTD
                  "total": output.loss}
    return {name: [tf.convert_to_tensor(g).numpy()
                   for g in tape.gradient(loss, variables + others if name == "total" else variables)]
            for name, loss in losses.items()}


def gradient_split(model, batches, seed: int = 0, optimizer=None) -> Dict[str, Dict[str, float]]:
    """Per shared variable: the medians over `batches` of both gradients' norms, their ratio and
    cosine, the largest ratio, and with `optimizer` (its slots read) Adam's memory."""
    variables = shared_variables(model)
    names = [v.name.split(":")[0].split("embeddings/", 1)[-1] for v in variables]
    rows = {name: [] for name in names}
    for index, features in enumerate(batches):
        grads = loss_gradients(model, features, tf.constant([seed, index]), variables)
        limit = optimizer.global_clipnorm if optimizer is not None else None  # the original's: 1.0
        norm = float(np.sqrt(sum(np.sum(g ** 2) for g in grads["total"])))
        clip = min(1.0, limit / norm) if limit else 1.0
        for name, gen, disc, total in zip(names, grads["generator"], grads["discriminator"], grads["total"]):
            gen_norm, disc_norm = float(np.linalg.norm(gen)), float(np.linalg.norm(disc))
            rows[name].append((gen_norm, disc_norm, disc_norm / gen_norm,
                               float(gen.ravel() @ disc.ravel()) / (gen_norm * disc_norm),
                               float(np.sum((clip * total) ** 2))))
    split = {}
    for variable, (name, values) in zip(variables, rows.items()):
        values = np.array(values)
        gen, disc, ratio, cosine, seen = np.median(values, axis=0)
        split[name] = {"generator": gen, "discriminator": disc, "ratio": ratio, "largest_ratio": values[:, 2].max(),
                       "cosine": cosine}
        if optimizer is not None:
            split[name]["adam_memory"] = float(tf.reduce_sum(optimizer.get_slot(variable, "adam_v"))) / seen
    return split


def load(directory: Path, step: int, seed: int):
    """(model, optimizer with its slots or None) of the dir at ckpt-`step`, or at random init
    (seeded, no optimizer) for step 0."""
    config = model_dir.load_config(directory)
    if config.objective != "electra":
        raise InputError(f"{directory}: objective {config.objective!r}; the generator and discriminator "
                         "share embeddings only under 'electra'")
    tf_keras.utils.set_random_seed(seed)
    built = model_dir.build(config, directory / model_dir.VOCAB_FILE)
    if not step:
        return built.model, None
    prefix = model_dir.checkpoint_at(directory, step)
    has_slots = any(".OPTIMIZER_SLOT/" in name for name, _ in tf.train.list_variables(prefix))
    tf.train.Checkpoint(model=built.model).read(prefix).assert_existing_objects_matched().expect_partial()
    if not has_slots:
        return built.model, None
    tf.train.Checkpoint(model=built.model, optimizer=built.tracked_optimizer).read(prefix).expect_partial()
    return built.model, built.optimizer


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir", type=Path, help="a pretraining model dir of the electra objective")
    parser.add_argument("--records", required=True, help="TFRecord glob of pretraining examples (read in order)")
    parser.add_argument("--step", type=int, nargs="*", default=None,
                        help="checkpoints to measure (default: every ckpt-N the dir keeps); 0 is random init")
    parser.add_argument("--batches", type=int, default=4, help="batches averaged over (default 4)")
    parser.add_argument("--batch-size", type=int, default=128, help="examples per batch (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="seeds masking, sampling and the random init")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = model_dir.load_config(args.model_dir)
        steps = [0] + (args.step if args.step is not None else model_dir.kept_steps(args.model_dir))
        batches = list(make_dataset(args.records, config.max_seq_length, args.batch_size,
                                    is_training=False).take(args.batches))
        if not batches:
            raise InputError(f"--records {args.records}: no examples")
        print(f"{args.model_dir}: {len(batches)} batches of {args.records}; gen_weight {config.gen_weight:g}, "
              f"disc_weight {config.disc_weight:g}")
        for step in sorted(set(steps)):
            model, optimizer = load(args.model_dir, step, args.seed)
            split = gradient_split(model, batches, args.seed, optimizer)
            print(f"\nstep {step}{' (random init)' if step == 0 else ''}: gradient norm from each weighted loss "
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
