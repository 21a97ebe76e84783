"""PretrainingConfig: the original's defaults and merge order, size presets, validation, JSON."""

import dataclasses
import json
from pathlib import Path

import pytest

from electra_tf.config import PretrainingConfig
from electra_tf.errors import InputError


def build(hparams=None, **values):
    """A merged config for model "m" in data dir "/data"; keyword values join `hparams`."""
    return PretrainingConfig.from_hparams("m", "/data", {**(hparams or {}), **values})


# docs/fidelity.md#pretraining-config: every field of the original that is a dataclass field here, with its default.
ORIGINAL_DEFAULTS = dict(
    debug=False, do_train=True, do_eval=False, gen_weight=1.0, disc_weight=50.0, mask_prob=0.15,
    learning_rate=5e-4, lr_decay_power=1.0, weight_decay_rate=0.01, num_warmup_steps=10000,
    iterations_per_loop=200, save_checkpoints_steps=1000, num_train_steps=1000000,
    num_eval_steps=100, keep_checkpoint_max=5, model_size="small", model_hparam_overrides={},
    embedding_size=None, vocab_size=30522, do_lower_case=True, uniform_generator=False,
    untied_generator_embeddings=False, untied_generator=True, generator_layers=1.0,
    generator_hidden_size=0.25, disallow_correct=False, temperature=1.0, max_seq_length=128,
    train_batch_size=128, eval_batch_size=128, num_tpu_cores=1, tpu_job_name=None,
    tpu_name=None, tpu_zone=None, gcp_project=None)
PROJECT_DEFAULTS = dict(
    objective="electra", two_stage_generator_steps=0, mask_token_fraction=0.85,
    random_token_fraction=0.0, mask_with_replacement=True, strategy="auto",
    precision="float32", jit_compile=False, gradient_accumulation_steps=1, log_every=100,
    deterministic=False, seed=1234, init_checkpoint=None, init_checkpoint_reset_step=True,
    optimizer="adamw", adam_bias_correction=False)


def test_constructor_defaults_equal_the_spec_table():
    config = PretrainingConfig("m", "/data")
    for name, value in {**ORIGINAL_DEFAULTS, **PROJECT_DEFAULTS}.items():
        assert getattr(config, name) == value, name
    assert config.max_predictions_per_seq == 19


def test_merged_defaults_are_the_original_small_run():
    config = build()
    expected = {**ORIGINAL_DEFAULTS, **PROJECT_DEFAULTS, "embedding_size": 128}
    assert {name: getattr(config, name) for name in expected} == expected
    assert config.pretrain_tfrecords == "/data/pretrain_tfrecords/pretrain_data.tfrecord*"
    assert config.eval_tfrecords == "/data/pretrain_tfrecords/eval/pretrain_data.tfrecord*"
    assert config.vocab_file == "/data/vocab.txt"
    assert config.model_dir == "/data/models/m"
    assert config.results_txt == "/data/models/m/results/unsup_results.txt"
    assert config.results_json == "/data/models/m/results/unsup_results.json"


def test_results_follow_a_user_model_dir_and_user_paths_are_kept():
    config = build(model_dir="/ckpt/run1", vocab_file="/v/vocab.txt")
    assert config.results_json == "/ckpt/run1/results/unsup_results.json"
    assert config.vocab_file == "/v/vocab.txt"


# size: (hidden, layers, heads, FFN, embedding), (lr, batch, seq, mask_prob, generator fraction)
PRESETS = {
    "small": ((256, 12, 4, 1024, 128), (5e-4, 128, 128, 0.15, 0.25)),
    "base": ((768, 12, 12, 3072, 768), (2e-4, 256, 512, 0.15, 0.33333)),
    "large": ((1024, 24, 16, 4096, 1024), (2e-4, 2048, 512, 0.25, 0.25)),
    "small++": ((256, 12, 4, 1024, 128), (5e-4, 128, 128, 0.15, 1.0)),
    "tiny": ((128, 2, 2, 512, 64), (1e-3, 32, 128, 0.15, 0.5)),
}


