"""Original-release TF1 checkpoints: import (with optimizer state), size inference, export, round
trip, continued pretraining and fine-tuning from an import, and one clear error per bad input."""

import json
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

import convert_checkpoint
import run_pretraining
from checkpoint_helpers import electra_shapes, original_values, save_tf1
from electra_tf.checkpoints import assign_weights, model_dir, read_pretrained
from electra_tf.checkpoints.original import infer_config
from electra_tf.config import PretrainingConfig
from electra_tf.errors import InputError
from electra_tf.modeling import build_encoder

STEP = 1234
# The tiny preset in the original's naming: V 30522, E 64, H 128, 2 layers, generator 64 wide.
TINY = dict(vocab=30522, emb=64, hidden=128, layers=2, gen_hidden=64, gen_layers=2)


def convert(*args):
    return convert_checkpoint.main([str(a) for a in args])


@pytest.fixture(scope="module")
def released(tmp_path_factory, vocab_file):
    """A checkpoint laid out as a released zip: model.ckpt-N.*, checkpoint, vocab.txt."""
    directory = tmp_path_factory.mktemp("electra_tiny")
    values = original_values(electra_shapes(**TINY), seed=0, step=STEP)
    save_tf1(values, directory, STEP)
    shutil.copyfile(vocab_file, directory / "vocab.txt")
    return directory, values


@pytest.fixture(scope="module")
def imported(released, tmp_path_factory):
    """from-original of the released checkpoint into DATA/models/imported."""
    data_dir = tmp_path_factory.mktemp("data")
    code = convert("from-original", "--checkpoint", released[0], "--output-dir", data_dir / "models" / "imported")
    assert code == 0
    return data_dir / "models" / "imported"


def test_import_loads_every_variable_slot_and_step_and_infers_the_size(released, imported, capsys):
    directory, values = released
    weights = read_pretrained(imported)
    assert set(weights.values) == set(values)
    for name, value in values.items():
        np.testing.assert_array_equal(weights.values[name], value, err_msg=name)
    assert int(weights.values["global_step"]) == STEP
    config = json.loads((imported / "config.json").read_text())
    expected = PretrainingConfig.from_hparams("x", "y", {"model_size": "tiny"})
    assert weights.config.architecture_dict() == expected.architecture_dict()
    assert config["model_size"] == "tiny" and config["model_dir"] == str(imported.resolve())
    assert (imported / "vocab.txt").read_bytes() == (directory / "vocab.txt").read_bytes()


def test_cli_prints_the_load_report(released, tmp_path, capsys):
    assert convert("from-original", "--checkpoint", released[0] / f"model.ckpt-{STEP}",
                   "--output-dir", tmp_path / "models" / "m") == 0
    out = capsys.readouterr().out
    n_vars = len(electra_shapes(**TINY))
    assert f"loaded {3 * n_vars + 1} variables, missing 0, unused 0" in out


@pytest.mark.parametrize("size, shapes, hparams", [
    ("small", dict(vocab=30522, emb=128, hidden=256, layers=12, gen_hidden=64, gen_layers=12), {}),
    ("small++", dict(vocab=30522, emb=128, hidden=256, layers=12, gen_hidden=256, gen_layers=12),
     {"generator_hidden_size": 1.0}),
    ("base", dict(vocab=30522, emb=768, hidden=768, layers=12, gen_hidden=256, gen_layers=12),
     {"generator_hidden_size": 1 / 3}),
    ("large", dict(vocab=30522, emb=1024, hidden=1024, layers=24, gen_hidden=256, gen_layers=24), {}),
    ("custom", dict(vocab=1000, emb=96, hidden=192, layers=3, gen_hidden=96, gen_layers=1),
     {"model_hparam_overrides": {"hidden_size": 192, "num_hidden_layers": 3}, "embedding_size": 96,
      "vocab_size": 1000, "generator_hidden_size": 0.5, "generator_layers": 1 / 3}),
])
def test_size_is_inferred_from_shapes(size, shapes, hparams):
    values = {name: np.broadcast_to(np.float32(0), shape) for name, shape in electra_shapes(**shapes).items()}
    config = infer_config(values, "m", "d")
    model_size = size if size != "custom" else "small"
    expected = PretrainingConfig.from_hparams("m", "d", {"model_size": model_size, **hparams})
    assert config.model_size == model_size
    assert config.architecture_dict() == expected.architecture_dict()


