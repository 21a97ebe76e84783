"""HF transformers directories: export to and import from `ElectraForPreTraining` (discriminator)
and `ElectraForMaskedLM` (generator) with safetensors weights. Needs no torch (safetensors' numpy
API); an import of a legacy `pytorch_model.bin` alone imports torch.

Layout written: `<out>/discriminator/` and `<out>/generator/`, each with config.json,
model.safetensors, vocab.txt, tokenizer_config.json and special_tokens_map.json, i.e. what
`from_pretrained` expects (and how the released models are published: one repo per network).

Name mapping (HF's module tree in transformers/models/electra/modeling_electra.py): TF1 dense
`<scope>/kernel [in, out]` is torch `<module>.weight [out, in]` (transposed), `bias` is `.bias`;
LayerNorm `gamma`/`beta` are `.weight`/`.bias`; embedding tables keep their orientation. HF's
generator owns a copy of the embedding block that the original shares with the discriminator,
and its `generator_lm_head.weight` is tied to that word table, so it is not written.

A discriminator trained with an MLM head of its own (replace_mlm, all_tokens_mlm) is written as
an `ElectraForMaskedLM` with that head; its `discriminator_predictions` head (unused by
replace_mlm, the copy gate of all_tokens_mlm) rides along as weights HF's class does not take.
"""

import dataclasses
import json
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from electra_tf.config import PRETRAINING_OBJECTIVES, PretrainingConfig, has_discriminator_mlm_head
from electra_tf.errors import InputError
from electra_tf.hparams import recorded_flags
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.layer_utils import LAYER_NORM_EPSILON
from electra_tf.checkpoints.original import infer_config

WEIGHTS_FILE = "model.safetensors"
LEGACY_WEIGHTS_FILE = "pytorch_model.bin"
# Each network's HF class, unless its head says otherwise (a discriminator with an MLM head).
ROLES = {"discriminator": "ElectraForPreTraining", "generator": "ElectraForMaskedLM"}
Pair = Tuple[str, str, bool]  # (TF1 name, HF key, transposed)
# float16 halves the files (the released models are float32); the import reads either as float32.
EXPORT_DTYPES = ("float32", "float16")
# In a generator's config.json: its embedding block is its own (`untied_generator_embeddings`), which
# its width shows only when that differs from the discriminator's. HF keeps unknown keys as attributes.
OWN_EMBEDDINGS = "electra_tf_own_embeddings"
# In a generator's config.json: its encoder is the discriminator's (`untied_generator: false`). HF's
# two networks are separate modules, so the copies' equality alone cannot tell sharing from chance.
DISCRIMINATOR_ENCODER = "electra_tf_discriminator_encoder"
# In every network's config.json: which of the two it is (the architecture cannot tell a
# discriminator with an MLM head from a generator); in the discriminator's, its objective (the
# shapes cannot tell electra from electra_15, nor replace_mlm from all_tokens_mlm).
ROLE = "electra_tf_role"
OBJECTIVE = "electra_tf_objective"


class Network(NamedTuple):
    """One HF network of a pretraining model."""

    encoder: BertConfig
    pairs: List[Pair]  # every weight it writes
    architecture: str  # the HF class whose head it fills


def _dense(tf1: str, hf: str) -> List[Pair]:
    return [(f"{tf1}/kernel", f"{hf}.weight", True), (f"{tf1}/bias", f"{hf}.bias", False)]


def _layer_norm(tf1: str, hf: str) -> List[Pair]:
    return [(f"{tf1}/gamma", f"{hf}.weight", False), (f"{tf1}/beta", f"{hf}.bias", False)]


