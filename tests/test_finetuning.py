"""Fine-tuning end to end on real GLUE data with a tiny pretrained model: weights, loss, LR table,
padding, trials, results and GLUE-server test files, and the CLI's errors."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import run_finetuning
from electra_tf import layerwise_decay
from electra_tf.config import PretrainingConfig
from electra_tf.errors import InputError
from electra_tf.pretraining import PretrainingModel
from finetune.config import FinetuningConfig
from finetune.task_data import load_task_data, make_tokenizer
from finetune.tasks import get_task
from finetune.model import FinetuningModel
from finetune.pretrained import load_encoder_weights
from finetune.runner import Trial, main_score
from finetuning_helpers import BASE, data_dir, finetuning_config, run_cli  # noqa: F401 (data_dir: a fixture)


def test_encoder_weights_come_from_the_pretrained_discriminator(data_dir):
    config = finetuning_config(data_dir, task_names=["mrpc"])
    pretrained = PretrainingModel(PretrainingConfig.from_json_file(data_dir / "models/tiny/config.json"), 101, 102, 103)
    tf.train.Checkpoint(model=pretrained).read(str(data_dir / "models/tiny/ckpt-7")).expect_partial()
    expected = {v.name: v.numpy() for v in pretrained.network.discriminator.variables}
    model = FinetuningModel(config.encoder_config(), [get_task("mrpc")])
    report = load_encoder_weights(model.encoder_variables, config.init_checkpoint)
    assert len(report.loaded) == len(model.encoder_variables) == len(expected) and report.unused
    assert not report.missing
    for variable in model.encoder_variables:
        np.testing.assert_array_equal(variable.numpy(), expected[variable.name])

    deeper = FinetuningModel(finetuning_config(data_dir, task_names=["mrpc"],
                                               model_hparam_overrides={"num_hidden_layers": 3}).encoder_config(),
                             [get_task("mrpc")])
    with pytest.raises(InputError, match="lacks the required variable electra/encoder/layer_2/"):
        load_encoder_weights(deeper.encoder_variables, config.init_checkpoint)
    wider = FinetuningModel(finetuning_config(data_dir, task_names=["mrpc"], embedding_size=32).encoder_config(),
                            [get_task("mrpc")])
    with pytest.raises(InputError, match=r"electra/embeddings/word_embeddings: the checkpoint has shape \[30522, 64\]"):
        load_encoder_weights(wider.encoder_variables, config.init_checkpoint)


@pytest.mark.parametrize("layers, decay, hidden", [(12, 0.8, 256), (24, 0.9, 64)])
def test_layerwise_multipliers_of_every_finetuning_variable(data_dir, layers, decay, hidden):
    config = finetuning_config(data_dir, task_names=["mrpc", "sts"], model_size="small",
                               model_hparam_overrides={"num_hidden_layers": layers, "hidden_size": hidden})
    model = FinetuningModel(config.encoder_config(), [get_task("mrpc"), get_task("sts")])
    table = layerwise_decay.lr_multiplier_table(model.trainable_variables, layers, decay)
    assert len(table) == len(model.trainable_variables)
    for name, multiplier in table.items():  # docs/fidelity.md#layer-wise-decay: decay ** (n_layers + 2 - depth)
        if name.startswith("electra/embeddings"):  # the embedding block and its projection: depth 0
            expected = decay ** (layers + 2)
        elif name.startswith("task_specific/"):
            expected = 1.0
        else:
            layer = int(name.split("/")[2].split("_")[1])
            expected = decay ** (layers + 1 - layer)
        assert multiplier == pytest.approx(expected), name
    assert table["electra/embeddings_project/kernel"] == pytest.approx(decay ** (layers + 2))
    assert table[f"electra/encoder/layer_{layers - 1}/output/dense/kernel"] == pytest.approx(decay ** 2)
    assert table["task_specific/sts/dense/kernel"] == 1.0
    # "fixed_layerwise_decay": true corrects the off-by-one: the top layer gets decay^1
    fixed = finetuning_config(data_dir, task_names=["mrpc"], fixed_layerwise_decay=True)
    fixed_table = layerwise_decay.lr_multiplier_table(model.trainable_variables, layers, decay,
                                                      fixed=fixed.fixed_layerwise_decay)
    assert fixed_table[f"electra/encoder/layer_{layers - 1}/output/dense/kernel"] == pytest.approx(decay)


@pytest.mark.parametrize("values, lr, top, weight_decay", [
    ({"learning_rate": 1e-3}, 1e-3, 0.8 ** 2, 0.01),  # the original's fine-tuning defaults
    ({"learning_rate": 1e-3, "fixed_layerwise_decay": True}, 1e-3, 0.8, 0.01),  # the off-by-one corrected
    ({"model_size": "small", "model_hparam_overrides": {"num_hidden_layers": 2}, "recipe": "paper"},
     3e-4, 0.8 ** 2, 0.0)],  # the paper's Table 7 for Small
    ids=["defaults", "fixed-decay", "paper-recipe"])
def test_a_trial_trains_with_the_configured_optimizer(data_dir, values, lr, top, weight_decay):
    """The optimizer a trial's train step is compiled with: AdamW with the config's peak rate, 10 % warm-up and linear
    decay over the trial's steps, weight decay off for LayerNorm and biases, clipping at global
    norm 1, and layer-wise decay 0.8 over the encoder's depth (2 layers here)."""
    decay = 0.8
    base = {k: v for k, v in BASE.items() if k != "learning_rate"}
    config = FinetuningConfig.from_hparams("tiny", str(data_dir), {**base, "task_names": ["mrpc"],
                                                                  "random_init": True, **values})
    trial = Trial(config, load_task_data(config, make_tokenizer(config)), 1, None)
    trial.compile_train_step(200)
    optimizer, schedule = trial.optimizer, trial.optimizer._get_hyper("learning_rate")
    assert type(optimizer).__name__ == "AdamWeightDecay" and optimizer.global_clipnorm == 1.0
    assert (schedule.initial_learning_rate, schedule.decay_steps, schedule.warmup_steps) == pytest.approx((lr, 200, 20))
    assert float(schedule(20)) == pytest.approx(lr * 0.9) and float(schedule(200)) == 0.0
    assert optimizer.weight_decay_rate == weight_decay
    multipliers = {v.name.split(":")[0]: optimizer.lr_multiplier(v.name) for v in trial.model.trainable_variables}
    assert multipliers["electra/embeddings/word_embeddings"] == pytest.approx(top * decay ** 2)  # below 2 layers
    assert multipliers["electra/encoder/layer_0/attention/self/query/kernel"] == pytest.approx(top * decay)
    assert multipliers["electra/encoder/layer_1/output/dense/kernel"] == pytest.approx(top)
    assert multipliers["task_specific/mrpc/dense/kernel"] == 1.0
    decayed = {name for name in multipliers if optimizer.uses_weight_decay(name)}
    if weight_decay:
        assert "electra/encoder/layer_1/output/dense/kernel" in decayed
        assert not any("LayerNorm" in name or name.endswith("bias") for name in decayed)
    else:
        assert not decayed


