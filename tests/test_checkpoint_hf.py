"""HF transformers interop: exported dirs load into ElectraForPreTraining / ElectraForMaskedLM with
every parameter set, and their logits equal ours within 1e-5 on GLUE sentences; import is exact."""

import json

import numpy as np
import pytest
import tensorflow as tf
import torch  # the test extras install both: a missing one fails the module rather than skipping it
import transformers

import convert_checkpoint
from checkpoint_helpers import encode_pairs, mrpc_pairs, randomize
from electra_tf.checkpoints import model_dir, read_pretrained
from electra_tf.checkpoints.hf import DISCRIMINATOR_ENCODER, OBJECTIVE, OWN_EMBEDDINGS, ROLE, export_hf, network_pairs
from electra_tf.config import PretrainingConfig
from electra_tf.errors import InputError
from electra_tf.tokenization import Tokenizer

TOLERANCE = 1e-5
HF_CLASSES = {"discriminator": "ElectraForPreTraining", "generator": "ElectraForMaskedLM"}


@pytest.fixture(scope="module")
def glue_batch(shared_data, vocab_file):
    """Eight MRPC dev pairs as [CLS] a [SEP] b [SEP], padded: both segments and padding exercised."""
    return encode_pairs(Tokenizer(vocab_file), mrpc_pairs(shared_data, 8))