def encoder_pairs(scope: str, embeddings_scope: str, config: BertConfig) -> List[Pair]:
    """One encoder: TF1 `<scope>/...` (embeddings under `embeddings_scope`) ↔ HF `electra.*`."""
    pairs = [(f"{embeddings_scope}/{table}", f"electra.embeddings.{table}.weight", False)
             for table in ("word_embeddings", "position_embeddings", "token_type_embeddings")]
    pairs += _layer_norm(f"{embeddings_scope}/LayerNorm", "electra.embeddings.LayerNorm")
    if config.embedding_size != config.hidden_size:
        pairs += _dense(f"{scope}/embeddings_project", "electra.embeddings_project")
    for i in range(config.num_hidden_layers):
        tf1, hf = f"{scope}/encoder/layer_{i}", f"electra.encoder.layer.{i}"
        for projection in ("query", "key", "value"):
            pairs += _dense(f"{tf1}/attention/self/{projection}", f"{hf}.attention.self.{projection}")
        pairs += _dense(f"{tf1}/attention/output/dense", f"{hf}.attention.output.dense")
        pairs += _layer_norm(f"{tf1}/attention/output/LayerNorm", f"{hf}.attention.output.LayerNorm")
        pairs += _dense(f"{tf1}/intermediate/dense", f"{hf}.intermediate.dense")
        pairs += _dense(f"{tf1}/output/dense", f"{hf}.output.dense")
        pairs += _layer_norm(f"{tf1}/output/LayerNorm", f"{hf}.output.LayerNorm")
    return pairs


def _mlm_head(scope: str) -> List[Pair]:
    """An MLM head `<scope>` ↔ the head of HF's ElectraForMaskedLM (its output table is the word table)."""
    return _dense(f"{scope}/dense", "generator_predictions.dense") + _layer_norm(
        f"{scope}/LayerNorm", "generator_predictions.LayerNorm") + [
        (f"{scope}/output_bias", "generator_lm_head.bias", False)]


def network_pairs(config: PretrainingConfig) -> Dict[str, Network]:
    """The networks of a pretraining config to export, by role."""
    networks = {}
    disc = config.discriminator_config()
    if config.objective != "bert":
        pairs = encoder_pairs("electra", "electra/embeddings", disc) + _dense(
            "discriminator_predictions/dense", "discriminator_predictions.dense") + _dense(
            "discriminator_predictions/dense_1", "discriminator_predictions.dense_prediction")
        if has_discriminator_mlm_head(config.objective):
            networks["discriminator"] = Network(disc, pairs + _mlm_head("discriminator_mlm_predictions"),
                                                ROLES["generator"])
        else:
            networks["discriminator"] = Network(disc, pairs, ROLES["discriminator"])
    if not config.uniform_generator:
        gen = config.generator_config()
        separate = config.objective != "bert" and config.untied_generator
        scope = "generator" if separate else "electra"
        embeddings = "generator/embeddings" if separate and config.untied_generator_embeddings \
            else "electra/embeddings"
        networks["generator"] = Network(gen, encoder_pairs(scope, embeddings, gen) + _mlm_head(
            "generator_predictions"), ROLES["generator"])
    return networks


def hf_config(encoder: BertConfig, architecture: str, dtype: str = "float32") -> dict:
    """config.json of one HF network; HF's "gelu" is the exact erf GELU, as ours. transformers
    reads the weights' dtype from "dtype" since 4.56, from "torch_dtype" before."""
    fields = ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "intermediate_size", "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob",
              "max_position_embeddings", "type_vocab_size", "initializer_range")
    return {"architectures": [architecture], "model_type": "electra",
            **{name: getattr(encoder, name) for name in fields},
            "layer_norm_eps": LAYER_NORM_EPSILON, "pad_token_id": 0, "tie_word_embeddings": True,
            "dtype": dtype, "torch_dtype": dtype}


def _tokenizer_files(config) -> Dict[str, dict]:
    """HF's tokenizer files for a config's casing: `strip_accents` null strips whenever it
    lower-cases, as ours; false never strips."""
    special = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
               "mask_token": "[MASK]"}
    return {"tokenizer_config.json": {"tokenizer_class": "ElectraTokenizer", "do_lower_case": config.do_lower_case,
                                      "strip_accents": None if config.do_strip_accents else False,
                                      "tokenize_chinese_chars": True, "model_max_length": 512, **special},
            "special_tokens_map.json": special}


def write_network_dir(out: Path, tensors: Dict[str, np.ndarray], document: dict, vocab_file, config) -> None:
    """One HF network dir as `from_pretrained` reads it: the weights (safetensors, in their own
    dtype), `document` as config.json, the vocab and the tokenizer's config (`config`'s casing:
    `do_lower_case`, `do_strip_accents`)."""
    from safetensors.numpy import save_file
    out.mkdir(parents=True)
    save_file(tensors, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(document, indent=2) + "\n")
    (out / "vocab.txt").write_bytes(Path(vocab_file).read_bytes())
    for name, content in _tokenizer_files(config).items():
        (out / name).write_text(json.dumps(content, indent=2) + "\n")


