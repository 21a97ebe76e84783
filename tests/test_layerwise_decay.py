"""Layer-wise LR decay (fine-tuning): the original's multiplier table, its off-by-one
reproduced by default and fixed behind `fixed`, and the optimizer reading it."""

import pytest

from electra_tf import layerwise_decay
from electra_tf.optimization import create_optimizer


def _encoder_names(n_layers):
    return [
        "electra/embeddings/word_embeddings:0",
        "electra/embeddings/LayerNorm/beta:0",
        "electra/embeddings_project/kernel:0",
        *[f"electra/encoder/layer_{i}/attention/self/query/kernel:0" for i in range(n_layers)],
        "task_specific/cola/dense/kernel:0",
    ]


def test_layerwise_multipliers_original_12_layers():
    table = layerwise_decay.lr_multiplier_table(_encoder_names(12), 12, 0.8)
    assert "electra/embeddings/word_embeddings" in table  # ':0' stripped
    assert table["electra/embeddings/word_embeddings"] == pytest.approx(0.8**14)
    assert table["electra/embeddings/word_embeddings"] == pytest.approx(0.044, abs=5e-4)
    assert table["electra/embeddings/LayerNorm/beta"] == pytest.approx(0.8**14)
    assert table["electra/embeddings_project/kernel"] == pytest.approx(0.8**14)
    assert table["electra/encoder/layer_0/attention/self/query/kernel"] == pytest.approx(0.8**13)
    assert table["electra/encoder/layer_11/attention/self/query/kernel"] == pytest.approx(0.8**2)
    assert table["task_specific/cola/dense/kernel"] == 1.0


def test_layerwise_multipliers_original_24_layers():
    table = layerwise_decay.lr_multiplier_table(_encoder_names(24), 24, 0.9)
    assert table["electra/embeddings/word_embeddings"] == pytest.approx(0.9**26)
    assert table["electra/embeddings/word_embeddings"] == pytest.approx(0.065, abs=5e-4)
    assert table["electra/encoder/layer_1/attention/self/query/kernel"] == pytest.approx(0.9**24)
    assert table["electra/encoder/layer_23/attention/self/query/kernel"] == pytest.approx(0.81)
    assert table["task_specific/cola/dense/kernel"] == 1.0


def test_layerwise_multipliers_fixed():
    table = layerwise_decay.lr_multiplier_table(_encoder_names(12), 12, 0.8, fixed=True)
    assert table["electra/embeddings/word_embeddings"] == pytest.approx(0.8**13)
    assert table["electra/encoder/layer_0/attention/self/query/kernel"] == pytest.approx(0.8**12)
    assert table["electra/encoder/layer_11/attention/self/query/kernel"] == pytest.approx(0.8)
    assert table["task_specific/cola/dense/kernel"] == 1.0


@pytest.mark.parametrize(
    "name",
    [
        "discriminator_predictions/dense/kernel:0",  # a pre-training head: no key
        "electra/encoder/layer_12/output/dense/kernel:0",  # beyond n_layers
    ],
)
def test_layerwise_unknown_variable_is_an_error_naming_it(name):
    with pytest.raises(ValueError, match=name.split(":")[0]):
        layerwise_decay.lr_multiplier_table([name], 12, 0.8)


def test_optimizer_uses_the_layerwise_table():
    opt = create_optimizer(1e-4, 100, layerwise_lr_decay_power=0.8, n_transformer_layers=12,
                           fixed_layerwise_decay=True)
    assert opt.lr_multiplier("electra/encoder/layer_11/output/dense/kernel:0") == pytest.approx(0.8)
    assert create_optimizer(1e-4, 100).lr_multiplier("anything/at/all:0") == 1.0