def _write_model_dir(tmp_path, vocab_file, size, seed, train_steps=0, batch=None, hparams=None):
    """A model dir of `size` (and `hparams`) with random weights everywhere, optionally trained a few steps."""
    config = PretrainingConfig.from_hparams("m", str(tmp_path), {"model_size": size, "max_seq_length": 64,
                                                                  "learning_rate": 1e-3, **(hparams or {})})
    built = model_dir.build(config, vocab_file)
    randomize(built.model.variables, seed)
    if train_steps:
        ids, mask, segments = batch
        features = {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
        for step in range(train_steps):
            with tf.GradientTape() as tape:
                loss = built.model(features, training=True, seed=tf.constant([seed, step])).loss
            variables = built.model.trainable_variables
            built.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    out = tmp_path / "models" / f"{size}_{seed}"
    model_dir.save_built(built, config, vocab_file, out)
    return out, built, config


def _our_logits(built, batch):
    """role → our logits, for the networks the model has (objective "bert": the generator only)."""
    ids, mask, segments = batch
    network = built.model.network
    logits = {"generator": network.generator_logits(ids, mask, segments).numpy()}
    if network.discriminator_head is not None:
        logits["discriminator"] = network.discriminator_logits(ids, mask, segments).numpy()
    return logits


def _hf_logits(hf_dir, batch, expected_values, config):
    """Loads each exported HF network, checks every parameter came from the files, returns role → logits."""
    ids, mask, segments = (torch.tensor(a, dtype=torch.long) for a in batch)
    logits = {}
    networks = network_pairs(config)
    assert sorted(p.name for p in hf_dir.iterdir()) == sorted(networks)  # one dir per network, no other
    for role, network in networks.items():
        assert network.architecture == HF_CLASSES[role]
        model, info = getattr(transformers, network.architecture).from_pretrained(
            str(hf_dir / role), output_loading_info=True, attn_implementation="eager")
        assert all(not keys for keys in info.values()), info  # nothing missing, unexpected, mismatched
        state = {k: v.numpy() for k, v in model.state_dict().items()}
        pairs = {hf: (tf1, transposed) for tf1, hf, transposed in network.pairs}
        if role == "generator":  # tied to the generator's word table
            pairs["generator_lm_head.weight"] = pairs["electra.embeddings.word_embeddings.weight"]
        assert set(state) == set(pairs)  # every HF parameter is one of ours
        for key, (tf1, transposed) in pairs.items():
            expected = expected_values[tf1].T if transposed else expected_values[tf1]
            np.testing.assert_array_equal(state[key], expected, err_msg=key)
        with torch.no_grad():
            logits[role] = model.eval()(input_ids=ids, attention_mask=mask, token_type_ids=segments).logits.numpy()
    return logits


def _assert_close(ours, theirs, mask):
    """Max abs difference on real tokens (padding positions are not defined outputs)."""
    valid = mask.astype(bool)
    assert np.abs(ours - theirs)[valid].max() <= TOLERANCE


@pytest.mark.parametrize("size, train_steps", [("tiny", 0), ("small", 0), ("tiny", 3)],
                         ids=["tiny-random", "small-random", "tiny-trained"])
def test_export_to_hf_has_parity(tmp_path, vocab_file, glue_batch, size, train_steps):
    source, built, config = _write_model_dir(tmp_path, vocab_file, size, seed=7, train_steps=train_steps,
                                             batch=glue_batch)
    out = tmp_path / "hf"
    assert convert_checkpoint.main(["to-hf", "--model-dir", str(source), "--output-dir", str(out)]) == 0
    values = model_dir.weights_of(built)
    ours, theirs = _our_logits(built, glue_batch), _hf_logits(out, glue_batch, values, config)
    assert set(theirs) == set(ours) == set(HF_CLASSES)
    for role in HF_CLASSES:
        _assert_close(ours[role], theirs[role], glue_batch[1])
    hf_config = json.loads((out / "discriminator" / "config.json").read_text())
    assert hf_config["hidden_act"] == "gelu" and hf_config["layer_norm_eps"] == 1e-12
    if train_steps:  # import(export(x)) == x for the trained weights, optimizer state aside
        imported = tmp_path / "models" / "back"
        assert convert_checkpoint.main(["from-hf", "--hf-dir", str(out), "--output-dir", str(imported)]) == 0
        back = read_pretrained(imported)
        assert back.config.architecture_dict() == config.architecture_dict()
        for name in (v.name.split(":")[0] for v in built.model.variables):
            np.testing.assert_array_equal(back.values[name], values[name], err_msg=name)


@pytest.mark.parametrize("size, hparams, roles", [
    ("tiny", {"objective": "bert"}, ["generator"]),
    ("tiny", {"untied_generator_embeddings": True}, ["discriminator", "generator"]),
    ("small", {"untied_generator_embeddings": True, "model_hparam_overrides": {"num_hidden_layers": 2}},
     ["discriminator", "generator"]),
    ("tiny", {"untied_generator": False}, ["discriminator", "generator"])],
    ids=["bert", "untied-embeddings-one-width", "untied-embeddings-own-width", "generator-is-discriminator"])
def test_export_and_import_of_other_layouts(tmp_path, vocab_file, glue_batch, size, hparams, roles, capsys):
    """An MLM-only ("bert") model exports its one network as the generator; a generator with its own
    embeddings exports them (at tiny's width, the discriminator's E, or at small's, its own Hg), and
    its config.json says they are its own; a generator that is the discriminator (`untied_generator:
    false`) exports the discriminator's encoder under its head, and its config.json says so. Logits
    equal ours within 1e-5, and from-hf gives back the same architecture and every value."""
    source, built, config = _write_model_dir(tmp_path, vocab_file, size, seed=5, train_steps=2, batch=glue_batch,
                                             hparams=hparams)
    out = tmp_path / "hf"
    assert convert_checkpoint.main(["to-hf", "--model-dir", str(source), "--output-dir", str(out)]) == 0
    values = model_dir.weights_of(built)
    ours, theirs = _our_logits(built, glue_batch), _hf_logits(out, glue_batch, values, config)
    assert sorted(theirs) == sorted(ours) == roles
    for role in roles:
        _assert_close(ours[role], theirs[role], glue_batch[1])
    imported = tmp_path / "models" / "back"
    assert convert_checkpoint.main(["from-hf", "--hf-dir", str(out), "--output-dir", str(imported)]) == 0
    back = read_pretrained(imported)
    assert back.config.objective == config.objective
    assert back.config.architecture_dict() == config.architecture_dict()
    names = [v.name.split(":")[0] for v in built.model.variables]  # the model's, optimizer slots aside
    weights = [n for n in back.values if n != "global_step" and not n.endswith(("/adam_m", "/adam_v"))]
    assert sorted(weights) == sorted(names)
    for name in names:
        np.testing.assert_array_equal(back.values[name], values[name], err_msg=name)
    document = json.loads((out / "generator" / "config.json").read_text())
    assert document.pop(OWN_EMBEDDINGS, False) is bool(hparams.get("untied_generator_embeddings"))
    assert document.pop(DISCRIMINATOR_ENCODER, False) is (hparams.get("untied_generator") is False)
    if size == "tiny" and hparams.get("untied_generator_embeddings"):  # at E's width, only the key tells own from shared
        (out / "generator" / "config.json").write_text(json.dumps(document))
        capsys.readouterr()
        assert convert_checkpoint.main(["from-hf", "--hf-dir", str(out), "--output-dir", str(tmp_path / "x")]) == 2
        assert "electra.embeddings.word_embeddings.weight differs from" in capsys.readouterr().err
    if hparams.get("untied_generator") is False:  # the key names a sharing the weights must show
        from safetensors.numpy import load_file, save_file
        weights = out / "generator" / "model.safetensors"
        tensors = load_file(str(weights))
        tensors["electra.encoder.layer.0.attention.self.query.weight"] += 1
        save_file(tensors, str(weights), metadata={"format": "pt"})
        capsys.readouterr()
        assert convert_checkpoint.main(["from-hf", "--hf-dir", str(out), "--output-dir", str(tmp_path / "y")]) == 2
        assert "electra.encoder.layer.0.attention.self.query.weight differs from electra/encoder/layer_0/attention/" \
               "self/query/kernel" in capsys.readouterr().err


@pytest.mark.parametrize("objective", ["replace_mlm", "all_tokens_mlm", "electra_15"])
def test_export_and_import_of_the_ablations(tmp_path, vocab_file, glue_batch, objective, capsys):
    """A discriminator trained with an MLM head of its own exports as an ElectraForMaskedLM whose
    token logits equal that head's within 1e-5; its other head (unused by replace_mlm, the copy
    gate of all_tokens_mlm) rides along, and ElectraForPreTraining reads it with the same logits
    as ours. electra_15's discriminator is an ElectraForPreTraining, as electra's. from-hf gives
    back the objective, which the shapes alone cannot tell, and every value; also after HF saved
    the MLM discriminator again without its other head (then listed as missing)."""
    source, built, config = _write_model_dir(tmp_path, vocab_file, "tiny", seed=3, train_steps=2, batch=glue_batch,
                                             hparams={"objective": objective})
    out = tmp_path / "hf"
    assert convert_checkpoint.main(["to-hf", "--model-dir", str(source), "--output-dir", str(out)]) == 0
    document = json.loads((out / "discriminator" / "config.json").read_text())
    assert (document[ROLE], document[OBJECTIVE]) == ("discriminator", objective)
    ids, mask, segments = glue_batch
    sequence = built.model.network.discriminator(ids, mask, segments)
    ours = {"ElectraForPreTraining": built.model.network.discriminator_head(sequence).numpy()}
    mlm_head = built.model.discriminator_mlm_head
    if mlm_head is not None:
        ours["ElectraForMaskedLM"] = mlm_head(sequence, None).numpy()
    assert document["architectures"] == ["ElectraForMaskedLM" if mlm_head is not None else "ElectraForPreTraining"]
    for architecture, logits in ours.items():
        model, info = getattr(transformers, architecture).from_pretrained(
            str(out / "discriminator"), output_loading_info=True, attn_implementation="eager")
        assert not info["missing_keys"] and not info["mismatched_keys"], info
        other_head = "generator_" if architecture == "ElectraForPreTraining" else "discriminator_predictions."
        assert all(key.startswith(other_head) for key in info["unexpected_keys"]), info
        assert bool(info["unexpected_keys"]) is (mlm_head is not None)
        with torch.no_grad():
            theirs = model.eval()(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                                  token_type_ids=torch.tensor(segments, dtype=torch.long)).logits.numpy()
        _assert_close(logits, theirs, mask)
    imported = tmp_path / "models" / "back"
    assert convert_checkpoint.main(["from-hf", "--hf-dir", str(out), "--output-dir", str(imported)]) == 0
    back = read_pretrained(imported)
    assert back.config.objective == objective
    assert back.config.architecture_dict() == config.architecture_dict()
    values = model_dir.weights_of(built)
    for name in (v.name.split(":")[0] for v in built.model.variables):
        np.testing.assert_array_equal(back.values[name], values[name], err_msg=name)
    if mlm_head is not None:  # saved again by HF's ElectraForMaskedLM, which drops the other head
        resaved = tmp_path / "resaved"
        transformers.ElectraForMaskedLM.from_pretrained(str(out / "discriminator")).save_pretrained(str(resaved))
        (resaved / "vocab.txt").write_bytes((out / "discriminator" / "vocab.txt").read_bytes())
        again = read_pretrained(resaved)
        assert again.config.objective == objective
        assert not [name for name in again.values if name.startswith("discriminator_predictions/")]
        for name in (n for n in again.values if n.startswith(("electra/", "discriminator_mlm_predictions/"))):
            np.testing.assert_array_equal(again.values[name], values[name], err_msg=name)
        capsys.readouterr()
        assert convert_checkpoint.main(["from-hf", "--hf-dir", str(resaved), "--output-dir",
                                        str(tmp_path / "models" / "resaved")]) == 0
        assert "\n  discriminator_predictions/* (4 variables)\n" in capsys.readouterr().out  # among the missing
    document[OBJECTIVE] = "bert"
    (out / "discriminator" / "config.json").write_text(json.dumps(document))
    with pytest.raises(InputError, match=r"discriminator/config.json: electra_tf_objective 'bert' is not an "
                                         r"objective with a discriminator"):
        read_pretrained(out)


def test_export_in_float16(tmp_path, vocab_file, glue_batch):
    """to-hf --dtype float16 writes float16 files of about half the size whose config.json says so;
    HF loads every parameter as ours rounded to float16, and from-hf reads back exactly those values."""
    from safetensors.numpy import load_file
    source, built, config = _write_model_dir(tmp_path, vocab_file, "tiny", seed=4)
    for dtype in ("float32", "float16"):
        assert convert_checkpoint.main(["to-hf", "--model-dir", str(source), "--output-dir", str(tmp_path / dtype),
                                        "--dtype", dtype]) == 0
    for role in HF_CLASSES:
        half, full = (tmp_path / dtype / role / "model.safetensors" for dtype in ("float16", "float32"))
        assert {tensor.dtype for tensor in load_file(str(half)).values()} == {np.dtype(np.float16)}
        assert half.stat().st_size < 0.55 * full.stat().st_size
        document = json.loads((half.parent / "config.json").read_text())
        assert document["dtype"] == document["torch_dtype"] == "float16"
    rounded = {name: value.astype(np.float16).astype(np.float32) for name, value in model_dir.weights_of(built).items()}
    assert not all(np.array_equal(rounded[name], value) for name, value in model_dir.weights_of(built).items())
    _hf_logits(tmp_path / "float16", glue_batch, rounded, config)  # every HF parameter equals its rounded value
    imported = tmp_path / "models" / "back"
    assert convert_checkpoint.main(["from-hf", "--hf-dir", str(tmp_path / "float16"),
                                    "--output-dir", str(imported)]) == 0
    back = read_pretrained(imported)
    for name in (v.name.split(":")[0] for v in built.model.variables):
        assert back.values[name].dtype == np.float32
        np.testing.assert_array_equal(back.values[name], rounded[name], err_msg=name)
    with pytest.raises(InputError, match="dtype 'bfloat16'"):
        export_hf(model_dir.weights_of(built), config, vocab_file, tmp_path / "bf16", dtype="bfloat16")
    assert not (tmp_path / "bf16").exists()


def test_exported_tokenizer_matches_ours(tmp_path, vocab_file, shared_data):
    """HF's tokenizer of an export gives our ids: a model that strips accents (the default) and one
    pretrained on lower-cased text that kept them (`"do_strip_accents": false`: the tokenizer files
    say `strip_accents` false); the import reads that casing back, with or without --hparams."""
    texts = [text for pair in mrpc_pairs(shared_data, 20) for text in pair]
    kept = ["Müller sagt über Straßen: café, naïve Ångström", "Ça coûte 3 € à São Paulo"]
    for strip in (True, False):
        source, _, _ = _write_model_dir(tmp_path / str(strip), vocab_file, "tiny", seed=1,
                                        hparams={"do_strip_accents": strip})
        out = tmp_path / f"hf_{strip}"
        assert convert_checkpoint.main(["to-hf", "--model-dir", str(source), "--output-dir", str(out)]) == 0
        theirs = transformers.AutoTokenizer.from_pretrained(str(out / "discriminator"))
        flat, splits = Tokenizer(vocab_file, strip_accents=strip).tokenize_batch(texts + kept)
        for i, text in enumerate(texts + kept):
            assert theirs(text, add_special_tokens=False)["input_ids"] == flat[splits[i]:splits[i + 1]].tolist()
        assert read_pretrained(out).config.do_strip_accents is strip
        imported = tmp_path / "models" / f"back_{strip}"  # an architecture given (--hparams) keeps the casing too
        assert convert_checkpoint.main(["from-hf", "--hf-dir", str(out), "--output-dir", str(imported),
                                        "--hparams", '{"model_size": "tiny", "max_seq_length": 64}']) == 0
        assert read_pretrained(imported).config.do_strip_accents is strip
    stripped = Tokenizer(vocab_file).tokenize_batch(kept)[0]
    assert stripped.tolist() != Tokenizer(vocab_file, strip_accents=False).tokenize_batch(kept)[0].tolist()


def test_import_of_an_hf_download(tmp_path, vocab_file, glue_batch, capsys):
    """A dir as HF publishes the released models (save_pretrained of torch models, torch's own
    random init) imports with every weight, and our logits equal theirs."""
    hf_config = dict(vocab_size=30522, embedding_size=64, hidden_size=128, num_hidden_layers=2,
                     num_attention_heads=2, intermediate_size=512)
    torch.manual_seed(0)
    disc = transformers.ElectraForPreTraining(transformers.ElectraConfig(**hf_config))
    gen = transformers.ElectraForMaskedLM(transformers.ElectraConfig(
        **{**hf_config, "hidden_size": 64, "num_attention_heads": 1, "intermediate_size": 256}))
    with torch.no_grad():
        for module in (disc, gen):  # nonzero biases and LayerNorms everywhere
            for name, parameter in module.named_parameters():
                if "embeddings" not in name or "LayerNorm" in name:
                    parameter.add_(0.05 * torch.randn_like(parameter))
        gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())  # shared, as released
    download = tmp_path / "download"
    for role, module in (("discriminator", disc), ("generator", gen)):
        module.save_pretrained(str(download / role))
        (download / role / "vocab.txt").write_bytes(vocab_file.read_bytes())
    out = tmp_path / "models" / "from_hf"
    assert convert_checkpoint.main(["from-hf", "--hf-dir", str(download), "--output-dir", str(out)]) == 0
    weights = read_pretrained(out)
    assert weights.config.model_size == "tiny"
    built = model_dir.build(weights.config, vocab_file)
    report = model_dir.assign_weights(built.model.variables, weights.values)
    assert report.missing == []
    ours, theirs = _our_logits(built, glue_batch), _hf_logits(download, glue_batch, weights.values, weights.config)
    for role in HF_CLASSES:
        _assert_close(ours[role], theirs[role], glue_batch[1])
    # a discriminator download alone: the generator stays as initialised, and the report says so
    alone = tmp_path / "models" / "discriminator_only"
    assert convert_checkpoint.main(["from-hf", "--hf-dir", str(download / "discriminator"),
                                    "--output-dir", str(alone)]) == 0
    out = capsys.readouterr().out
    assert "missing (left as initialised):" in out and "generator/* (" in out and "generator_predictions/* (" in out
    assert weights.config.do_lower_case and read_pretrained(alone).config.do_lower_case  # HF's default
    (download / "discriminator" / "tokenizer_config.json").write_text('{"do_lower_case": false}')  # a cased model's
    cased = tmp_path / "models" / "cased"
    assert convert_checkpoint.main(["from-hf", "--hf-dir", str(download / "discriminator"),
                                    "--output-dir", str(cased)]) == 0
    assert read_pretrained(cased).config.do_lower_case is False
    (download / "discriminator" / "tokenizer_config.json").write_text('{"strip_accents": false}')  # HF lower-cases
    config = read_pretrained(download / "discriminator").config
    assert (config.do_lower_case, config.do_strip_accents) == (True, False)
    (download / "discriminator" / "tokenizer_config.json").write_text('{"do_lower_case": false, "strip_accents": true}')
    with pytest.raises(InputError, match="strip_accents true with do_lower_case false: this tokenizer"):
        read_pretrained(download / "discriminator")  # HF would strip without lower-casing; ours cannot
    only = read_pretrained(alone).values
    assert all(np.array_equal(only[name], weights.values[name]) for name in weights.values
               if name.startswith(("electra/", "discriminator_predictions/")))