def export_hf(values: Dict[str, np.ndarray], config: PretrainingConfig, vocab_file, directory,
              dtype: str = "float32") -> List[str]:
    """Writes `<directory>/{discriminator,generator}/` with weights in `dtype` (one of
    EXPORT_DTYPES); returns the roles written."""
    if dtype not in EXPORT_DTYPES:
        raise InputError(f"dtype {dtype!r}: HF exports are written in {' or '.join(EXPORT_DTYPES)}")
    networks = network_pairs(config)
    if any(network.architecture == ROLES["generator"] for network in networks.values()) and \
            config.discriminator_config().hidden_act != "gelu":
        raise InputError(f"hidden_act {config.discriminator_config().hidden_act!r}: HF's MLM head "
                         "always applies gelu, so only gelu models export exactly")
    for role, (encoder, pairs, architecture) in networks.items():
        missing = [tf1 for tf1, _, _ in pairs if tf1 not in values]
        if missing:
            raise InputError(f"cannot export the {role}: the weights lack {missing[0]} "
                             f"(and {len(missing) - 1} more)")
        tensors = {hf: np.ascontiguousarray(values[tf1].T if transposed else values[tf1], dtype)
                   for tf1, hf, transposed in pairs}
        document = dict(hf_config(encoder, architecture, dtype), **{ROLE: role})
        if role == "discriminator":
            document[OBJECTIVE] = config.objective
        if role == "generator" and any(tf1.startswith("generator/embeddings/") for tf1, _, _ in pairs):
            document[OWN_EMBEDDINGS] = True
        if role == "generator" and "discriminator" in networks and not config.untied_generator:
            document[DISCRIMINATOR_ENCODER] = True
        write_network_dir(Path(directory) / role, tensors, document, vocab_file, config)
    return list(networks)


# ---------------------------------------------------------------------------------------------
# Import


def _network_dir(path: Path) -> Optional[Tuple[str, Path]]:
    """(role, dir) of a single HF network dir, by the architecture its config.json names."""
    config = path / "config.json"
    if not config.is_file():
        return None
    try:
        content = json.loads(config.read_text())
    except ValueError as error:
        raise InputError(f"{config}: not valid JSON ({error})") from None
    if content.get("model_type") != "electra":
        return None
    if content.get(ROLE) in tuple(ROLES):  # compared, not hashed: a key of any JSON type is just not a role
        return content[ROLE], path
    architectures = content.get("architectures") or ["ElectraForPreTraining"]
    role = "generator" if architectures[0] in ("ElectraForMaskedLM", "ElectraForCausalLM") else "discriminator"
    return role, path


def network_dirs(path) -> Dict[str, Path]:
    """Role → dir: `path` itself (one network) or its discriminator/ and generator/ subdirs."""
    path = Path(path)
    found = dict(filter(None, [_network_dir(path / role) for role in ROLES] + [_network_dir(path)]))
    return found


def is_hf_dir(path) -> bool:
    return Path(path).is_dir() and bool(network_dirs(path))


def _load_tensors(directory: Path) -> Dict[str, np.ndarray]:
    weights = directory / WEIGHTS_FILE
    try:
        if weights.is_file():
            from safetensors.numpy import load_file
            return load_file(str(weights))
        if (directory / LEGACY_WEIGHTS_FILE).is_file():
            import torch  # only for legacy pickled weights
            state = torch.load(directory / LEGACY_WEIGHTS_FILE, map_location="cpu", weights_only=True)
            return {key: tensor.float().numpy() for key, tensor in state.items()}
    except Exception as error:  # safetensors and torch raise their own types for a bad file
        raise InputError(f"{directory}: cannot read the weights ({str(error).splitlines()[0]})") from None
    raise InputError(f"{directory}: no {WEIGHTS_FILE} (or {LEGACY_WEIGHTS_FILE})")