def test_export_round_trip_is_exact(released, imported, tmp_path):
    directory, values = released
    out = tmp_path / "exported"
    assert convert("to-original", "--model-dir", imported, "--output-dir", out) == 0
    reader = tf.train.load_checkpoint(str(out))
    assert sorted(reader.get_variable_to_shape_map()) == sorted(values)  # exactly the original's names
    for name, value in values.items():
        np.testing.assert_array_equal(reader.get_tensor(name), value, err_msg=name)
    assert tf.train.latest_checkpoint(str(out)).endswith(f"model.ckpt-{STEP}")
    written = json.loads((out / "hparams.json").read_text())
    assert written["embedding_size"] == 64 and written["model_hparam_overrides"]["max_position_embeddings"] == 512
    # import(export(x)) == x
    assert convert("from-original", "--checkpoint", out, "--output-dir", tmp_path / "models" / "again") == 0
    again = read_pretrained(tmp_path / "models" / "again").values
    assert set(again) == set(values)
    assert all(np.array_equal(again[name], value) for name, value in values.items())


def test_export_of_a_model_only_checkpoint_keeps_its_step(imported, tmp_path):
    """A checkpoint of the model alone (no optimizer, so no global_step) exports as
    model.ckpt-<N> of its own name `ckpt-N`, not as step 0."""
    source = tmp_path / "model_only"
    source.mkdir()
    for name in ("config.json", "vocab.txt"):
        shutil.copyfile(imported / name, source / name)
    config, _ = model_dir.read_model_dir(imported)
    built = model_dir.build(config, imported / "vocab.txt")
    tf.train.Checkpoint(model=built.model).write(str(source / "ckpt-77"))
    out = tmp_path / "exported"
    assert convert("to-original", "--model-dir", source, "--output-dir", out, "--step", 77) == 0
    assert tf.train.latest_checkpoint(str(out)).endswith("model.ckpt-77")
    assert model_dir.step_of(source / "ckpt-77") == 77 and model_dir.step_of(source / "model.ckpt") is None


def test_pretraining_continues_from_an_import(imported, pretraining_data_dir, capsys):
    """run_pretraining.py resumes in the imported dir ("point --model-name at the download") with
    the imported weights, Adam slots and step, and writes its own checkpoints there."""
    shutil.copytree(imported, pretraining_data_dir / "models" / "in_place")
    hparams = dict(model_size="tiny", max_seq_length=64, train_batch_size=8, num_train_steps=STEP + 2,
                   num_warmup_steps=0, save_checkpoints_steps=1, log_every=1, iterations_per_loop=1,
                   do_eval=False)
    code = run_pretraining.main(["--data-dir", str(pretraining_data_dir), "--model-name", "in_place",
                                 "--hparams", json.dumps(hparams)])
    out = capsys.readouterr().out
    assert code == 0 and "resuming from" in out and f"ckpt-{STEP}" in out
    assert re.findall(r"^step (\d+)/", out, flags=re.M) == [str(STEP + 1), str(STEP + 2)]
    resumed = tf.train.latest_checkpoint(str(pretraining_data_dir / "models" / "in_place"))
    assert resumed.endswith(f"ckpt-{STEP + 2}")
    names = {name for name, _ in tf.train.list_variables(resumed)}
    assert any(name.startswith("iterator/") for name in names)  # a normal run checkpoint from here on
    # ... which the converters read too (its input-iterator state is not a weight)
    weights = read_pretrained(pretraining_data_dir / "models" / "in_place")
    assert int(weights.values["global_step"]) == STEP + 2 and not any("iterator" in k for k in weights.values)