@pytest.mark.parametrize("size", PRESETS)
def test_size_preset(size):
    architecture, training = PRESETS[size]
    config = build(model_size=size)
    disc = config.discriminator_config()
    assert (disc.hidden_size, disc.num_hidden_layers, disc.num_attention_heads,
            disc.intermediate_size, disc.embedding_size) == architecture
    assert disc.vocab_size == 30522 and disc.max_position_embeddings == 512
    assert (config.learning_rate, config.train_batch_size, config.max_seq_length,
            config.mask_prob, config.generator_hidden_size) == training
    assert config.num_warmup_steps == (100 if size == "tiny" else 10000)


@pytest.mark.parametrize("size, hidden, heads, ffn, layers", [
    ("small", 64, 1, 256, 12), ("base", 256, 4, 1024, 12), ("large", 256, 4, 1024, 24),
    ("small++", 256, 4, 1024, 12), ("tiny", 64, 1, 256, 2)])
def test_generator_sizes(size, hidden, heads, ffn, layers):
    config = build(model_size=size)
    gen = config.generator_config()
    assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size,
            gen.num_hidden_layers) == (hidden, heads, ffn, layers)
    # The generator shares the discriminator's embeddings, so their width is the same.
    assert gen.embedding_size == config.discriminator_config().embedding_size


def test_generator_options():
    assert build(generator_layers=0.5).generator_config().num_hidden_layers == 6
    untied = build(untied_generator_embeddings=True).generator_config()
    assert untied.embedding_size == untied.hidden_size == 64
    for hparams in ({"untied_generator": False}, {"objective": "bert"}):
        config = build(hparams)
        assert config.generator_config() == config.discriminator_config()


@pytest.mark.parametrize("seq, mask_prob, expected", [(128, 0.15, 19), (512, 0.15, 79),
                                                      (512, 0.25, 130)])
def test_max_predictions_per_seq(seq, mask_prob, expected):
    assert build(max_seq_length=seq, mask_prob=mask_prob).max_predictions_per_seq == expected


def test_presets_give_the_derived_value_of_their_size():
    assert build(model_size="base").max_predictions_per_seq == 79
    assert build(model_size="large").max_predictions_per_seq == 130


def test_explicit_user_values_win_over_presets():
    config = build(model_size="large", learning_rate=1e-4, mask_prob=0.15)
    assert config.learning_rate == 1e-4
    assert config.mask_prob == 0.15  # equal to the default, but given explicitly
    assert config.max_predictions_per_seq == 79  # derived from the final values
    assert config.train_batch_size == 2048
    assert build(model_size="base", embedding_size=128).discriminator_config().embedding_size == 128
    assert build(debug=True, train_batch_size=16).train_batch_size == 16


def test_debug_is_the_original_debug_run():
    config = build(debug=True)
    assert (config.train_batch_size, config.num_train_steps, config.eval_batch_size,
            config.iterations_per_loop, config.num_eval_steps) == (8, 20, 4, 1, 2)
    disc = config.discriminator_config()
    assert (disc.num_hidden_layers, disc.hidden_size, disc.intermediate_size,
            disc.num_attention_heads) == (3, 144, 576, 4)
    assert config.generator_config().hidden_size == 36
    # fine-tuning's debug run builds the same model, so a debug pretraining run fine-tunes in debug
    from finetune.config import FinetuningConfig
    tuned = FinetuningConfig.from_hparams("m", "/data", {"debug": True, "task_names": ["mrpc"]}).encoder_config()
    assert dataclasses.asdict(tuned) == dataclasses.asdict(disc)


def test_model_hparam_overrides_rederive_heads_and_ffn_like_the_original():
    disc = build(model_hparam_overrides={"hidden_size": 512}).discriminator_config()
    assert (disc.hidden_size, disc.num_attention_heads, disc.intermediate_size) == (512, 8, 2048)
    disc = build(model_hparam_overrides={"num_attention_heads": 8,
                                         "hidden_dropout_prob": 0.0}).discriminator_config()
    assert (disc.num_attention_heads, disc.hidden_dropout_prob, disc.hidden_size) == (8, 0.0, 256)
    # heads given with a hidden size whose derived head count would not divide it
    disc = build(model_hparam_overrides={"hidden_size": 200, "num_attention_heads": 4}).discriminator_config()
    assert (disc.hidden_size, disc.num_attention_heads, disc.intermediate_size) == (200, 4, 800)
    with pytest.raises(InputError, match="hiden_size"):
        build(model_hparam_overrides={"hiden_size": 512})


