"""experiments/electra_vs_mlm/diagnostics/pretrain_peer_curve.py, the independent pretraining it compares our runs with: its
masking, schedule, sampling, labels, losses and AUC are the original's (docs/fidelity.md, #masking to
#metrics, and docs/fidelity.md#optimizer-and-schedule), its ELECTRA shares what the original shares
(docs/fidelity.md#tying), and it reads our log's windows right."""

import math

import numpy as np
import pytest

from experiments.electra_vs_mlm.diagnostics.pretrain_peer_curve import (
    SLOTS, adamw_step, build_models, disc_loss, fake_input, gumbel_max, learning_rate, mask, original_init, our_windows,
    roc_auc, trainable)


def peer_batch(lengths):
    """Rows of the given lengths: [CLS] a [SEP] b [SEP] with ids 10-99 for the words."""
    rng = np.random.default_rng(0)
    ids = np.zeros((len(lengths), 128), np.int64)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(10, 100, length)
        ids[row, [0, length // 2, length - 1]] = [1, 2, 2]
    return {"input_ids": ids, "input_mask": (np.arange(128)[None, :] < lengths[:, None]).astype(np.int64)}


@pytest.mark.parametrize("with_replacement", [False, True])
def test_peer_curve_masks_as_the_original(with_replacement):
    """Used slots per row max(1, min(19, round(0.15 x real tokens))), at real non-special tokens
    (distinct ones without replacement, as the pilots pin); only used slots can become [MASK], 85 % of
    them; everything else keeps its token."""
    vocab = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[MASK]": 3}
    lengths = np.array([128, 40, 5] * 200)
    batch = peer_batch(lengths)
    ids = batch["input_ids"]
    masked, positions, targets, weights = mask(batch, vocab, np.random.default_rng(1), with_replacement)
    assert positions.shape == weights.shape == (600, SLOTS) == (600, 19)
    # round(6.0) = 6 and max(1, round(0.75)) = 1 for the 40- and 5-token rows
    np.testing.assert_array_equal(weights.sum(1), np.tile([19, 6, 1], 200))
    used = weights > 0
    rows = np.nonzero(used)[0]
    assert np.all(ids[rows, positions[used]] >= 10)  # never [CLS], [SEP] or padding
    np.testing.assert_array_equal(targets, np.take_along_axis(ids, positions, 1))
    at_used = np.zeros_like(ids, bool)
    at_used[rows, positions[used]] = True
    np.testing.assert_array_equal(masked[~at_used], ids[~at_used])  # unused slots mask nothing
    assert np.all((masked[at_used] == 3) | (masked[at_used] == ids[at_used]))  # [MASK] or kept, never random
    assert np.all((masked == 3).sum(1) <= weights.sum(1))
    # A position drawn by several slots is [MASK] if any of them chose it (the original scatters
    # [MASK] at the chosen slots only), so count positions drawn once, in the long rows.
    once = [(row, p) for row in range(0, 600, 3) for p in positions[row] if (positions[row] == p).sum() == 1]
    share = np.mean([masked[row, p] == 3 for row, p in once])
    assert len(once) > 3000 and 0.82 < share < 0.88  # 0.85 within 5 sigma
    duplicates = sum(len(set(line[w > 0])) < int(w.sum()) for line, w in zip(positions, weights))
    assert (duplicates > 0) == with_replacement  # 19 draws among 124 candidates repeat now and then


def test_peer_curve_schedule_is_our_optimizers():
    """docs/fidelity.md#optimizer-and-schedule: linear decay from step 0 times min(1, step / warmup),
    as PolynomialDecayWithWarmup."""
    from electra_tf.optimization import PolynomialDecayWithWarmup
    ours = PolynomialDecayWithWarmup(1e-3, 3312, warmup_steps=199)
    for step in (0, 49, 99, 199, 1000, 3312):
        assert learning_rate(step, 1e-3, 199, 3312) == pytest.approx(float(ours(step)), rel=1e-6, abs=1e-12)
    assert learning_rate(1000, 1e-3, 0, 4000) == pytest.approx(7.5e-4)  # no warm-up: decay alone


def test_peer_optimizer_is_adamw_without_bias_correction():
    """docs/fidelity.md#optimizer-and-schedule: m and v without bias correction, update
    m / (sqrt(v) + 1e-6), plus 0.01 x the weight except on LayerNorm and bias names."""
    import torch
    named = [("encoder.dense.weight", torch.nn.Parameter(torch.tensor([1.0, -2.0]))),
             ("encoder.LayerNorm.weight", torch.nn.Parameter(torch.tensor([1.0, -2.0]))),
             ("encoder.dense.bias", torch.nn.Parameter(torch.tensor([1.0, -2.0])))]
    for _, p in named:
        p.grad = torch.tensor([0.5, 0.1])
    state = {name: (torch.zeros_like(p), torch.zeros_like(p)) for name, p in named}
    adamw_step(named, state, lr=0.1)
    m, v = 0.1 * np.array([0.5, 0.1]), 0.001 * np.array([0.5, 0.1]) ** 2
    step = m / (np.sqrt(v) + 1e-6)  # about 3.16 per element: no bias correction (with it, 1.0)
    np.testing.assert_allclose(state["encoder.dense.weight"][0].numpy(), m, rtol=1e-6)
    np.testing.assert_allclose(named[0][1].detach().numpy(), [1.0, -2.0] - 0.1 * (step + 0.01 * np.array([1.0, -2.0])),
                               rtol=1e-6)
    for _, p in named[1:]:
        np.testing.assert_allclose(p.detach().numpy(), [1.0, -2.0] - 0.1 * step, rtol=1e-6)


def test_peer_curve_reads_our_full_windows_from_tensorboard(tmp_path):
    """Our run's metrics start afresh in each process (one events file each), from a checkpoint the
    file does not name, so a file's first point can cover fewer steps than the window: it counts
    only at step `window`; every other point counts when the one before it in its file is a window
    earlier; a window that a resumed process repeats keeps its first value."""
    import tensorflow as tf
    processes = [[(50, 7.0), (100, 6.9)],  # from step 0
                 [(100, 6.85), (150, 6.8), (200, 6.7)],  # resumed from ckpt-75: 100 covers 25 steps
                 [(200, 6.65), (250, 6.5), (300, 6.3)],  # from ckpt-180
                 [(250, 6.4), (300, 6.2)]]  # from ckpt-200 (killed, redone): 300 was already read
    for points in processes:
        writer = tf.summary.create_file_writer(str(tmp_path / "train"))
        with writer.as_default():
            for step, loss in points:
                for name, value in (("loss", loss), ("masked_lm_loss", loss), ("masked_lm_accuracy", 0.1)):
                    tf.summary.scalar(name, value, step=step)
                writer.flush()
        writer.close()
    windows = our_windows(str(tmp_path), 50)
    assert {step: round(w["masked_lm_loss"], 4) for step, w in windows.items()} == {
        50: 7.0, 100: 6.9, 150: 6.8, 200: 6.7, 250: 6.5, 300: 6.3}
    assert set(windows[50]) == {"loss", "masked_lm_loss", "masked_lm_accuracy"}


def test_fake_input_writes_the_sample_into_every_used_slot():
    """docs/fidelity.md#sampling: the sample goes into every used slot, kept ones too; unused slots
    (weight 0, position 0)
    write nothing; a sample equal to the original is labelled real (the original's is_fake_tokens)."""
    ids = np.array([[1, 20, 21, 22, 2, 0]])
    positions = np.array([[1, 2, 3, 0]])
    weights = np.array([[1.0, 1.0, 1.0, 0.0]])
    sampled = np.array([[30, 21, 31, 99]])  # slot 1 samples the original token; slot 3 is unused
    fake, labels = fake_input(ids, positions, weights, sampled)
    np.testing.assert_array_equal(fake, [[1, 30, 21, 31, 2, 0]])
    np.testing.assert_array_equal(labels, [[0, 1, 0, 1, 0, 0]])
    assert labels.dtype == np.float32


def test_gumbel_max_samples_the_softmax():
    """argmax(logits + Gumbel noise) draws from softmax(logits): 20,000 draws over 3 tokens."""
    import torch
    logits = torch.log(torch.tensor([0.6, 0.3, 0.1])).expand(20000, 3)
    draws = gumbel_max(logits.requires_grad_(), torch.Generator().manual_seed(0))
    assert not draws.requires_grad
    share = np.bincount(draws.numpy(), minlength=3) / 20000
    np.testing.assert_allclose(share, [0.6, 0.3, 0.1], atol=0.015)  # about 4 sigma


def test_disc_loss_is_the_token_mean_over_real_tokens():
    """docs/fidelity.md#losses: summed over real tokens ([CLS] and [SEP] included), over their count;
    padding ignored."""
    import torch
    logits = torch.tensor([[0.0, 2.0, -1.0, 5.0]], dtype=torch.float64)
    labels = np.array([[0.0, 1.0, 0.0, 1.0]])
    input_mask = np.array([[1, 1, 1, 0]])
    expected = (math.log(2) + math.log1p(math.exp(-2.0)) + math.log1p(math.exp(-1.0))) / 3
    assert float(disc_loss(logits, labels, input_mask)) == pytest.approx(expected, rel=1e-5)


def test_roc_auc_counts_ties_half():
    """The pairs (positive, negative) ranked right, over all pairs; a tie counts half."""
    scores = np.array([0.1, 0.4, 0.35, 0.8, 0.4])
    labels = np.array([0, 0, 1, 1, 1])
    pairs = [(p, n) for p in scores[labels == 1] for n in scores[labels == 0]]
    expected = np.mean([1.0 if p > n else 0.5 if p == n else 0.0 for p, n in pairs])
    assert roc_auc(scores, labels) == pytest.approx(expected) == pytest.approx(5 / 6 - 1 / 12)
    assert roc_auc(np.array([0.2, 0.9]), np.array([0, 1])) == 1.0
    assert math.isnan(roc_auc(np.array([0.2, 0.9]), np.array([1, 1])))


def test_peer_electra_shares_the_embeddings_and_sizes_the_generator():
    """docs/fidelity.md#tying: one embedding module (word, position, segment tables and their LayerNorm) and the output
    matrix are the generator's and the discriminator's; each keeps its own projection. docs/fidelity.md#model-sizes: the
    generator is a quarter as wide by default (64, 1 head, FFN 256) with the same 4 layers, and as
    wide as the discriminator at `generator_hidden_size` 1.0. The optimizer sees every shared weight once."""
    generator, discriminator = build_models("electra", 100)
    assert generator.electra.embeddings is discriminator.electra.embeddings
    assert generator.generator_lm_head.weight is discriminator.electra.embeddings.word_embeddings.weight
    assert generator.electra.embeddings_project is not discriminator.electra.embeddings_project
    g, d = generator.config, discriminator.config
    assert (g.hidden_size, g.num_attention_heads, g.intermediate_size, g.num_hidden_layers) == (64, 1, 256, 4)
    assert (d.hidden_size, d.num_attention_heads, d.intermediate_size, d.embedding_size) == (256, 4, 1024, 128)
    named = trainable(generator=generator, discriminator=discriminator)
    assert len({id(p) for _, p in named}) == len(named)
    every = {id(p) for p in generator.parameters()} | {id(p) for p in discriminator.parameters()}
    assert {id(p) for _, p in named} == every
    full, _ = build_models("electra", 100, generator_hidden_size=1.0)  # s4_full_generator's
    f = full.config
    assert (f.hidden_size, f.num_attention_heads, f.intermediate_size, f.embedding_size) == (256, 4, 1024, 128)
    bert, none = build_models("bert", 100)
    assert none is None and bert.config.hidden_size == 256 and len(trainable(generator=bert, discriminator=None)) > 0


def test_original_init_draws_the_originals_weights():
    """`--init original`: matrices and tables from a normal of 0.02 truncated at 2 standard deviations,
    `embeddings_project` and the discriminator's output layer glorot uniform (limit sqrt(6 / (fan_in +
    fan_out))), biases 0, LayerNorm 1 / 0, and no frozen [PAD] row, as the original's weights."""
    import torch
    generator, discriminator = build_models("electra", 100, generator_hidden_size=1.0)
    original_init(generator, discriminator)
    for model in (generator, discriminator):
        project = model.electra.embeddings_project.weight  # [256, 128]
        limit = math.sqrt(6 / (128 + 256))
        assert project.abs().max() <= limit and project.std() > 0.8 * limit / math.sqrt(3)
        attention = model.electra.encoder.layer[0].attention.self.query
        assert attention.weight.abs().max() <= 0.04 and 0.015 < attention.weight.std() < 0.02
        assert torch.all(attention.bias == 0)
    output = discriminator.discriminator_predictions.dense_prediction.weight  # [1, 256]
    assert output.abs().max() <= math.sqrt(6 / 257) and output.std() > 0.05
    embeddings = discriminator.electra.embeddings
    assert embeddings.word_embeddings.padding_idx is None and embeddings.word_embeddings.weight[0].abs().sum() > 0
    assert torch.all(embeddings.LayerNorm.weight == 1) and torch.all(generator.generator_lm_head.bias == 0)