def test_fine_tuning_takes_the_discriminator(released, imported):
    directory, values = released
    weights = read_pretrained(imported)
    encoder = build_encoder(weights.config.discriminator_config())
    report = assign_weights(encoder.variables, weights.values, required_prefix="electra/")
    assert report.missing == [] and len(report.loaded) == len(encoder.variables)
    assert "generator_predictions/output_bias" in report.unused
    np.testing.assert_array_equal(encoder.embeddings.word_embeddings.numpy(),
                                  values["electra/embeddings/word_embeddings"])
    direct = read_pretrained(directory)  # fine-tuning may also read the release itself
    assert direct.config.model_size == "tiny" and direct.vocab_file == str(directory / "vocab.txt")
    assert assign_weights(encoder.variables, direct.values, required_prefix="electra/").loaded == report.loaded
    partial = {k: v for k, v in weights.values.items() if not k.startswith("electra/encoder/layer_1/output/dense")}
    with pytest.raises(InputError, match="electra/encoder/layer_1/output/dense/(kernel|bias)"):
        assign_weights(encoder.variables, partial, required_prefix="electra/")
    wrong = dict(weights.values)
    wrong["electra/embeddings_project/kernel"] = np.zeros([64, 100], np.float32)
    with pytest.raises(InputError, match=r"electra/embeddings_project/kernel.*\[64, 100\].*\[64, 128\]"):
        assign_weights(encoder.variables, wrong)


def _no_leftovers(parent, name):
    return not (parent / name).exists() and not [p for p in parent.iterdir() if p.name.startswith(f".{name}.")]


def test_bad_input_gives_one_clear_error_and_writes_nothing(released, tmp_path, capsys, vocab_file):
    directory, values = released
    models = tmp_path / "models"
    models.mkdir()

    def fails(message, *args):
        code = convert(*args, "--output-dir", models / "out")
        err = capsys.readouterr().err
        assert code == 2 and message in err and err.count("\n") == 1, (message, err)
        assert _no_leftovers(models, "out")

    bert = tmp_path / "bert"
    save_tf1({"bert/embeddings/word_embeddings": np.zeros([10, 4], np.float32),
              "bert/encoder/layer_0/attention/self/query/kernel": np.zeros([4, 4], np.float32)}, bert, 1)
    fails("not an ELECTRA checkpoint", "from-original", "--checkpoint", bert, "--vocab-file", vocab_file)
    small_vocab = tmp_path / "vocab.txt"
    small_vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n")
    own = tmp_path / "own_vocab"  # a model of its own 6-token vocab, imported with --hparams naming the size
    save_tf1(original_values(electra_shapes(**{**TINY, "vocab": 6}), seed=0, step=STEP), own, STEP)
    shutil.copyfile(small_vocab, own / "vocab.txt")
    assert convert("from-original", "--checkpoint", own, "--output-dir", models / "own",
                   "--hparams", json.dumps({"model_size": "tiny"})) == 0  # vocab_size: the table's 6
    capsys.readouterr()
    fails("has 6 tokens but the word-embedding table has 30522 rows", "from-original", "--checkpoint",
          directory, "--vocab-file", small_vocab)
    partial = tmp_path / "partial"
    save_tf1({k: v for k, v in values.items() if k != "generator/encoder/layer_1/output/dense/kernel"}, partial, 1)
    fails("lacks the required variable generator/encoder/layer_1/output/dense/kernel (shape [256, 64])",
          "from-original", "--checkpoint", partial, "--vocab-file", vocab_file)
    fails("variable electra/embeddings/word_embeddings: the checkpoint has shape [30522, 64], the model has "
          "shape [30522, 32]", "from-original", "--checkpoint", directory,
          "--hparams", json.dumps({"model_size": "tiny", "embedding_size": 32}))
    corrupt = tmp_path / "corrupt"
    shutil.copytree(directory, corrupt)
    data = corrupt / f"model.ckpt-{STEP}.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    fails("is corrupt or incomplete", "from-original", "--checkpoint", corrupt)
    fails("no such directory or checkpoint", "from-original", "--checkpoint", tmp_path / "nothing")
    (models / "taken").mkdir()
    code = convert("from-original", "--checkpoint", directory, "--output-dir", models / "taken")
    assert code == 2 and "exists; pass --overwrite" in capsys.readouterr().err
    assert list((models / "taken").iterdir()) == []
    assert convert("from-original", "--checkpoint", directory, "--output-dir", models / "taken", "--overwrite") == 0
    assert (models / "taken" / "config.json").exists()
    for source, command in ((directory, ["from-original", "--checkpoint"]), (models / "taken", ["to-original", "--model-dir"])):
        kept = sorted(p.name for p in source.iterdir())  # replacing the dir read (or one holding it) would delete it
        for out in (source, source.parent):
            assert convert(*command, source, "--output-dir", out, "--overwrite") == 2
            assert "holds the model being read" in capsys.readouterr().err
        assert sorted(p.name for p in source.iterdir()) == kept
