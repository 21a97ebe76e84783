"""Every pretraining objective trains (finite losses that go down on real Wikipedia text, tiny model)
and computes its loss as specified; the sampling hparams act inside the model."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from electra_tf.config import PretrainingConfig, has_rtd_loss
from electra_tf.optimization import create_optimizer
from electra_tf.pretraining import PretrainingModel
from pretrain_data.build import BuildOptions, build_pretraining_dataset
from pretrain_data.input_pipeline import make_dataset

SEQ, BATCH, STEPS = 64, 8, 60
BERT_IDS = dict(cls_id=101, sep_id=102, mask_id=103)


@pytest.fixture(scope="module")
def batches(corpus_dir, vocab_file, tmp_path_factory):
    """STEPS fixed batches of real packed text (the data stage on one Wikipedia file)."""
    corpus = tmp_path_factory.mktemp("one_file")
    (corpus / "wiki_00").symlink_to(sorted(corpus_dir.iterdir())[0])
    out = tmp_path_factory.mktemp("records") / "data"
    build_pretraining_dataset(BuildOptions(str(corpus), str(vocab_file), str(out), max_seq_length=SEQ,
                                           input_format="wikiextractor", quiet=True))
    dataset = make_dataset(str(out / "pretrain_data.tfrecord*"), SEQ, BATCH, is_training=True,
                           deterministic=True, seed=3)
    return list(dataset.take(STEPS))


def tiny_config(**hparams):
    values = dict(model_size="tiny", max_seq_length=SEQ, train_batch_size=BATCH, num_train_steps=1000,
                  num_warmup_steps=10, learning_rate=2e-3)
    values.update(hparams)
    return PretrainingConfig.from_hparams("test", "/unused", values)


def train(model, config, batches, stage="joint", first_step=0):
    """Plain steps (AdamW, warmup + decay, clipping); returns the loss of every step."""
    optimizer = create_optimizer(config.learning_rate, config.num_train_steps, config.weight_decay_rate,
                                 config.num_warmup_steps, 0.0, config.lr_decay_power, -1, None)
    optimizer.iterations.assign(first_step)
    variables = model.trainable_variables_for(stage)

    @tf.function
    def step(features, seed):
        with tf.GradientTape() as tape:
            output = model(features, training=True, seed=seed, stage=stage)
        grads = tape.gradient(output.loss, variables)
        optimizer.apply_gradients([(g, v) for g, v in zip(grads, variables) if g is not None])
        return output.loss

    return np.array([float(step(b, tf.constant([7, i]))) for i, b in enumerate(batches)])


def assert_learns(losses):
    assert np.isfinite(losses).all()
    first, last = losses[:10].mean(), losses[-10:].mean()
    assert last < 0.9 * first, f"loss did not go down: first 10 steps {first:.3f}, last 10 {last:.3f}"


@pytest.mark.parametrize("objective", ["electra", "bert", "electra_15", "replace_mlm", "all_tokens_mlm"])
def test_objective_loss_decreases(objective, batches):
    tf_keras.utils.set_random_seed(0)
    config = tiny_config(objective=objective)
    model = PretrainingModel(config, **BERT_IDS)
    assert_learns(train(model, config, batches))
    output = model(batches[0], training=False, seed=tf.constant([1, 2]))
    if has_rtd_loss(objective):
        assert output.rtd is not None and output.fake is not None
        if objective == "electra_15":  # the RTD loss counts only sampled positions
            weights = tf.cast(output.fake.selected, tf.float32)
            expected = tf.reduce_sum(weights * _bce(output)) / (tf.reduce_sum(weights) + 1e-6)
            # logits rebuilt from probabilities lose float32 precision near 0 and 1: rtol 1e-3
            np.testing.assert_allclose(float(output.rtd.loss), float(expected), rtol=1e-3)
    if objective == "bert":
        assert output.fake is None and model.network.discriminator_head is None
    if objective in ("replace_mlm", "all_tokens_mlm"):  # an MLM-style discriminator loss, weighed 1
        assert output.rtd is None and output.main_loss is not None
        np.testing.assert_allclose(float(output.loss), float(output.mlm.loss) + float(output.main_loss), rtol=1e-6)
        assert 0.0 < float(output.main_loss) < np.log(30522) + 1.0  # one cross-entropy over the vocab, not 50
        # the discriminator sees the generator's samples, never [MASK]
        assert not np.any(output.fake.fake_input_ids.numpy() == BERT_IDS["mask_id"])


@pytest.mark.parametrize("setting", ["uniform_generator", "disallow_correct", "temperature"])
def test_generator_settings_reach_the_samples(setting, batches):
    """The sampling hparams act inside PretrainingModel: a uniform generator scores log V on every
    slot; disallow_correct replaces every selected position; a temperature near 0 samples the argmax."""
    values = {"uniform_generator": {"uniform_generator": True}, "disallow_correct": {"disallow_correct": True},
              "temperature": {"temperature": 1e-7}}[setting]
    tf_keras.utils.set_random_seed(0)
    model = PretrainingModel(tiny_config(**values), **BERT_IDS)
    output = model(batches[0], training=False, seed=tf.constant([2, 9]))
    weights = output.masked.masked_lm_weights.numpy() > 0
    selected, replaced = output.fake.selected.numpy(), output.fake.is_replaced.numpy()
    if setting == "uniform_generator":
        np.testing.assert_allclose(output.mlm.per_slot_loss.numpy()[weights], np.log(30522), rtol=1e-6)
        assert replaced.sum() > 0.99 * selected.sum()  # 1 in 30,522 samples is the original
    elif setting == "disallow_correct":
        assert selected.sum() > 0 and np.array_equal(replaced, selected)
    else:
        # at temperature 1 an untrained generator's samples are near uniform, rarely its argmax
        np.testing.assert_array_equal(output.sampled_ids.numpy()[weights], output.mlm.preds.numpy()[weights])


def _bce(output):
    labels = tf.cast(output.fake.is_replaced, tf.float32)
    logits = -tf.math.log(1.0 / output.rtd.probs - 1.0)
    return tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)


def test_electra_loss_is_gen_plus_50_disc(batches):
    config = tiny_config()
    model = PretrainingModel(config, **BERT_IDS)
    output = model(batches[0], training=False, seed=tf.constant([4, 5]))
    np.testing.assert_allclose(float(output.loss), float(output.mlm.loss) + 50.0 * float(output.rtd.loss),
                               rtol=1e-6)
    # a sampled token equal to the original is labelled real
    fake = output.fake
    original = batches[0]["input_ids"]
    same = tf.logical_and(tf.cast(fake.selected, tf.bool), tf.equal(fake.fake_input_ids, original))
    assert not tf.reduce_any(tf.logical_and(same, tf.cast(fake.is_replaced, tf.bool)))


def test_two_stage_training(batches):
    """Paper §3.2: the generator trains alone, the discriminator starts from it, then it trains frozen."""
    config = tiny_config(generator_hidden_size=1.0, two_stage_generator_steps=30)
    model = PretrainingModel(config, **BERT_IDS)
    half = STEPS // 2
    assert_learns(train(model, config, batches[:half], stage="generator"))
    model.init_discriminator_from_generator()
    for d, g in zip(model.network.discriminator.variables, model.network.generator.variables):
        np.testing.assert_array_equal(d.numpy(), g.numpy())
    # the frozen generator includes the embedding block it shares with the discriminator
    frozen = [v.numpy().copy() for v in model.network.generator.variables]
    losses = train(model, config, batches[half:], stage="discriminator", first_step=half)
    assert np.isfinite(losses).all() and losses[-5:].mean() < losses[:5].mean()
    after = [v.numpy() for v in model.network.generator.variables]
    for before, now in zip(frozen, after):
        np.testing.assert_array_equal(before, now)