def test_hf_bad_input(tmp_path, vocab_file, capsys):
    source, _, _ = _write_model_dir(tmp_path, vocab_file, "tiny", seed=2)
    out = tmp_path / "hf"
    assert convert_checkpoint.main(["to-hf", "--model-dir", str(source), "--output-dir", str(out)]) == 0
    assert convert_checkpoint.main(["to-hf", "--model-dir", str(source), "--output-dir", str(out)]) == 2
    assert "exists; pass --overwrite" in capsys.readouterr().err
    (out / "generator" / "model.safetensors").write_bytes(b"not safetensors")
    code = convert_checkpoint.main(["from-hf", "--hf-dir", str(out), "--output-dir", str(tmp_path / "models" / "x")])
    assert code == 2 and "cannot read the weights" in capsys.readouterr().err
    assert not (tmp_path / "models" / "x").exists()
    assert convert_checkpoint.main(["to-hf", "--model-dir", str(source), "--output-dir", str(out),
                                    "--overwrite"]) == 0
    for role in ("discriminator", "generator"):
        (out / role / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    code = convert_checkpoint.main(["from-hf", "--hf-dir", str(out), "--output-dir", str(tmp_path / "models" / "x")])
    assert code == 2 and "has 5 tokens but the word-embedding table has 30522 rows" in capsys.readouterr().err
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertForMaskedLM"]}))
    code = convert_checkpoint.main(["from-hf", "--hf-dir", str(bert), "--output-dir", str(tmp_path / "models" / "x")])
    assert code == 2 and "no HF ELECTRA config.json" in capsys.readouterr().err
    assert not (tmp_path / "models" / "x").exists()


def test_a_checkpoint_of_another_model_is_one_error(tmp_path, vocab_file, capsys):
    """A model dir whose config.json describes another architecture than its checkpoint: each
    export names the checkpoint and the config, and writes nothing."""
    source = tmp_path / "models" / "m"
    config = PretrainingConfig.from_hparams("m", str(tmp_path), {"model_size": "tiny", "max_seq_length": 64})
    model_dir.save_built(model_dir.build(config, vocab_file), config, vocab_file, source)
    other = PretrainingConfig.from_hparams("m", str(tmp_path), {"model_size": "tiny", "max_seq_length": 64,
                                                                "embedding_size": 32})
    other.save(source / "config.json")
    for command in ("to-hf", "to-original", "saved-model"):
        out = tmp_path / command
        assert convert_checkpoint.main([command, "--model-dir", str(source), "--output-dir", str(out)]) == 2
        assert f"does not match the model of {source / 'config.json'}" in capsys.readouterr().err
        assert not out.exists()


def test_export_of_an_earlier_checkpoint(tmp_path, vocab_file, capsys):
    """--step exports the model dir's ckpt-N instead of its latest (to-hf, to-original and
    saved-model), also from a dir without the `checkpoint` state file; a step the dir does not keep
    is one error naming the steps it keeps, with nothing written, and so is a dir without that file and no --step."""
    config = PretrainingConfig.from_hparams("m", str(tmp_path), {"model_size": "tiny", "max_seq_length": 64})
    source = tmp_path / "models" / "m"
    weights = {}
    for step, seed in ((2, 8), (5, 7)):  # ckpt-5 is saved last, so it is the latest
        built = model_dir.build(config, vocab_file)
        randomize(built.model.variables, seed)
        built.optimizer.iterations.assign(step)
        staged = tmp_path / f"staged_{step}"
        model_dir.save_built(built, config, vocab_file, staged)
        if step == 2:
            model_dir.save_built(built, config, vocab_file, source)
        else:
            for path in staged.glob("ckpt-5*"):
                path.rename(source / path.name)
            (source / "checkpoint").write_text('model_checkpoint_path: "ckpt-5"\n')
        weights[step] = model_dir.weights_of(built)
    name = "electra/encoder/layer_0/output/dense/kernel"
    for args, step in (([], 5), (["--step", "2"], 2)):
        out = tmp_path / f"hf{args}"
        assert convert_checkpoint.main(["to-hf", "--model-dir", str(source), "--output-dir", str(out)] + args) == 0
        model = transformers.ElectraForPreTraining.from_pretrained(str(out / "discriminator"))
        np.testing.assert_array_equal(model.electra.encoder.layer[0].output.dense.weight.detach().numpy().T,
                                      weights[step][name])
    assert convert_checkpoint.main(["to-original", "--model-dir", str(source), "--output-dir",
                                    str(tmp_path / "tf1"), "--step", "2"]) == 0
    assert "model.ckpt-2" in capsys.readouterr().out
    assert convert_checkpoint.main(["saved-model", "--model-dir", str(source), "--output-dir",
                                    str(tmp_path / "served"), "--step", "2"]) == 0
    import tensorflow_text  # noqa: F401  (registers the WordPiece op the served graph uses)
    served = tf.saved_model.load(str(tmp_path / "served"))
    head = {v.name.split(":")[0]: v.numpy() for v in served.head.variables}
    np.testing.assert_array_equal(head["discriminator_predictions/dense/kernel"],
                                  weights[2]["discriminator_predictions/dense/kernel"])
    for command in ("to-hf", "to-original", "saved-model"):
        out = tmp_path / f"missing_{command}"
        assert convert_checkpoint.main([command, "--model-dir", str(source), "--output-dir", str(out),
                                        "--step", "3"]) == 2
        assert f"model dir {source} has no checkpoint ckpt-3 (it keeps: 2, 5)" in capsys.readouterr().err
        assert not out.exists()
    with pytest.raises(SystemExit):
        convert_checkpoint.main(["to-hf", "--model-dir", str(source), "--output-dir", str(out), "--step", "-1"])
    assert "a checkpoint's step is a non-negative integer, not '-1'" in capsys.readouterr().err
    (source / "checkpoint").unlink()  # as a copy of the checkpoint files alone: --step still works
    assert convert_checkpoint.main(["to-hf", "--model-dir", str(source), "--output-dir", str(tmp_path / "no_state"),
                                    "--step", "5"]) == 0
    assert convert_checkpoint.main(["to-hf", "--model-dir", str(source), "--output-dir", str(out)]) == 2
    assert "no `checkpoint` state file); it has ckpt-2, ckpt-5: name one" in capsys.readouterr().err
