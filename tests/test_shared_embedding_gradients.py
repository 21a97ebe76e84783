"""benchmarks/shared_embedding_gradients.py: the generator's and the discriminator's gradients to
the shared embeddings add up to the training step's, Adam's memory reads the checkpoint's slots,
and a model dir it cannot measure gives one clear error."""

import numpy as np
import pytest
import tensorflow as tf

from benchmarks.shared_embedding_gradients import gradient_split, load, loss_gradients, main, shared_variables
from electra_tf.checkpoints import model_dir
from electra_tf.config import PretrainingConfig
from pretrain_data.input_pipeline import make_dataset


@pytest.fixture(scope="module")
def records(pretraining_data_dir):
    return str(pretraining_data_dir / "pretrain_tfrecords" / "eval" / "*")


def _model_dir(tmp_path, vocab_file, objective="electra", step=3, slot_value=None, dropout=0.1):
    """A tiny model dir at ckpt-`step`, its Adam second-moment slots set to `slot_value`."""
    dropouts = {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
    config = PretrainingConfig.from_hparams("m", str(tmp_path), {"model_size": "tiny", "max_seq_length": 64,
                                                                 "objective": objective,
                                                                 "model_hparam_overrides": dropouts})
    built = model_dir.build(config, vocab_file)
    built.optimizer.iterations.assign(step)
    if slot_value is not None:
        for variable in built.model.trainable_variables:
            built.optimizer.get_slot(variable, "adam_v").assign(tf.fill(variable.shape, slot_value))
    directory = tmp_path / "models" / objective
    model_dir.save_built(built, config, vocab_file, directory)
    return directory


def test_the_two_losses_send_the_shared_embeddings_the_steps_gradient(tmp_path, vocab_file, records):
    model, _ = load(_model_dir(tmp_path, vocab_file), 0, seed=0)
    features = next(iter(make_dataset(records, 64, 8, is_training=False)))
    variables = shared_variables(model)
    assert sorted(v.name.split("/")[-1] for v in variables) == ["beta:0", "gamma:0", "position_embeddings:0",
                                                                "token_type_embeddings:0", "word_embeddings:0"]
    grads = loss_gradients(model, features, tf.constant([0, 0]), variables)
    for gen, disc, total in zip(grads["generator"], grads["discriminator"], grads["total"]):
        assert np.linalg.norm(gen) > 0 and np.linalg.norm(disc) > 0
        np.testing.assert_allclose(gen + disc, total, rtol=1e-4, atol=1e-6)
    assert len(grads["total"]) == len(model.trainable_variables)  # the clip sees every variable's gradient


def test_adam_memory_is_the_slot_over_the_clipped_squared_gradient(tmp_path, vocab_file, records):
    """With every second-moment slot at 1e-4, the memory of the word table is 1e-4 x its size over
    the median squared norm of its gradient after clipping at global norm 1 (no dropout, so the
    gradients recomputed here are the same)."""
    directory = _model_dir(tmp_path, vocab_file, slot_value=1e-4, dropout=0.0)
    model, optimizer = load(directory, 3, seed=0)
    assert optimizer is not None and optimizer.global_clipnorm == 1.0
    batches = list(make_dataset(records, 64, 8, is_training=False).take(3))
    split = gradient_split(model, batches, seed=0, optimizer=optimizer)
    seen = []
    for index, features in enumerate(batches):
        grads = loss_gradients(model, features, tf.constant([0, index]), shared_variables(model))
        norm = np.sqrt(sum(np.sum(g ** 2) for g in grads["total"]))
        seen.append(np.sum((min(1.0, 1.0 / norm) * grads["total"][0]) ** 2))
    size = int(np.prod(shared_variables(model)[0].shape))
    assert split["word_embeddings"]["adam_memory"] == pytest.approx(1e-4 * size / np.median(seen), rel=1e-4)
    row = split["word_embeddings"]
    assert row["ratio"] <= row["largest_ratio"] and -1 <= row["cosine"] <= 1


def test_cli_prints_random_init_and_each_checkpoint(tmp_path, vocab_file, records, capsys):
    directory = _model_dir(tmp_path, vocab_file)
    assert main([str(directory), "--records", records, "--batches", "2", "--batch-size", "8"]) == 0
    out = capsys.readouterr().out
    assert "step 0 (random init)" in out and "step 3:" in out
    assert out.count("word_embeddings") == 2 and "Adam memory" in out  # save_built keeps the slots
    # the discriminator's weight of 50 dominates the shared table at random init
    random_init = out.split("step 0 (random init)")[1].split("step 3")[0]
    word = next(line for line in random_init.splitlines() if line.startswith("word_embeddings")).split()
    assert float(word[2]) > float(word[1])


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