def _check_hf_config(directory: Path, encoder: BertConfig) -> None:
    """Fields shapes do not show must still agree with the config this project derives."""
    given = json.loads((directory / "config.json").read_text())
    expected = {"num_attention_heads": encoder.num_attention_heads, "hidden_act": encoder.hidden_act,
                "layer_norm_eps": LAYER_NORM_EPSILON}
    for name, value in expected.items():
        if name in given and given[name] != value:
            raise InputError(f"{directory / 'config.json'}: {name} {given[name]!r} is not supported here "
                             f"(this model would use {value!r})")


def _to_tf1(tensors: Dict[str, np.ndarray], pairs: List[Pair], role: str, directory: Path,
            values: Dict[str, np.ndarray]) -> None:
    """Adds the network's weights to `values` by TF1 name; shared tables must agree. HF weights
    the mapping does not take are kept as `<role>/<HF key>`, so the load report lists them as
    unused instead of dropping them silently."""
    tied = "generator_lm_head.weight"
    if tied in tensors:  # an MLM head's, saved although tied: it must be the word table
        pairs = pairs + [(pairs[0][0], tied, False)]
    for tf1, hf, transposed in pairs:
        if hf not in tensors:
            raise InputError(f"{directory / WEIGHTS_FILE}: the {role} lacks the required weight {hf}")
        value = tensors[hf].T if transposed else tensors[hf]
        if tf1 in values and not np.array_equal(values[tf1], value):
            raise InputError(f"{directory}: {hf} differs from {tf1}, which it shares in this project "
                             "(the generator's embedding block, output table, or with "
                             f"{DISCRIMINATOR_ENCODER}, encoder: docs/fidelity.md#tying)")
        values[tf1] = np.ascontiguousarray(value, np.float32)
    taken = {hf for _, hf, _ in pairs}
    values.update({f"{role}/{key}": value for key, value in tensors.items() if key not in taken})


def _tensor(tensors: Dict[str, np.ndarray], key: str, role: str) -> np.ndarray:
    if key not in tensors:
        raise InputError(f"the HF {role} lacks the weight {key}: not an ELECTRA {ROLES[role]} checkpoint")
    return tensors[key]


def _shape_names(tensors: Dict[str, np.ndarray], role: str, scope: str,
                 table_scope: Optional[str], head: bool = True) -> Dict[str, np.ndarray]:
    """Just enough TF1 names for `infer_config`: the tables (when `table_scope`), each layer's
    query and intermediate kernels, and the head's telltale weight (when `head`; else only if
    it is there)."""
    values = {}
    if table_scope:
        for table in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
            values[f"{table_scope}/{table}"] = _tensor(tensors, f"electra.embeddings.{table}.weight", role)
    layer = 0
    while f"electra.encoder.layer.{layer}.attention.self.query.weight" in tensors:
        hf, tf1 = f"electra.encoder.layer.{layer}", f"{scope}/encoder/layer_{layer}"
        values[f"{tf1}/attention/self/query/kernel"] = tensors[f"{hf}.attention.self.query.weight"].T
        values[f"{tf1}/intermediate/dense/kernel"] = _tensor(tensors, f"{hf}.intermediate.dense.weight", role).T
        layer += 1
    key, name = {"discriminator": ("discriminator_predictions.dense.weight", "discriminator_predictions/dense/kernel"),
                 "generator": ("generator_lm_head.bias", "generator_predictions/output_bias")}[role]
    if head or key in tensors:
        values[name] = _tensor(tensors, key, role)
    return values


