"""Training curves from a run's TensorBoard logs, as a PNG (for people without TensorBoard at hand)."""

from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Tuple

import tensorflow as tf
from tensorflow.core.util import event_pb2

CURVES = (("masked_lm_loss", "generator MLM loss"), ("disc_loss", "discriminator loss"),
          ("disc_accuracy", "discriminator accuracy"))


def read_scalars(log_dir) -> Dict[str, List[Tuple[int, float]]]:
    """{tag: [(step, value), ...]} of every scalar in the event files of `log_dir`, by step."""
    series = defaultdict(list)
    for path in sorted(Path(log_dir).glob("events.out.tfevents.*")):
        for record in tf.data.TFRecordDataset(str(path)):
            event = event_pb2.Event.FromString(record.numpy())
            for value in event.summary.value:
                series[value.tag].append((event.step, float(tf.make_ndarray(value.tensor))))
    return {tag: sorted(points) for tag, points in series.items()}


def plot_training_curves(log_dir, output_png) -> Path:
    """Generator loss, discriminator loss and discriminator accuracy against the step."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot

    scalars = read_scalars(log_dir)
    figure, axes = pyplot.subplots(1, len(CURVES), figsize=(4 * len(CURVES), 3.2))
    for axis, (tag, title) in zip(axes, CURVES):
        points = scalars.get(tag, [])
        axis.plot([s for s, _ in points], [v for _, v in points], marker=".")
        axis.set_title(title)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    figure.tight_layout()
    output_png = Path(output_png)
    figure.savefig(output_png, dpi=100)
    pyplot.close(figure)
    return output_png