def test_loss_is_each_examples_own_task_summed_over_the_batch(data_dir):
    tasks = [get_task("mrpc"), get_task("sts")]
    model = FinetuningModel(finetuning_config(data_dir, task_names=["mrpc", "sts"]).encoder_config(), tasks)
    rng = np.random.default_rng(0)
    batch = {"input_ids": rng.integers(1, 1000, (6, 9)).astype(np.int32), "input_mask": np.ones((6, 9), np.int32),
             "segment_ids": np.zeros((6, 9), np.int32), "task_id": np.array([0, 1, 0, 1, 1, 0], np.int32),
             "label_ids": np.array([1, 0, 0, 0, 0, 1], np.int32),
             "targets": np.array([0, 0.2, 0, 0.8, 0.4, 0], np.float32)}
    outputs = model(batch, training=False)
    logits, scores = outputs["mrpc"].numpy(), outputs["sts"].numpy()[:, 0]
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -sum(log_probs[i, batch["label_ids"][i]] for i in (0, 2, 5))
    expected += sum((scores[i] - batch["targets"][i]) ** 2 for i in (1, 3, 4))
    assert float(model.loss(batch, outputs)) == pytest.approx(expected, rel=1e-5)


def test_a_process_reuses_the_tokenizer_of_the_same_vocab(tmp_path, data_dir, vocab_file):
    """Runs of one process share a tokenizer per vocab and casing (the replication runs one trial
    per run); a vocab file rewritten in place gets a tokenizer of its new tokens."""
    first = make_tokenizer(finetuning_config(data_dir))
    assert make_tokenizer(finetuning_config(data_dir, task_names=["sts"])) is first
    assert make_tokenizer(finetuning_config(data_dir, do_lower_case=False)) is not first
    vocab = tmp_path / "vocab.txt"
    tokens = Path(vocab_file).read_text(encoding="utf-8").splitlines()
    vocab.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    before = make_tokenizer(finetuning_config(data_dir, vocab_file=str(vocab)))
    assert before.convert_tokens_to_ids(["hello"]) == first.convert_tokens_to_ids(["hello"])
    index = tokens.index("hello")
    tokens[index], tokens[index + 1] = tokens[index + 1], tokens[index]
    vocab.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    after = make_tokenizer(finetuning_config(data_dir, vocab_file=str(vocab)))
    assert after is not before and after.convert_tokens_to_ids(["hello"]) == [index + 1]


