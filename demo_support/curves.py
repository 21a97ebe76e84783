"""Training curves from a run's TensorBoard logs: a PNG and a text table, for people without
TensorBoard at hand.

The training panels come from `model_dir/train` (averages over each logging interval); the
held-out panels from `model_dir/eval`, which holds a point per evaluation (`eval_every_steps`)
and the final one. The held-out discriminator loss is drawn beside the loss of the best
input-blind predictor, so a reader sees whether the discriminator learned anything at all.
"""

from collections import defaultdict
from pathlib import Path

from electra_tf.training.reporting import read_scalars

# (split, tag, label) per line; one panel per tuple of lines
PANELS = (
    ("generator MLM loss", (("train", "masked_lm_loss", "train"),)),
    ("discriminator loss", (("train", "disc_loss", "train"), ("eval", "disc_loss", "held-out"),
                            ("eval", "disc_loss_constant_predictor", "constant predictor (held-out)"))),
    ("held-out real-token AUC", (("eval", "disc_auc", "held-out"),)),
    ("held-out generator accuracy", (("eval", "masked_lm_accuracy", "argmax = original"),
                                     ("eval", "masked_lm_accuracy_at_mask",
                                      "argmax = original, at [MASK]"),
                                     ("eval", "sampled_masked_lm_accuracy", "sample = original"))),
)
# the columns of `eval_curve_table`: (tag, heading)
TABLE_COLUMNS = (("disc_auc", "real-token AUC"), ("masked_lm_accuracy", "gen. accuracy"),
                 ("masked_lm_accuracy_at_mask", "at [MASK]"), ("sampled_masked_lm_accuracy", "sample=orig"),
                 ("disc_loss", "disc_loss"), ("disc_loss_constant_predictor", "constant pred."))


def plot_training_curves(model_dir, output_png) -> Path:
    """The PANELS of a model dir's train/ and eval/ logs against the step, as one PNG."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot

    scalars = {split: read_scalars(Path(model_dir) / split) for split in ("train", "eval")}
    figure, axes = pyplot.subplots(1, len(PANELS), figsize=(4 * len(PANELS), 3.4))
    for axis, (title, lines) in zip(axes, PANELS):
        for split, tag, label in lines:
            points = scalars[split].get(tag, [])
            style = "--" if tag == "disc_loss_constant_predictor" else "-"
            axis.plot([s for s, _ in points], [v for _, v in points], style, marker=".", label=label)
        if title.endswith("AUC"):
            axis.axhline(0.5, color="grey", linewidth=0.8, linestyle=":")  # chance
        if len(lines) > 1:
            axis.legend(fontsize=7)
        axis.set_title(title)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    figure.tight_layout()
    output_png = Path(output_png)
    figure.savefig(output_png, dpi=100)
    pyplot.close(figure)
    return output_png


def eval_curve_table(model_dir) -> str:
    """The held-out evaluations of a run, one row per step, as fixed-width text."""
    scalars = read_scalars(Path(model_dir) / "eval")
    columns = [(tag, heading) for tag, heading in TABLE_COLUMNS if tag in scalars]
    by_step = defaultdict(dict)
    for tag, _ in columns:
        for step, value in scalars[tag]:
            by_step[step][tag] = value
    rows = [f"{'step':>6}  " + "  ".join(f"{heading:>14}" for _, heading in columns)]
    for step in sorted(by_step):
        rows.append(f"{step:>6}  " + "  ".join(
            f"{by_step[step][tag]:>14.4f}" if tag in by_step[step] else f"{'':>14}" for tag, _ in columns))
    return "\n".join(rows)
