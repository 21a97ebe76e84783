"""run_pretraining.py end to end on real Wikipedia text: training, checkpoints, resume, results, errors."""

import contextlib
import io
import json
import math
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

import run_pretraining
from checkpoint_helpers import matmul_dtypes
from electra_tf.checkpoints.model_dir import read_model_dir

SEQ = 64  # the records of the shared pretraining_data_dir fixture


@pytest.fixture(scope="module")
def data_dir(pretraining_data_dir):
    return pretraining_data_dir


def hparams(**values):
    base = dict(model_size="tiny", max_seq_length=SEQ, train_batch_size=16, eval_batch_size=16,
                num_train_steps=40, num_warmup_steps=5, learning_rate=2e-3, save_checkpoints_steps=20,
                log_every=10, iterations_per_loop=10, num_eval_steps=4, do_eval=True)
    base.update(values)
    return json.dumps(base)


def run(data_dir, name, capsys, **values):
    code = run_pretraining.main(["--data-dir", str(data_dir), "--model-name", name, "--hparams", hparams(**values)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def ten_steps(data_dir):
    """The model dir of a 10-step run with its one checkpoint: a model to refuse another
    architecture over, to initialise from, and to evaluate (each test leaves it as it found it but
    for the evaluation's results/)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = run_pretraining.main(["--data-dir", str(data_dir), "--model-name", "ten_steps", "--hparams",
                                     hparams(num_train_steps=10, save_checkpoints_steps=10, do_eval=False)])
    assert code == 0, err.getvalue()
    return data_dir / "models" / "ten_steps"


def logged_losses(out):
    return [float(m) for m in re.findall(r"^step \d+/\d+ \S+ loss ([\d.]+)", out, flags=re.M)]


def test_trains_checkpoints_evaluates_and_resumes(data_dir, capsys):
    code, out, err = run(data_dir, "tiny", capsys)
    assert code == 0, err
    losses = logged_losses(out)
    assert len(losses) == 4 and losses[-1] < losses[0]
    model_dir = data_dir / "models" / "tiny"
    assert (model_dir / "ckpt-20.index").exists() and (model_dir / "ckpt-40.index").exists()
    assert (model_dir / "config.json").exists() and (model_dir / "vocab.txt").exists()
    assert list((model_dir / "train").glob("events.out.tfevents.*"))
    results = json.loads((model_dir / "results" / "unsup_results.json").read_text())
    for name in ("masked_lm_accuracy", "masked_lm_accuracy_at_mask", "sampled_masked_lm_accuracy",
                 "disc_auc", "disc_accuracy", "disc_precision", "disc_recall"):
        assert 0.0 <= results[name] <= 1.0, name
    assert 0.0 < results["disc_loss"] < 1.0 and 0.0 < results["masked_lm_loss"] < math.log(30522) + 1.0
    assert "masked_lm_accuracy_at_mask " in out and "(at [MASK] " in out
    # the gradient's norm before clipping, per logged interval, on the console and in TensorBoard
    from electra_tf.training.reporting import read_scalars
    norms = [float(m) for m in re.findall(r"^step \d+/40 .* grad_norm ([\d.]+) \|", out, flags=re.M)]
    assert len(norms) == 4 and all(0.0 < norm < 1e4 for norm in norms)
    assert [value for _, value in read_scalars(model_dir / "train")["grad_norm"]] == pytest.approx(norms, abs=1e-4)
    assert results["global_step"] == 40 and results["eval_batches"] == 4
    assert results["eval_examples"] == 64  # 4 full batches of 16, num_eval_steps reached
    assert results["eval_complete"] == 0.0 and "not the whole set" in out
    assert "disc_auc = " in (model_dir / "results" / "unsup_results.txt").read_text()

    # the same command with more steps continues from step 40
    code, out, err = run(data_dir, "tiny", capsys, num_train_steps=60)
    assert code == 0, err
    assert "resuming from" in out and "ckpt-40" in out
    assert re.findall(r"^step (\d+)/60", out, flags=re.M) == ["50", "60"]
    assert json.loads((model_dir / "results" / "unsup_results.json").read_text())["global_step"] == 60


def test_architecture_change_is_refused(data_dir, ten_steps, capsys):
    code, _, err = run(data_dir, ten_steps.name, capsys, num_train_steps=10,
                       model_hparam_overrides={"num_hidden_layers": 3})
    assert code == 2 and "another architecture" in err and "discriminator" in err
    code, _, err = run(data_dir, ten_steps.name, capsys, num_train_steps=20, train_batch_size=8)
    assert code == 2 and "trains with train_batch_size 16: its checkpoint keeps the data reader's place" in err
    stopped = data_dir / "models" / "stopped_early"  # a run that ended before its first checkpoint
    stopped.mkdir()
    shutil.copyfile(ten_steps / "config.json", stopped / "config.json")
    code, _, err = run(data_dir, stopped.name, capsys, num_train_steps=10, do_eval=False, save_checkpoints_steps=10,
                       model_hparam_overrides={"num_hidden_layers": 1})
    assert code == 0, err  # nothing to keep: another architecture may start there


@pytest.mark.parametrize("values, message", [
    ({"learnig_rate": 1e-3}, "did you mean 'learning_rate'"),
    ({"pretrain_tfrecords": "/nonexistent/pretrain_data.tfrecord*"}, "no TFRecord file matches"),
    ({"max_seq_length": 128}, "records hold 64 tokens but max_seq_length is 128"),
    ({"vocab_size": 1000}, "has 30522 tokens but vocab_size is 1000"),
])
def test_bad_input_gives_one_clear_error(data_dir, capsys, values, message):
    code, _, err = run(data_dir, "bad", capsys, num_train_steps=5, **values)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_whole_word_masking_without_wordpiece_pieces_is_refused_before_any_writing(data_dir, tmp_path, capsys):
    """A vocab of the right size whose tokens never start with ## (another tokenizer's) cannot
    tell words apart: one error naming the file, and no model dir."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join("xx" + line[2:] if line.startswith("##") else line
                             for line in (data_dir / "vocab.txt").read_text(encoding="utf-8").splitlines(True)))
    code, _, err = run(data_dir, "no_pieces", capsys, num_train_steps=5, vocab_file=str(vocab),
                       whole_word_masking=True)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"vocab file {vocab} has no WordPiece continuations" in err
    assert not (data_dir / "models" / "no_pieces").exists()