def test_dynamic_padding_predicts_what_fixed_padding_predicts(data_dir):
    dynamic = finetuning_config(data_dir, task_names=["sts"], do_train=False, random_init=True)
    data = load_task_data(dynamic, make_tokenizer(dynamic))
    trial = Trial(dynamic, data, 1, None)
    with_dynamic, losses = trial.predict(data.dev[0])
    trial.config = finetuning_config(data_dir, task_names=["sts"], do_train=False, dynamic_padding=False)
    with_fixed, fixed_losses = trial.predict(data.dev[0])
    assert len(with_dynamic) == 48
    np.testing.assert_allclose(with_dynamic, with_fixed, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(losses, fixed_losses, rtol=1e-4, atol=1e-5)


def test_multitask_trials_results_and_glue_test_files(data_dir, capsys):
    code, out, err = run_cli(data_dir, capsys, task_names=["MRPC", "cola", "STS-B"], num_trials=2,
                             write_test_outputs=True, keep_best_model=True, num_train_epochs=2.0)
    assert code == 0, err
    results_dir = data_dir / "models" / "tiny" / "results"
    document = json.loads((results_dir / "mrpc_cola_sts_results.json").read_text())
    assert len(document["trials"]) == 2
    for trial in document["trials"]:
        assert set(trial) == {"mrpc", "cola", "sts"}
        assert 0 <= trial["mrpc"]["accuracy"] <= 100 and 0 <= trial["mrpc"]["f1"] <= 100
        assert -100 <= trial["cola"]["mcc"] <= 100 and -100 <= trial["sts"]["spearman"] <= 100
        assert {"pearson", "spearman", "mse", "loss"} <= set(trial["sts"])
    values = [t["sts"]["pearson"] for t in document["trials"]]
    stats = document["aggregate"]["sts"]["pearson"]
    assert stats["median"] == pytest.approx(np.median(values)) and stats["max"] == max(values)
    assert stats["std"] == pytest.approx(np.std(values, ddof=1))
    assert "task  metric" in out and "ETA" in out and "epoch 1.00 dev: mrpc accuracy" in out
    assert (results_dir / "mrpc_cola_sts_results.txt").read_text().startswith("mrpc: accuracy: ")
    test_dir = results_dir / "glue_test"
    assert sorted(p.name for p in test_dir.iterdir()) == ["CoLA.tsv", "MRPC.tsv", "STS-B.tsv"]
    for name, rows, valid in (("MRPC", 1725, {"0", "1"}), ("CoLA", 1063, {"0", "1"}), ("STS-B", 1379, None)):
        lines = (test_dir / f"{name}.tsv").read_text().splitlines()
        assert lines[0] == "index\tprediction" and len(lines) == rows + 1
        indices, labels = zip(*(line.split("\t") for line in lines[1:]))
        assert indices == tuple(str(i) for i in range(rows))
        if valid:
            assert set(labels) <= valid
        else:
            assert all(0.0 <= float(label) <= 5.0 for label in labels)
    # keep_best_model: each trial reports (and keeps) its epoch with the best mean of first metrics
    for number, trial in enumerate(document["trials"], 1):
        epochs = [[float(first) for first in re.findall(r"(?:^|; )\w+ \w+ (-?[\d.]+)", line)] for line in
                  re.findall(rf"^\[trial {number}\] epoch \d\.00 dev: (.*)$", out, flags=re.M)]
        assert len(epochs) == 2 and all(len(firsts) == 3 for firsts in epochs)
        assert main_score(trial) == pytest.approx(max(np.mean(firsts) for firsts in epochs), abs=0.01)
    # GLUE-server files come from the trial with the best main score
    assert document["test_predictions"]["trial"] == 1 + int(np.argmax([main_score(t) for t in document["trials"]]))
    model_dir = data_dir / "models" / "tiny" / "finetuning_models" / "mrpc_cola_sts_model_1"
    assert (model_dir / "finetuned.index").exists() and (model_dir / "best.index").exists()

    # evaluation only, from the fine-tuned model: the same dev scores as the trial's best epoch
    code, out, err = run_cli(data_dir, capsys, task_names=["MRPC", "cola", "STS-B"], do_train=False,
                             init_checkpoint=str(model_dir))
    assert code == 0, err
    again = json.loads((results_dir / "mrpc_cola_sts_results.json").read_text())["trials"][0]
    for task, metrics in document["trials"][0].items():
        for metric, value in metrics.items():
            assert again[task][metric] == pytest.approx(value, abs=1e-3), (task, metric)


@pytest.mark.parametrize("values, message", [
    ({"task_names": ["mrpc"], "learnig_rate": 1e-3}, "did you mean 'learning_rate'"),
    ({"task_names": ["rte"]}, "no data for task rte"),
    ({"task_names": ["mrpc"], "model_size": "small"}, "the pretrained model has model_size 'tiny'"),
    ({"task_names": ["mrpc"], "vocab_size": 1000}, "has 30522 tokens but vocab_size is 1000"),
])
def test_bad_input_gives_one_clear_error(data_dir, capsys, values, message):
    code, _, err = run_cli(data_dir, capsys, **values)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_bad_row_in_task_data_names_file_and_line(tmp_path, data_dir, capsys):
    (tmp_path / "finetuning_data" / "rte").mkdir(parents=True)
    (tmp_path / "finetuning_data" / "rte" / "train.tsv").write_text(
        "index\ts1\ts2\tlabel\n0\ta\tb\tentailment\n1\ta\tb\tmaybe\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny").symlink_to(data_dir / "models" / "tiny")
    code = run_finetuning.main(["--data-dir", str(tmp_path), "--model-name", "tiny",
                                "--hparams", json.dumps({**BASE, "task_names": ["rte"]})])
    err = capsys.readouterr().err
    assert code == 2 and "rte/train.tsv:3: unknown label 'maybe' for rte" in err


@pytest.mark.parametrize("drop, batch, steps", [(False, 20, 3), (True, 20, 2), (False, 64, 1), (True, 64, 0)])
def test_an_epoch_ends_with_its_remainder_as_the_original(data_dir, capsys, drop, batch, steps):
    """48 CoLA rows in batches of 20: the original's ceil(48 / 20) = 3 steps an epoch (its data padded
    to a multiple of the batch with rows of zero loss), the last on the 8 rows left; with
    drop_last_partial_batch the 2 full batches alone. In batches of 64: one step on the 48 rows, or
    with the option none, which is an error naming the sizes."""
    code, out, err = run_cli(data_dir, capsys, task_names=["cola"], random_init=True, train_batch_size=batch,
                             drop_last_partial_batch=drop, keep_all_models=False, do_eval=False)
    if steps == 0:
        assert code == 2 and "48 training examples, train_batch_size 64 and num_train_epochs 1.0 give no " \
                              "training step" in err, err
        return
    assert code == 0, err
    assert re.search(rf"^\[trial 1\] train: {steps}/{steps} steps", out, flags=re.M), out


