"""Fine-tuning with `precision: "mixed_bfloat16"`: bfloat16 compute with float32 variables, losses
and outputs, TensorFlow's ops instead of the float32-only fused CPU kernels, no policy left behind
for what runs next, checkpoints shared with float32 runs both ways, float32 outputs of the SQuAD and
tagging heads, and the config's error."""

import math

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from electra_tf import cpu_kernels
from electra_tf.training.distribution import precision_scope
from finetune.chunking import TaggingHead
from finetune.task_data import load_task_data, make_tokenizer
from finetune.inputs import pad_batch, train_batches
from finetune.qa_head import QAHead
from finetune.runner import FINETUNED, Trial
from checkpoint_helpers import graph_nodes, matmul_dtypes
from test_finetuning import data_dir, finetuning_config, run_cli  # noqa: F401 (data_dir is a fixture)

PRECISIONS = ("mixed_bfloat16", "float32")
STEPS = 3  # BASE's 48 MRPC rows at batch 16: one epoch
FUSED_LAYER_OPS = {"ElectraAttention", "ElectraBiasGelu", "ElectraResidualLayerNorm"}
# After 3 steps at lr 1e-4 from the same weights and batches, the two runs' MRPC logits (|logit| < 1
# here) differ by bfloat16's rounding carried through the tiny encoder and the updates: its 8
# significant bits round a number near 1 by up to 2^-8, and the measured gap is 0.03 (probabilities:
# 0.009). The bound allows ~25 such roundings; a two-label softmax moves by at most half the
# largest logit change, hence the probabilities' bound. Measured loss gaps are below 0.5 %.
LOGIT_TOLERANCE = 0.1
PROBABILITY_TOLERANCE = LOGIT_TOLERANCE / 2
LOSS_RTOL = 0.02


def new_trial(data_dir, precision, **values):  # noqa: F811
    config = finetuning_config(data_dir, task_names=["mrpc"], precision=precision, learning_rate=1e-4, **values)
    return Trial(config, load_task_data(config, make_tokenizer(config)), 1, None)


@pytest.fixture(scope="module")
def trials(data_dir):  # noqa: F811
    """{precision: (trial after STEPS steps, its train step, its losses, its initial variables)}, the
    bf16 one first, and the global policy between the two."""
    out, policy_between = {}, None
    for precision in PRECISIONS:
        trial = new_trial(data_dir, precision)
        trial.initialise()
        initial = [v.numpy() for v in trial.model.variables]
        step = trial.compile_train_step(STEPS)
        config = trial.config
        losses = [step(batch) for batch in train_batches(trial.data.train, config.train_batch_size, STEPS, trial.rng,
                                                         config.dynamic_padding, config.max_seq_length,
                                                         trial.make_batch)]
        out[precision] = (trial, step, losses, initial)
        policy_between = policy_between or tf_keras.mixed_precision.global_policy().name
    return out, policy_between


def test_bf16_trial_computes_in_bfloat16_with_float32_variables_and_losses(trials):
    out, policy_between = trials
    assert policy_between == "float32"  # the bf16 trial left the global policy as it found it
    for precision, (trial, step, losses, _) in out.items():
        dense = [layer for layer in trial.model.submodules if isinstance(layer, tf_keras.layers.Dense)]
        compute = "bfloat16" if precision == "mixed_bfloat16" else "float32"
        assert dense and {layer.compute_dtype for layer in dense} == {compute}, precision
        assert {v.dtype for v in trial.model.variables} == {tf.float32}
        assert len(losses) == STEPS and all(loss.dtype == tf.float32 and math.isfinite(float(loss))
                                            for loss in losses)
        graph = step.get_concrete_function().graph.as_graph_def()
        matmuls = matmul_dtypes(graph)
        float32_matmuls = {name for name, dtype in matmuls.items() if dtype == "float32"}
        ops = {node.op for node in graph_nodes(graph)}
        built = cpu_kernels.library() is not None
        if precision == "mixed_bfloat16":
            # every matmul, forward and backward, in bfloat16 but the embeddings' token-type one-hot
            # product and its gradient (the embedding sum stays float32 by design)
            assert len(matmuls) > 20 and float32_matmuls == {
                "finetuning_model/electra/embeddings/MatMul",
                "gradient_tape/finetuning_model/electra/embeddings/MatMul/MatMul"}, float32_matmuls
            assert not ops & FUSED_LAYER_OPS
        else:
            assert float32_matmuls == set(matmuls)
            assert ops & FUSED_LAYER_OPS == (FUSED_LAYER_OPS if built else set())
        assert ("ElectraAdamWeightDecay" in ops) == built  # the fused update of the float32 variables
        scores = trial.evaluate()["mrpc"]
        assert 0 <= scores["accuracy"] <= 100 and math.isfinite(scores["loss"])
        predictions, eval_losses = trial.predict_step(pad_batch(trial.data.dev[0].features, range(8)))
        assert predictions["mrpc"].dtype == tf.int32 and eval_losses["mrpc"].dtype == tf.float32