def read_hf(path, model_name: str = "imported", data_dir: Optional[str] = None):
    """PretrainedWeights (TF1-named values, inferred config, vocab) from an HF dir.

    A discriminator with a generator becomes an ELECTRA model. The generator shares the
    discriminator's embedding block (as in the released models, so it must equal the
    discriminator's) unless the block is of another width or its config.json says it is its own
    (OWN_EMBEDDINGS, written by `export_hf`): then `untied_generator_embeddings`. One whose
    config.json says its encoder is the discriminator's (DISCRIMINATOR_ENCODER) must equal it in
    every encoder weight and gives `untied_generator: false`. The objective is the one the
    discriminator's config.json names (OBJECTIVE), else "electra". A discriminator alone becomes
    the same with the generator left out; a generator alone, an MLM-only ("bert" objective) model.
    """
    from electra_tf.checkpoints import PretrainedWeights, vocab_beside
    dirs = network_dirs(path)
    tensors = {role: _load_tensors(directory) for role, directory in dirs.items()}
    objective = _objective(dirs["discriminator"]) if "discriminator" in dirs else None
    # An MLM discriminator's replaced-token head may be gone: HF's ElectraForMaskedLM drops it on saving.
    mlm_discriminator = objective is not None and has_discriminator_mlm_head(objective)
    # Pass 1: the shapes, for the config.
    shapes: Dict[str, np.ndarray] = {}
    if "discriminator" in tensors:
        shapes.update(_shape_names(tensors["discriminator"], "discriminator", "electra", "electra/embeddings",
                                   head=not mlm_discriminator))
    if "generator" in tensors:
        gen = tensors["generator"]
        if "discriminator" not in tensors:
            shapes.update(_shape_names(gen, "generator", "electra", "electra/embeddings"))
        else:
            flags = json.loads((dirs["generator"] / "config.json").read_text())
            if flags.get(DISCRIMINATOR_ENCODER) is True:  # the discriminator's encoder: only the head
                # shows, and the discriminator's shapes stay the config's (pass 2 checks the copies agree)
                shapes["generator_predictions/output_bias"] = _tensor(gen, "generator_lm_head.bias", "generator")
            else:
                width = _tensor(gen, "electra.embeddings.word_embeddings.weight", "generator").shape[1]
                own = flags.get(OWN_EMBEDDINGS) is True or width != shapes["electra/embeddings/word_embeddings"].shape[1]
                shapes.update(_shape_names(gen, "generator", "generator", "generator/embeddings" if own else None))
    config = infer_config(shapes, model_name, data_dir or str(path), objective=objective)
    # Pass 2: every weight through the exact mapping of that config.
    values: Dict[str, np.ndarray] = {}
    networks = network_pairs(config)
    for role in ("discriminator", "generator"):
        if role in tensors:
            _check_hf_config(dirs[role], networks[role].encoder)
            pairs = [pair for pair in networks[role].pairs if pair[1] in tensors[role]
                     or not (mlm_discriminator and pair[1].startswith("discriminator_predictions."))]
            _to_tf1(tensors[role], pairs, role, dirs[role], values)
    config = dataclasses.replace(config, **recorded_casing(path))
    return PretrainedWeights(values, config, vocab_beside(path))


def _objective(directory: Path) -> Optional[str]:
    """The objective a discriminator's config.json names (OBJECTIVE), or None when it names none."""
    config = directory / "config.json"
    objective = json.loads(config.read_text()).get(OBJECTIVE)
    with_discriminator = [name for name in PRETRAINING_OBJECTIVES if name != "bert"]
    if objective is not None and objective not in with_discriminator:
        raise InputError(f"{config}: {OBJECTIVE} {objective!r} is not an objective with a discriminator "
                         f"(one of {with_discriminator})")
    return objective


def recorded_casing(path) -> Dict[str, bool]:
    """The casing an HF dir's tokenizer records, as PretrainingConfig's `do_lower_case` and
    `do_strip_accents`: the first tokenizer_config.json of its network dirs (an export's
    discriminator/), then its top dir, that records `do_lower_case` or `strip_accents`; {} where none
    does. HF's `do_lower_case` is true where absent, and its `strip_accents` null strips whenever it
    lower-cases (true here); true without lower-casing strips alone, which this tokenizer, as the
    original's, cannot: an error."""
    try:
        directories = [*network_dirs(path).values(), Path(path)]
    except InputError:  # a damaged config.json: loading the weights names it
        directories = [Path(path)]
    for directory in directories:
        file = directory / "tokenizer_config.json"
        flags = recorded_flags(file, ("do_lower_case", "strip_accents"))
        if not flags:
            continue
        lower, strip = flags.get("do_lower_case", True), flags.get("strip_accents")
        if strip and not lower:
            raise InputError(f"{file}: strip_accents true with do_lower_case false: this tokenizer, as the "
                             f"original's, strips accents only when it lower-cases; set strip_accents to false "
                             f"there (or do_lower_case and do_strip_accents in --hparams) to use the model on "
                             f"text that keeps its accents")
        return {"do_lower_case": lower, "do_strip_accents": strip is not False}
    return {}
