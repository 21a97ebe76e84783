"""A fine-tuning trial's TensorBoard events (`<model dir>/tensorboard/{train,eval}`), read back:
the training scalars at every progress line (loss as printed, the schedule's learning rate, the
gradient norm, examples/s) and every dev evaluation's scores as the trial returned them."""

import io
import math
import re

import pytest

from electra_tf.training import reporting
from electra_tf.training.interruption import Interruption
from finetune.runner import TENSORBOARD, Trial
from finetune.task_data import load_task_data, make_tokenizer
from test_finetuning import data_dir, finetuning_config  # noqa: F401 (data_dir is a fixture)

# MRPC's 48 rows in both orders (96) at batch 16: 6 steps an epoch, 2 epochs; a progress line every 4 steps
STEPS, PER_EPOCH = 12, 6


def read_scalars(directory) -> dict:
    """{tag: {step: value}} of the event files under `directory` (the library's reader)."""
    assert list(directory.glob("events.out.tfevents.*")), directory
    return {tag: dict(points) for tag, points in reporting.read_scalars(directory).items()}


@pytest.fixture(scope="module")
def trial_and_scores(data_dir):  # noqa: F811
    config = finetuning_config(data_dir, task_names=["mrpc"], num_train_epochs=2.0, iterations_per_loop=4)
    trial = Trial(config, load_task_data(config, make_tokenizer(config)), 1, io.StringIO())
    trial.initialise()
    evaluations = []
    evaluate = trial.evaluate

    def kept_evaluate():
        evaluations.append(evaluate())
        return evaluations[-1]

    trial.evaluate = kept_evaluate
    with Interruption(io.StringIO()) as interrupt:
        trial.train(interrupt)
    return trial, evaluations


def test_training_scalars_at_every_progress_line(trial_and_scores):
    trial, _ = trial_and_scores
    train = read_scalars(trial.model_dir / TENSORBOARD / "train")
    assert set(train) == {"loss", "learning_rate", "grad_norm", "examples_per_second"}
    assert all(sorted(values) == [4, 8, 12] for values in train.values())
    printed = [float(x) for x in re.findall(r"^\[trial 1\] train: .* loss ([\d.]+)$", trial.stream.getvalue(), flags=re.M)]
    # the printed loss has 4 decimals; the event holds float32: the two may round a unit apart
    assert [train["loss"][step] for step in (4, 8, 12)] == pytest.approx(printed, abs=1.5e-4)
    schedule = trial.optimizer.learning_rate  # warm-up to 1e-3 over 1.2 steps, then linear decay to 0 at step 12
    for step, rate in train["learning_rate"].items():
        assert rate == pytest.approx(float(schedule(step)), rel=1e-6)
    assert train["learning_rate"][4] == pytest.approx(1e-3 * (1 - 4 / STEPS), rel=1e-2)
    assert train["learning_rate"][12] == 0.0
    for step in (4, 8, 12):
        assert 0 < train["grad_norm"][step] < 1e3 and math.isfinite(train["grad_norm"][step])
        assert 0 < train["examples_per_second"][step] < 1e6
        assert 0 < train["loss"][step] < 16 * 5  # a summed two-class cross-entropy of 16 rows, each below 5 nats


def test_every_dev_evaluation_is_in_the_eval_events(trial_and_scores):
    trial, evaluations = trial_and_scores
    scalars = read_scalars(trial.model_dir / TENSORBOARD / "eval")
    assert set(scalars) == {"mrpc/accuracy", "mrpc/f1", "mrpc/loss"}
    assert len(evaluations) == 2
    for step, scores in zip((PER_EPOCH, STEPS), evaluations):
        for name, value in scores["mrpc"].items():
            assert scalars[f"mrpc/{name}"][step] == pytest.approx(value, rel=1e-6)
    assert all(0 <= scalars["mrpc/accuracy"][step] <= 100 for step in (PER_EPOCH, STEPS))


def test_events_files_are_read_in_the_order_they_were_opened(tmp_path):
    """A resumed run's files are read oldest first even where their names sort the other way (two
    writers opened in the same second: the counter in the name sorts as text)."""
    import tensorflow as tf
    for value in (1.0, 2.0):
        writer = tf.summary.create_file_writer(str(tmp_path))
        with writer.as_default():
            tf.summary.scalar("loss", value, step=1)
        writer.close()
    first, second = reporting.event_files(tmp_path)
    first.rename(tmp_path / "events.out.tfevents.9999999999.z")
    second.rename(tmp_path / "events.out.tfevents.0000000000.a")
    assert [reporting.logged_points(path)[0][1]["loss"] for path in reporting.event_files(tmp_path)] == [1.0, 2.0]