def test_hparams_as_json_string_file_and_path(tmp_path):
    config = PretrainingConfig.from_hparams("m", "/data", '{"learning_rate": 3e-4}')
    assert config.learning_rate == 3e-4
    path = tmp_path / "hp.json"
    path.write_text(json.dumps({"model_size": "base", "num_train_steps": 766000}))
    for source in (str(path), path):
        config = PretrainingConfig.from_hparams("m", tmp_path, source)
        assert (config.model_size, config.num_train_steps, config.learning_rate) == (
            "base", 766000, 2e-4)
        assert config.vocab_file == str(tmp_path / "vocab.txt")
    assert PretrainingConfig.from_hparams("m", "/data", None) == build()


def test_invalid_json_file_names_file_line_and_column(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n  "learning_rate": 1e-4,\n}\n')
    with pytest.raises(InputError, match=r"bad\.json.*line 3 column 1"):
        PretrainingConfig.from_hparams("m", "/data", str(path))
    with pytest.raises(InputError, match=r"missing\.json cannot be read"):
        PretrainingConfig.from_hparams("m", "/data", str(tmp_path / "missing.json"))
    path.write_text("[1, 2]")
    with pytest.raises(InputError, match=r"bad\.json must be a JSON object"):
        PretrainingConfig.from_hparams("m", "/data", str(path))
    with pytest.raises(InputError, match=r"--hparams is not valid JSON .*line 1 column 2"):
        PretrainingConfig.from_hparams("m", "/data", "{learning_rate: 1}")


def test_unknown_key_names_it_and_the_closest_valid_key():
    with pytest.raises(InputError, match=r"'learnig_rate' \(did you mean 'learning_rate'\?\)"):
        build(learnig_rate=1e-4)
    with pytest.raises(InputError, match=r"'electra_objectiv' \(did you mean 'electra_objective'"):
        build(electra_objectiv=False)


@pytest.mark.parametrize("script", ["run_pretraining.py", "run_finetuning.py"])
def test_nested_fields_are_type_checked_like_top_level_ones(script, tmp_path, capsys):
    """A wrong type inside model_hparam_overrides (and task_names) is one line, as at the top level,
    for both configs and through each script, before anything is written."""
    from finetune.config import FinetuningConfig
    from script_helpers import load_script
    for config in (PretrainingConfig, FinetuningConfig):
        with pytest.raises(InputError, match=r"^model_hparam_overrides\.hidden_size in --hparams must be int, "
                                             r"got 'big'$"):
            config.from_hparams("m", "/data", '{"model_size": "tiny", "model_hparam_overrides": {"hidden_size": "big"}}')
        with pytest.raises(InputError, match=r"^model_hparam_overrides\.hidden_dropout_prob in hparams must be "
                                             r"float, got '0.1'$"):
            config.from_hparams("m", "/data", {"model_hparam_overrides": {"hidden_dropout_prob": "0.1"}})
        with pytest.raises(InputError, match=r"unknown field\(s\) of model_hparam_overrides in hparams: "
                                             r"'hiden_size' \(did you mean 'hidden_size'\?\)"):
            config.from_hparams("m", "/data", {"model_hparam_overrides": {"hiden_size": 512}})
        overrides = config.from_hparams("m", "/data", {"model_hparam_overrides": {"hidden_size": 2.56e2}})
        assert overrides.model_hparam_overrides == {"hidden_size": 256}  # JSON's 2.56e2 is an int, as at the top
    with pytest.raises(InputError, match=r"^task_names\[1\] in hparams must be str, got 3$"):
        FinetuningConfig.from_hparams("m", "/data", {"task_names": ["mrpc", 3]})

    code = load_script(script).main(["--data-dir", str(tmp_path), "--model-name", "m", "--hparams",
                                     '{"model_size": "tiny", "model_hparam_overrides": {"hidden_size": "big"}}'])
    err = capsys.readouterr().err
    assert code == 2 and err == "error: model_hparam_overrides.hidden_size in --hparams must be int, got 'big'\n"
    assert list(tmp_path.iterdir()) == []


def test_derived_and_constructor_fields_cannot_be_set():
    with pytest.raises(InputError,
                       match=r"max_predictions_per_seq .* is derived \(int\(\(mask_prob"):
        build(max_predictions_per_seq=20)
    with pytest.raises(InputError, match="model_name cannot be set .* --model-name"):
        build(model_name="other")