def test_bf16_and_float32_trials_from_the_same_start_predict_close_probabilities(trials):
    out, _ = trials
    (bf16, _, bf16_losses, bf16_initial), (fp32, _, fp32_losses, fp32_initial) = out.values()
    for a, b in zip(bf16_initial, fp32_initial):  # same pretrained encoder, same seeded head
        np.testing.assert_array_equal(a, b)
    split = fp32.data.dev[0]
    batch = pad_batch(split.features, range(len(split.features)))
    logits = {name: trial.model(batch, training=False)["mrpc"] for name, trial in (("bf16", bf16), ("fp32", fp32))}
    assert logits["bf16"].dtype == tf.float32
    logit_gap = np.abs(logits["bf16"].numpy() - logits["fp32"].numpy()).max()
    probabilities = {name: tf.nn.softmax(value).numpy() for name, value in logits.items()}
    gap = np.abs(probabilities["bf16"] - probabilities["fp32"]).max()
    assert 0 < logit_gap < LOGIT_TOLERANCE and 0 < gap < PROBABILITY_TOLERANCE, (logit_gap, gap)
    assert np.abs(probabilities["fp32"] - 0.5).max() < 0.4  # not saturated, where gaps would vanish
    np.testing.assert_allclose([float(x) for x in bf16_losses], [float(x) for x in fp32_losses], rtol=LOSS_RTOL)


@pytest.mark.parametrize("source, target", [PRECISIONS, PRECISIONS[::-1]])
def test_a_checkpoint_written_in_one_precision_loads_in_the_other(trials, data_dir, tmp_path, source,  # noqa: F811
                                                                  target):
    trained = trials[0][source][0]
    trained.checkpoint.write(str(tmp_path / FINETUNED))
    restored = new_trial(data_dir, target, init_checkpoint=str(tmp_path), do_train=False)
    restored.initialise()  # reads finetuned, every object matched
    assert {layer.compute_dtype for layer in restored.model.submodules if isinstance(layer, tf_keras.layers.Dense)} \
        == {"bfloat16" if target == "mixed_bfloat16" else "float32"}
    assert len(restored.model.variables) == len(trained.model.variables)
    for mine, theirs in zip(restored.model.variables, trained.model.variables):
        assert mine.name == theirs.name
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


@pytest.mark.parametrize("training", [True, False])
def test_span_heads_give_float32_outputs_and_losses_on_bfloat16_hidden_states(training):
    """The SQuAD head (training outputs, or inference beams) and the tagging head, in bf16."""
    batch_size, length, hidden = 3, 16, 32
    with precision_scope("mixed_bfloat16"):
        heads = [QAHead("squad", hidden, beam_size=4), TaggingHead("chunk", 5, hidden)]
    sequence = tf.random.stateless_normal([batch_size, length, hidden], [0, 1], dtype=tf.bfloat16)
    ones = tf.ones([batch_size, length], tf.int32)
    batch = {"input_mask": ones, "segment_ids": ones,
             "start_positions": tf.constant([1, 2, 0]), "end_positions": tf.constant([3, 2, 0]),
             "is_impossible": tf.constant([0.0, 0.0, 1.0]), "labeled_positions": tf.constant([[1, 2], [3, 4], [5, 6]]),
             "tag_ids": tf.constant([[0, 1], [2, 3], [4, 0]]), "labels_mask": tf.ones([batch_size, 2])}
    for head in heads:
        assert head.compute_dtype == "bfloat16"
        outputs = head(sequence, batch, training=training)
        floats = outputs.values() if isinstance(outputs, dict) else [outputs]
        assert {t.dtype for t in floats if t.dtype.is_floating} == {tf.float32}
        loss = head.per_example_loss(outputs, batch)
        assert loss.dtype == tf.float32 and loss.shape == [batch_size] and np.isfinite(loss.numpy()).all()


def test_an_unknown_precision_is_one_clear_error(data_dir, capsys):  # noqa: F811
    code, _, err = run_cli(data_dir, capsys, task_names=["mrpc"], precision="float16")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "precision 'float16' is not one of: float32, mixed_bfloat16, mixed_float16" in err
