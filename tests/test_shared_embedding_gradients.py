"""experiments/electra_vs_mlm/diagnostics/shared_embedding_gradients.py: the generator's and the discriminator's gradients to
the shared embeddings add up to the training step's, Adam's memory reads the checkpoint's slots,
and a model dir it cannot measure gives one clear error."""

import numpy as np
import pytest
import tensorflow as tf

from experiments.electra_vs_mlm.diagnostics.shared_embedding_gradients import gradient_split, load, loss_gradients, main, shared_variables
from electra_tf.checkpoints import model_dir
from electra_tf.config import PretrainingConfig
from pretrain_data.input_pipeline import make_dataset


@pytest.fixture(scope="module")
def records(pretraining_data_dir):
    return str(pretraining_data_dir / "pretrain_tfrecords" / "eval" / "*")


def _model_dir(tmp_path, vocab_file, objective="electra", step=3, dropout=0.1):
    """A tiny model dir at ckpt-`step` (its optimizer's slots at zero)."""
    dropouts = {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
    config = PretrainingConfig.from_hparams("m", str(tmp_path), {"model_size": "tiny", "max_seq_length": 64,
                                                                 "objective": objective,
                                                                 "model_hparam_overrides": dropouts})
    built = model_dir.build(config, vocab_file)
    built.optimizer.iterations.assign(step)
    directory = tmp_path / "models" / f"{objective}_{step}"
    model_dir.save_built(built, config, vocab_file, directory)
    return directory


def test_the_two_losses_send_the_shared_embeddings_the_steps_gradient(tmp_path, vocab_file, records):
    model, _ = load(_model_dir(tmp_path, vocab_file), None, seed=0)  # random init
    features = next(iter(make_dataset(records, 64, 8, is_training=False)))
    variables = shared_variables(model)
    assert sorted(v.name.split("/")[-1] for v in variables) == ["beta:0", "gamma:0", "position_embeddings:0",
                                                                "token_type_embeddings:0", "word_embeddings:0"]
    grads = loss_gradients(model, features, tf.constant([0, 0]), variables)
    for gen, disc, total in zip(grads["generator"], grads["discriminator"], grads["total"]):
        assert np.linalg.norm(gen) > 0 and np.linalg.norm(disc) > 0
        np.testing.assert_allclose(gen + disc, total, rtol=1e-4, atol=1e-6)
    assert len(grads["total"]) == len(model.trainable_variables)  # the clip sees every variable's gradient


def test_adam_memory_reads_1_for_a_slot_that_holds_the_batches_mean_clipped_gradient(tmp_path, vocab_file, records):
    """Second-moment slots holding what AdamW would after 3 steps whose squared gradients average
    those of the 3 batches, each clipped by the optimizer itself, without bias correction
    ((1 - 0.999^3) x the mean of g^2), read 1; the clip is exercised (every global norm is above 1).
    No dropout, so the gradients recomputed here are the script's."""
    model, optimizer = load(_model_dir(tmp_path, vocab_file, dropout=0.0), 3, seed=0)
    assert optimizer is not None and optimizer.global_clipnorm == 1.0 and int(optimizer.iterations.numpy()) == 3
    batches = list(make_dataset(records, 64, 8, is_training=False).take(3))
    shared = shared_variables(model)
    everything = shared + [v for v in model.trainable_variables if all(v is not w for w in shared)]
    squares = []
    for index, batch in enumerate(batches):
        total = loss_gradients(model, batch, tf.constant([0, index]), shared)["total"]
        assert float(tf.linalg.global_norm([tf.constant(g) for g in total])) > 1.0
        clipped = optimizer._transform_gradients([(tf.constant(g), v) for g, v in zip(total, everything)])
        squares.append([tf.square(gradient) for gradient, _ in clipped[:len(shared)]])
    for index, variable in enumerate(shared):
        mean = tf.add_n([batch[index] for batch in squares]) / len(batches)
        optimizer.get_slot(variable, "adam_v").assign((1 - 0.999 ** 3) * mean)
    split = gradient_split(model, batches, seed=0, optimizer=optimizer)
    for name, row in split.items():
        assert row["adam_memory"] == pytest.approx(1.0, rel=1e-4), name
        assert row["ratio"] <= row["largest_ratio"] and -1 <= row["cosine"] <= 1


def test_cli_prints_random_init_and_each_checkpoint(tmp_path, vocab_file, records, capsys):
    """Random init and every kept checkpoint; Adam's memory where the checkpoint has slots, and not
    for a checkpoint of the model alone, whose weights are still the ones read (no dropout, so
    the two runs' figures compare)."""
    directory = _model_dir(tmp_path, vocab_file, dropout=0.0)
    assert main([str(directory), "--records", records, "--batches", "2", "--batch-size", "8"]) == 0
    out = capsys.readouterr().out
    assert "\nrandom init:" in out and "\nstep 3:" in out
    assert out.count("word_embeddings") == 2 and out.count("Adam memory") == 1  # save_built keeps the slots
    # the discriminator's weight of 50 dominates the shared table at random init
    random_init = out.split("random init:")[1].split("step 3")[0]
    word = next(line for line in random_init.splitlines() if line.startswith("word_embeddings")).split()
    assert float(word[2]) > float(word[1])
    step_3 = out.split("step 3:")[1]
    model, _ = load(directory, 3, seed=0)
    model_only = tmp_path / "model_only"
    model_only.mkdir()
    for name in ("config.json", "vocab.txt"):
        (model_only / name).write_bytes((directory / name).read_bytes())
    tf.train.Checkpoint(model=model).write(str(model_only / "ckpt-3"))
    assert main([str(model_only), "--records", records, "--batches", "2", "--batch-size", "8"]) == 0
    out = capsys.readouterr().out
    assert "Adam memory" not in out
    rows = [line.split()[:6] for line in out.split("step 3:")[1].splitlines()[2:]]
    assert rows == [line.split()[:6] for line in step_3.splitlines()[2:]]  # the same weights were read
    imported = _model_dir(tmp_path, vocab_file, step=0)  # slots that have seen no step: no memory to read
    assert main([str(imported), "--records", records, "--batches", "1", "--batch-size", "8"]) == 0
    out = capsys.readouterr().out
    assert "\nstep 0:" in out and "Adam memory" not in out


def test_what_it_cannot_measure_is_one_error(tmp_path, vocab_file, records, capsys):
    bert = _model_dir(tmp_path, vocab_file, objective="bert")
    assert main([str(bert), "--records", records]) == 2
    assert "objective 'bert'; the generator and discriminator share embeddings only under 'electra'" in \
        capsys.readouterr().err
    electra = _model_dir(tmp_path, vocab_file)
    assert main([str(electra), "--records", records, "--step", "7"]) == 2
    assert "has no checkpoint ckpt-7 (it keeps: 3)" in capsys.readouterr().err
    assert main([str(electra), "--records", str(tmp_path / "none*")]) == 2
    assert "none*" in capsys.readouterr().err