def test_value_types_are_checked():
    assert build(num_train_steps=1e6).num_train_steps == 1000000
    assert isinstance(build(num_train_steps=1e6).num_train_steps, int)
    assert build(learning_rate=1).learning_rate == 1.0
    with pytest.raises(InputError, match="learning_rate in hparams must be float, got 'fast'"):
        build(learning_rate="fast")
    with pytest.raises(InputError, match="num_train_steps .* must be int, got 1.5"):
        build(num_train_steps=1.5)
    for name, value in (("learning_rate", float("inf")), ("gen_weight", float("nan")), ("disc_weight", -float("inf"))):
        with pytest.raises(InputError, match=f"{name} in hparams must be a finite number, got {value}"):
            build(**{name: value})
    with pytest.raises(InputError, match="learning_rate in --hparams must be a finite number, got inf"):
        PretrainingConfig.from_hparams("m", "/data", '{"learning_rate": Infinity}')
    with pytest.raises(InputError, match="debug .* must be bool"):
        build(debug="yes")
    with pytest.raises(InputError, match="electra_objective .* must be bool"):
        build(electra_objective=0)


@pytest.mark.parametrize("hparams, message", [
    ({"max_seq_length": 1024}, "max_seq_length 1024 exceeds max_position_embeddings 512"),
    ({"model_hparam_overrides": {"num_attention_heads": 5}},
     r"discriminator architecture .* not divisible by num_attention_heads 5"),
    ({"mask_prob": 0.0}, r"mask_prob 0.0 must be in \(0, 1\)"),
    ({"mask_prob": 1.0}, r"mask_prob 1.0 must be in \(0, 1\)"),
    ({"mask_prob": 0.001}, "max_predictions_per_seq 0"),
    ({"mask_token_fraction": 1.5}, r"mask_token_fraction 1.5 must be in \[0, 1\]"),
    ({"random_token_fraction": -0.1}, r"random_token_fraction -0.1 must be in \[0, 1\]"),
    ({"mask_token_fraction": 0.8, "random_token_fraction": 0.3}, "exceeds 1"),
    ({"model_size": "huge"},
     r"model_size 'huge' is not one of: small, small\+\+, base, large, tiny"),
    ({"objective": "mlm"}, "objective 'mlm' is not one of: electra, bert, electra_15"),
    ({"strategy": "horovod"}, "strategy 'horovod' is not one of: auto, one_device, mirrored"),
    ({"precision": "fp16"}, "precision 'fp16' is not one of: float32, mixed_bfloat16"),
    ({"optimizer": "sgd"}, "optimizer 'sgd' is not one of: adamw, lamb"),
    ({"optimizer": "lamb", "adam_bias_correction": True}, "adam_bias_correction applies to optimizer 'adamw'"),
    ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps 0 must be at least 1"),
    ({"num_warmup_steps": -1}, "num_warmup_steps -1 must not be negative"),
    ({"gradient_accumulation_steps": 3}, "train_batch_size 128 is not divisible by "
                                         "gradient_accumulation_steps 3"),
    ({"generator_hidden_size": 0}, "generator_hidden_size 0.0 must be positive"),
    ({"generator_layers": -1}, "generator_layers -1.0 must be positive"),
    ({"generator_hidden_size": 0.001}, "generator architecture .*hidden_size 0 must be an integer"),
    ({"train_batch_size": 0}, "train_batch_size 0 must be at least 1"),
    ({"temperature": 0}, "temperature 0.0 must be positive"),
    ({"do_train": False}, "do_train and do_eval are both false"),
    ({"keep_checkpoint_max": -2}, "keep_checkpoint_max -2"),
    ({"two_stage_generator_steps": 100}, "generator as large as the discriminator"),
    ({"two_stage_generator_steps": 100, "generator_hidden_size": 1.0, "model_size": "small++",
      "untied_generator_embeddings": True}, "with untied_generator_embeddings they are as wide as"),
    ({"two_stage_generator_steps": 100, "generator_hidden_size": 1.0, "objective": "bert"},
     "two_stage_generator_steps needs objective \"electra\""),
    ({"two_stage_generator_steps": 10 ** 6, "generator_hidden_size": 1.0},
     "must be below num_train_steps"),
    ({"electric_objective": True}, "electric_objective .* not supported"),
    ({"two_tower_generator": True}, "two_tower_generator .* not supported"),
])
def test_validation_errors(hparams, message):
    with pytest.raises(InputError, match=message):
        build(hparams)