def test_unwritable_model_dir(data_dir, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    code, _, err = run(data_dir, "x", capsys, num_train_steps=5, model_dir=str(blocker / "model"))
    assert code == 2 and "is not writable" in err


@pytest.mark.parametrize("values", [
    {"precision": "mixed_bfloat16"},
    {"strategy": "mirrored", "gradient_accumulation_steps": 2, "per_replica_clipping": True},
    {"two_stage_generator_steps": 10, "generator_hidden_size": 1.0},
    {"objective": "bert"},
    # XLA once, with whole-word masking (which the model refuses without the vocab's "##" ids); the
    # default masking under XLA: test_objectives.py (a whole run of it here cost the suite 38 s)
    {"whole_word_masking": True, "jit_compile": True},
], ids=["bf16", "mirrored_accumulation_per_replica_clipping", "two_stage", "bert", "whole_words_xla"])
def test_engines_and_schedules(data_dir, capsys, monkeypatch, values):
    from electra_tf.training import pretraining_runner
    clip_norms = {}  # who clips: the optimizer after aggregation (default) or the step, per replica
    traced = []  # the graphs the training step was traced into

    def spy(name, function):
        def recording(*args, **kwargs):
            clip_norms[name] = kwargs["clip_norm"]
            return function(*args, **kwargs)
        monkeypatch.setattr(pretraining_runner, name, recording)

    def recording_graphs(make_step):
        def make(*args, **kwargs):
            step = make_step(*args, **kwargs)

            def step_in_its_graph(*step_args):
                traced.append(tf.compat.v1.get_default_graph())
                return step(*step_args)
            return step_in_its_graph
        return make

    spy("create_optimizer", pretraining_runner.create_optimizer)
    spy("make_train_step", recording_graphs(pretraining_runner.make_train_step))
    name = "engine_" + "_".join(sorted(values))
    code, out, err = run(data_dir, name, capsys, num_train_steps=20, save_checkpoints_steps=10,
                         num_eval_steps=2, **values)
    assert code == 0, err
    losses = logged_losses(out)
    assert len(losses) == 2 and all(map(math.isfinite, losses))
    model_dir = data_dir / "models" / name
    results = json.loads((model_dir / "results" / "unsup_results.json").read_text())
    assert results["global_step"] == 20 and math.isfinite(results["masked_lm_loss"])
    config = json.loads((model_dir / "config.json").read_text())
    assert {key: config[key] for key in values} == values
    # the settings take effect in the traced step: XLA compiles its forward and backward pass only with
    # jit_compile (the generator's Gumbel noise is XLA's either way), and its matmuls run in bfloat16
    # with mixed_bfloat16 but the embeddings' token-type one-hot products
    graph = traced[0].as_graph_def()
    assert any(f.attr["_XlaMustCompile"].b for f in graph.library.function
               if "loss_and_gradients" in f.signature.name) == values.get("jit_compile", False)
    matmuls = matmul_dtypes(graph)
    compute = "bfloat16" if values.get("precision") == "mixed_bfloat16" else "float32"
    others = {name for name, dtype in matmuls.items() if dtype != compute}  # the two encoders' and gradients
    assert len(matmuls) > 20 and len(others) <= 4, others
    assert all(name.endswith(("/embeddings/MatMul", "/embeddings/MatMul/MatMul")) for name in others), others
    per_replica = values.get("per_replica_clipping", False)
    assert clip_norms == {"create_optimizer": None if per_replica else 1.0,
                          "make_train_step": 1.0 if per_replica else None}
    if values.get("objective") == "bert":  # MLM only: no discriminator head, no metric of one
        assert "disc_auc" not in results and "disc_loss" not in results
        _, weights = read_model_dir(model_dir)
        assert not [n for n in weights if n.startswith(("discriminator_predictions/", "generator/"))]
    if "two_stage_generator_steps" in values:
        # at the switch (step 10) the discriminator starts as the generator; then only it trains
        _, step_10 = read_model_dir(model_dir, str(model_dir / "ckpt-10"))
        _, step_20 = read_model_dir(model_dir, str(model_dir / "ckpt-20"))
        layers = [n for n in step_10 if n.startswith("generator/encoder/") and "adam" not in n]
        assert layers
        for layer in layers:
            np.testing.assert_array_equal(step_10["electra" + layer[len("generator"):]], step_10[layer])
        for fixed in [n for n in step_10 if n.startswith(("generator/", "generator_predictions/"))]:
            np.testing.assert_array_equal(step_20[fixed], step_10[fixed], err_msg=fixed)
        assert not np.array_equal(step_20["electra/encoder/layer_0/output/dense/kernel"],
                                  step_10["electra/encoder/layer_0/output/dense/kernel"])


def test_keep_checkpoint_max(data_dir, capsys):
    """The newest keep_checkpoint_max checkpoints stay, the older ones go; 0 keeps every one (6 here,
    one more than the default keeps)."""
    for name, keep, expected in (("kept_2", 2, [25, 30]), ("kept_all", 0, [5, 10, 15, 20, 25, 30])):
        assert run(data_dir, name, capsys, num_train_steps=30, save_checkpoints_steps=5, keep_checkpoint_max=keep,
                   iterations_per_loop=5, do_eval=False)[0] == 0
        indexes = (data_dir / "models" / name).glob("ckpt-*.index")
        kept = sorted(int(p.name[len("ckpt-"):-len(".index")]) for p in indexes)
        assert kept == expected


def test_init_checkpoint_with_step_reset_or_kept(data_dir, ten_steps, capsys):
    source = str(ten_steps)
    code, out, err = run(data_dir, "from_reset", capsys, num_train_steps=10, init_checkpoint=source, do_eval=False)
    assert code == 0, err
    assert "initialised from" in out and re.findall(r"^step (\d+)/10", out, flags=re.M) == ["10"]
    code, out, err = run(data_dir, "from_kept", capsys, num_train_steps=20, init_checkpoint=source,
                         init_checkpoint_reset_step=False, do_eval=False)
    assert code == 0, err
    assert re.findall(r"^step (\d+)/20", out, flags=re.M) == ["20"]  # continued at step 10
    code, _, err = run(data_dir, "from_missing", capsys, num_train_steps=10, init_checkpoint=str(data_dir / "nope"))
    assert code == 2 and "init_checkpoint" in err


def test_diverging_loss_stops_with_the_step_and_keeps_the_last_checkpoint(data_dir, capsys):
    code, _, err = run(data_dir, "diverge", capsys, num_train_steps=40, learning_rate=1e30, num_warmup_steps=0,
                       save_checkpoints_steps=10, iterations_per_loop=5, log_every=5, do_eval=False)
    assert code == 1 and "the loss became" in err and "between steps" in err
    assert "last good checkpoint" in err


def test_evaluation_only_reads_the_latest_checkpoint(data_dir, ten_steps, capsys):
    code, out, err = run(data_dir, ten_steps.name, capsys, num_train_steps=10, do_train=False, learning_rate=5e-4)
    assert code == 0, err
    assert json.loads((ten_steps / "config.json").read_text())["learning_rate"] == 2e-3  # the training's, kept
    assert "evaluating" in out and "ckpt-10" in out
    results = json.loads((ten_steps / "results" / "unsup_results.json").read_text())
    assert results["global_step"] == 10 and "train_loss" not in results
    code, _, err = run(data_dir, "never_trained", capsys, do_train=False)
    assert code == 2 and "no model to evaluate" in err


def test_bad_overrides_and_batches(data_dir, capsys):
    code, _, err = run(data_dir, "bad2", capsys, model_hparam_overrides={"num_attention_heads": 0})
    assert code == 2 and "num_attention_heads 0 must be an integer of at least 1" in err
    code, _, err = run(data_dir, "bad3", capsys, train_batch_size=12, gradient_accumulation_steps=5)
    assert code == 2 and "not divisible by gradient_accumulation_steps" in err
    code, _, err = run(data_dir, "bad4", capsys, eval_tfrecords=str(data_dir / "none*"))
    assert code == 2 and "no TFRecord file matches" in err
    assert not (data_dir / "models" / "bad4").exists()  # refused before anything was written


def small_held_out_set(data_dir, path, count: int) -> str:
    """`count` held-out records of the fixture as one file, those with padding first (most of the
    64-token records are full, and the padding's effect on the AUC is what a test reads)."""
    import tensorflow as tf
    from pretrain_data.records import feature_spec
    files = sorted(str(p) for p in (data_dir / "pretrain_tfrecords" / "eval").glob("pretrain_data.tfrecord*"))
    records = [record.numpy() for record in tf.data.TFRecordDataset(files)]
    padded = [int(tf.io.parse_single_example(record, feature_spec(SEQ))["input_mask"].numpy().sum()) < SEQ
              for record in records]
    chosen = ([r for r, pad in zip(records, padded) if pad] + [r for r, pad in zip(records, padded) if not pad])[:count]
    assert any(padded), "the fixture's held-out records have no padding"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in chosen:
            writer.write(record)
    return str(path)


def test_evaluation_covers_every_held_out_example_and_records_a_curve(data_dir, tmp_path, capsys):
    """A held-out set smaller than eval_batch_size is read whole (the last batch is partial), and
    eval_every_steps leaves one TensorBoard point per evaluation with the real-token metrics."""
    from electra_tf.training.reporting import read_scalars
    count = 45  # the demo's held-out set: 45 examples, eval batches of 32 and 13
    held_out = small_held_out_set(data_dir, tmp_path / "eval.tfrecord", count)
    code, out, err = run(data_dir, "eval_all", capsys, num_train_steps=20, eval_every_steps=10,
                         eval_batch_size=32, num_eval_steps=100, eval_tfrecords=held_out)
    assert code == 0, err
    results = json.loads((data_dir / "models" / "eval_all" / "results" / "unsup_results.json").read_text())
    assert results["eval_examples"] == count and results["eval_batches"] == 2 and results["eval_complete"] == 1.0
    assert re.findall(r"^evaluation at step (\d+): ([\d,]+) held-out examples", out, flags=re.M) == [
        ("0", f"{count:,}"), ("10", f"{count:,}"), ("20", f"{count:,}")]
    curve = read_scalars(data_dir / "models" / "eval_all" / "eval")
    for name in ("disc_auc", "disc_auc_with_padding", "masked_lm_accuracy", "sampled_masked_lm_accuracy",
                 "disc_loss", "disc_loss_constant_predictor", "eval_examples"):
        assert [step for step, _ in curve[name]] == [0, 10, 20], name
        assert name in results, name
    # an untrained discriminator is at chance over real tokens; padding inflates the original's AUC
    assert abs(curve["disc_auc"][0][1] - 0.5) < 0.1
    assert curve["disc_auc_with_padding"][0][1] > curve["disc_auc"][0][1]
    assert 0.05 < results["replaced_fraction"] < 0.2


def test_empty_held_out_set_is_refused_before_training(data_dir, tmp_path, capsys):
    import tensorflow as tf
    empty = tmp_path / "empty.tfrecord"
    tf.io.TFRecordWriter(str(empty)).close()
    code, out, err = run(data_dir, "empty_eval", capsys, num_train_steps=10, eval_tfrecords=str(empty))
    assert code == 2 and "evaluation data is empty" in err
    assert not re.search(r"^step \d+", out, flags=re.M)  # no training step ran
    assert not list((data_dir / "models" / "empty_eval").glob("ckpt-*"))