def test_two_stage_training_with_an_equal_sized_generator_is_accepted():
    config = build(two_stage_generator_steps=1000, generator_hidden_size=1.0)
    assert config.generator_config() == config.discriminator_config()


def test_original_flags_map_to_objective_and_strategy():
    config = build(electra_objective=False)
    assert config.objective == "bert"
    assert config.generator_config() == config.discriminator_config()
    assert build(electra_objective=True).objective == "electra"
    assert build(electra_objective=True, objective="electra_15").objective == "electra_15"
    assert build(electric_objective=False, two_tower_generator=False).objective == "electra"
    with pytest.raises(InputError, match="electra_objective False and objective 'electra'"):
        build(electra_objective=False, objective="electra")
    with pytest.raises(InputError, match="disagree"):
        build(electra_objective=True, objective="bert")
    assert build(use_tpu=True).strategy == "tpu"
    with pytest.raises(InputError, match="use_tpu true and strategy 'mirrored'"):
        build(use_tpu=True, strategy="mirrored")


def test_json_round_trip(tmp_path):
    config = build(model_size="base", debug=True, objective="electra_15", seed=7,
                   model_hparam_overrides={"hidden_dropout_prob": 0.0})
    path = tmp_path / "run" / "config.json"
    config.save(path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.json"]  # no temp left
    assert json.loads(path.read_text()) == config.to_dict()
    assert PretrainingConfig.from_json_file(path) == config
    config.save(path)  # overwriting is fine too
    assert PretrainingConfig.from_json_file(path) == config


def test_from_json_file_rejects_edits_that_break_it(tmp_path):
    path = tmp_path / "config.json"
    values = build().to_dict()
    path.write_text(json.dumps({**values, "max_seq_length": 512}))
    with pytest.raises(InputError,
                       match=r"max_predictions_per_seq in config file .* is 19, .* give 79"):
        PretrainingConfig.from_json_file(path)
    path.write_text(json.dumps({**values, "lr": 1.0}))
    with pytest.raises(InputError, match="'lr' \\(did you mean"):
        PretrainingConfig.from_json_file(path)
    path.write_text(json.dumps({**values, "electra_objective": False, "objective": "bert"}))
    assert PretrainingConfig.from_json_file(path).objective == "bert"  # the original's flag
    del values["model_name"]
    path.write_text(json.dumps(values))
    with pytest.raises(InputError, match="config.json lacks model_name"):
        PretrainingConfig.from_json_file(path)


def test_architecture_dict_tracks_shapes_only():
    small = build().architecture_dict()
    assert small["discriminator"]["hidden_size"] == 256
    assert small["generator"]["hidden_size"] == 64
    assert build(learning_rate=1e-4, num_train_steps=10, debug=False).architecture_dict() == small
    assert build(model_hparam_overrides={"hidden_dropout_prob": 0.0}).architecture_dict() == small
    for hparams in ({"model_size": "base"}, {"generator_hidden_size": 1.0},
                    {"objective": "bert"}, {"vocab_size": 32000}, {"embedding_size": 256}):
        assert build(hparams).architecture_dict() != small, hparams
    json.dumps(small)  # plain JSON values, storable beside a checkpoint


def test_replace_recomputes_derived_values_and_validates():
    config = dataclasses.replace(build(), max_seq_length=512)
    assert config.max_predictions_per_seq == 79
    with pytest.raises(InputError, match="mask_prob"):
        dataclasses.replace(config, mask_prob=2.0)


@pytest.mark.parametrize("name, steps, lr, batch", [("small", 1000000, 5e-4, 128), ("base", 766000, 2e-4, 256),
                                                    ("large", 400000, 2e-4, 2048)])
def test_shipped_configs_give_the_paper_recipes(name, steps, lr, batch):
    path = Path(__file__).resolve().parents[1] / "configs" / f"{name}.json"
    config = PretrainingConfig.from_hparams("m", "/data", str(path))
    assert (config.num_train_steps, config.learning_rate, config.train_batch_size) == (steps, lr, batch)


def test_finetuning_reads_the_vocab_beside_the_weights_it_starts_from(tmp_path):
    """vocab_file's default is the vocab.txt of init_checkpoint's dir (a model dir, an HF dir or
    the discriminator/ of an HF export, a TF1 dir, a ckpt-N prefix's parent), else the model dir's,
    else DATA_DIR/vocab.txt; an explicit vocab_file wins."""
    from finetune.config import FinetuningConfig

    def vocab(directory):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "vocab.txt").write_text("[PAD]\n", encoding="utf-8")
        return str(directory / "vocab.txt")

    def resolved(name="m", **hparams):
        return FinetuningConfig.from_hparams(name, str(tmp_path), {"task_names": ["mrpc"], **hparams}).vocab_file

    data_vocab = vocab(tmp_path)
    assert resolved() == data_vocab  # no model dir yet: DATA_DIR's, as the original
    model_vocab = vocab(tmp_path / "models" / "m")
    assert resolved() == model_vocab  # the default init_checkpoint's own
    hf_dir = tmp_path / "downloads" / "electra-small-hf"
    assert vocab(hf_dir) == resolved(init_checkpoint=str(hf_dir))  # not the model dir's, nor DATA_DIR's
    (hf_dir / "ckpt-3.index").write_bytes(b"")
    assert resolved(init_checkpoint=str(hf_dir / "ckpt-3")) == str(hf_dir / "vocab.txt")
    export = tmp_path / "exported"  # convert_checkpoint.py to-hf: a dir per network, no vocab at the top
    for role, architecture in (("generator", "ElectraForMaskedLM"), ("discriminator", "ElectraForPreTraining")):
        (export / role).mkdir(parents=True)
        (export / role / "config.json").write_text(json.dumps({"model_type": "electra", "architectures": [architecture]}))
    export_vocab = vocab(export / "discriminator")
    assert resolved(init_checkpoint=str(export)) == export_vocab
    bare = tmp_path / "bare"  # no vocab beside the weights: the model dir's, then DATA_DIR's
    bare.mkdir()
    assert resolved(init_checkpoint=str(bare)) == model_vocab
    assert resolved("other", init_checkpoint=str(bare)) == data_vocab
    assert resolved(init_checkpoint=str(hf_dir), vocab_file="/v/vocab.txt") == "/v/vocab.txt"


def test_finetuning_lower_cases_as_the_weights_it_starts_from_were_trained(tmp_path):
    """do_lower_case's default is what init_checkpoint records (a model dir's config.json, its
    ckpt-N's, an HF dir's or export's tokenizer_config.json, a fine-tuned trial's
    finetuning_config.json); True where nothing records it (a TF1
    checkpoint, no model yet), as the original, never another model's; an explicit value wins."""
    from finetune.config import FinetuningConfig

    def resolved(name="m", **hparams):
        return FinetuningConfig.from_hparams(name, str(tmp_path), {"task_names": ["mrpc"], **hparams}).do_lower_case

    assert resolved() is True  # no model dir yet
    model_dir = tmp_path / "models" / "m"
    model_dir.mkdir(parents=True)
    PretrainingConfig.from_hparams("m", str(tmp_path), {"do_lower_case": False}).save(model_dir / "config.json")
    (model_dir / "checkpoint").write_text('model_checkpoint_path: "ckpt-3"\n')
    (model_dir / "ckpt-3.index").write_bytes(b"")
    assert resolved() is False and resolved(init_checkpoint=str(model_dir / "ckpt-3")) is False
    assert resolved(do_lower_case=True) is True
    export = tmp_path / "exported"  # convert_checkpoint.py to-hf: the casing in each network's tokenizer files
    (export / "discriminator").mkdir(parents=True)
    (export / "discriminator" / "config.json").write_text(
        json.dumps({"model_type": "electra", "architectures": ["ElectraForPreTraining"]}))
    (export / "discriminator" / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    assert resolved(init_checkpoint=str(export)) is True
    (export / "discriminator" / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    assert resolved("other", init_checkpoint=str(export)) is False
    (export / "discriminator" / "tokenizer_config.json").unlink()  # an HF download's casing at its top
    (export / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    assert resolved("other", init_checkpoint=str(export)) is False
    original = tmp_path / "electra_small"  # a TF1 checkpoint records no casing: True, not models/m's
    original.mkdir()
    (original / "model.ckpt-1000000.index").write_bytes(b"")
    assert resolved(init_checkpoint=str(original)) is True
    trial = tmp_path / "models" / "m" / "finetuning_models" / "mrpc_model_1"  # a fine-tuned trial: its run's
    trial.mkdir(parents=True)
    (trial / "finetuning_config.json").write_text('{"do_lower_case": false}')
    assert resolved("other", init_checkpoint=str(trial), do_train=False) is False
    (original / "config.json").write_text("{not json")  # nor is a damaged neighbour of a prefix an error
    assert resolved(init_checkpoint=str(original / "model.ckpt-1000000")) is True


def test_finetuning_strips_accents_as_the_weights_it_starts_from_were_trained(tmp_path):
    """do_strip_accents follows init_checkpoint as do_lower_case does: a model dir pretrained on
    text that kept its accents (config.json), an HF export of it (`strip_accents` false), a trial
    fine-tuned from it; True where nothing records it and for config files written before the
    field, whatever their init_checkpoint records now (every run stripped then); an explicit value
    wins."""
    from finetune.config import FinetuningConfig

    def resolved(**hparams):
        return FinetuningConfig.from_hparams("m", str(tmp_path), {"task_names": ["mrpc"], **hparams}).do_strip_accents

    assert resolved() is True
    model_dir = tmp_path / "models" / "m"
    model_dir.mkdir(parents=True)
    PretrainingConfig.from_hparams("m", str(tmp_path), {"do_strip_accents": False}).save(model_dir / "config.json")
    (model_dir / "checkpoint").write_text('model_checkpoint_path: "ckpt-3"\n')
    (model_dir / "ckpt-3.index").write_bytes(b"")
    assert resolved() is False and resolved(do_strip_accents=True) is True
    older = json.loads((model_dir / "config.json").read_text())
    del older["do_strip_accents"]
    (model_dir / "config.json").write_text(json.dumps(older))
    assert resolved() is True
    export = tmp_path / "exported"
    (export / "discriminator").mkdir(parents=True)
    (export / "discriminator" / "config.json").write_text(
        json.dumps({"model_type": "electra", "architectures": ["ElectraForPreTraining"]}))
    for recorded, expected in (("false", False), ("null", True), ("true", True)):
        (export / "discriminator" / "tokenizer_config.json").write_text(
            f'{{"do_lower_case": true, "strip_accents": {recorded}}}')
        assert resolved(init_checkpoint=str(export)) is expected
    trial = model_dir / "finetuning_models" / "mrpc_model_1"
    trial.mkdir(parents=True)
    (trial / "finetuning_config.json").write_text('{"do_lower_case": true, "do_strip_accents": false}')
    assert resolved(init_checkpoint=str(trial), do_train=False) is False
    (trial / "finetuning_config.json").write_text('{"do_lower_case": true}')
    assert resolved(init_checkpoint=str(trial), do_train=False) is True
    # a run saved before the field, from a model that records false, was run stripping: it loads so
    (export / "discriminator" / "tokenizer_config.json").write_text('{"do_lower_case": true, "strip_accents": false}')
    run = FinetuningConfig.from_hparams("m", str(tmp_path), {"task_names": ["mrpc"], "init_checkpoint": str(export)})
    saved = {name: value for name, value in run.to_dict().items() if name != "do_strip_accents"}
    (trial / "finetuning_config.json").write_text(json.dumps(saved))
    assert run.do_strip_accents is False
    assert FinetuningConfig.from_json_file(trial / "finetuning_config.json").do_strip_accents is True


def test_a_tagging_task_alone_trains_on_the_originals_chunk_length(tmp_path):
    """256 tokens for any tagging task trained alone, as the original's chunk (its one tagging
    task); 128 for a sentence task or a mix; an explicit value wins."""
    from finetune.config import FinetuningConfig
    ner = {"type": "tagging", "format": "conll", "train": "ner/train.txt", "dev": "ner/dev.txt"}
    reviews = {"type": "classification", "format": "csv", "train": "r/train.csv", "dev": "r/dev.csv"}

    def length(names, **hparams):
        return FinetuningConfig.from_hparams("m", str(tmp_path), {"task_names": names, "tasks": {
            "ner": ner, "reviews": reviews}, **hparams}).max_seq_length

    assert length(["ner"]) == length(["chunk"]) == 256
    assert length(["reviews"]) == length(["ner", "reviews"]) == 128
    assert length(["ner"], max_seq_length=64) == 64
    assert length(["ner"], model_hparam_overrides={"max_position_embeddings": 128}) == 128  # the table's size
