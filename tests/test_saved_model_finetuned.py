"""The fine-tuned GLUE SavedModel on raw text: in a fresh process, the Keras FinetuningModel's
probabilities and labels (STS-B: scores) on real dev examples of each task of one multi-task run
(MRPC pairs, CoLA sentences, STS-B pairs), BERT's pair truncation in the graph, the export's
errors; CoLA's export is in mixed_bfloat16 (bfloat16 matmuls, probabilities within its rounding of
the float32 model's), the others in float32 (the same to 1e-5)."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import convert_checkpoint
import run_finetuning
from finetune import glue
from finetune.task_data import make_tokenizer
from finetune.inputs import featurize, pad_batch
from finetune.model import FinetuningModel
from finetune.runner import FINETUNED
from finetune.servers import encode_pair
from finetune.tasks import get_task
from checkpoint_helpers import SERVED_PRECISION, assert_computes_in
from test_finetuning import BASE, data_dir, finetuning_config  # noqa: F401 (data_dir is a fixture)
from test_token_offsets import assert_embed_offsets

TASKS = ["mrpc", "cola", "sts"]
# One export per task, one of them in bfloat16 (rather than a fourth export, MRPC's again in bfloat16).
PRECISIONS = {"mrpc": "float32", "cola": "mixed_bfloat16", "sts": "float32"}
MAX_SEQ_LENGTH = 32  # short, so many MRPC dev pairs are truncated
DEV_ROWS = 40
# bfloat16 keeps 8 significant bits: in the bf16 export the [CLS] vector (components up to ~3 after
# the last LayerNorm) comes out ~1 % off float32's, which moves this head's two logits apart by up to
# ~0.05 and a two-label probability by at most a quarter of that. Measured on MRPC: 0.011 (the Keras
# model run in bf16 itself: 0.010 from float32); on CoLA's export: 0.0075.
BF16_PROBABILITY_TOLERANCE = 0.03

LOAD_AND_RUN = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # registers the WordPiece op the graph uses
""") + SERVED_PRECISION + textwrap.dedent("""
    for saved_model, inputs, output in json.loads(sys.argv[1]):
        loaded = tf.saved_model.load(saved_model)
        serving = loaded.signatures["serving_default"]
        texts = json.load(open(inputs, encoding="utf-8"))
        specs = serving.structured_input_signature[1]
        assert sorted(specs) == sorted(texts), (sorted(specs), sorted(texts))
        assert all(s.dtype == tf.string and s.shape.as_list() == [None] for s in specs.values()), specs
        out = serving(**{name: tf.constant(values) for name, values in texts.items()})
        out = {name: value.numpy() for name, value in out.items()}
        np.savez(output, **{name: value.astype("S") if value.dtype == object else value for name, value in out.items()})
        open(output + ".json", "w").write(json.dumps(served_precision(loaded, serving)))
""")


@pytest.fixture(scope="module")
def finetuned(data_dir):  # noqa: F811
    """A trial dir of a few MRPC + CoLA + STS-B training steps from the tiny pretrained model."""
    hparams = {**BASE, "task_names": TASKS, "max_seq_length": MAX_SEQ_LENGTH, "do_eval": False,
               "learning_rate": 1e-4}  # small: probabilities stay away from 0 and 1
    assert run_finetuning.main(["--data-dir", str(data_dir), "--model-name", "tiny",
                                "--hparams", json.dumps(hparams)]) == 0
    trial_dir = data_dir / "models" / "tiny" / "finetuning_models" / "mrpc_cola_sts_model_1"
    config = finetuning_config(data_dir, **hparams)
    model = FinetuningModel(config.encoder_config(), [get_task(name) for name in TASKS], config)
    model({"input_ids": tf.ones([1, 3], tf.int32), "input_mask": tf.ones([1, 3], tf.int32),
           "segment_ids": tf.zeros([1, 3], tf.int32)})
    tf.train.Checkpoint(finetuning_model=model).read(str(trial_dir / FINETUNED)).assert_existing_objects_matched()
    return config, model, trial_dir


def test_fresh_process_gives_the_keras_models_probabilities(finetuned, shared_data, tmp_path):
    config, model, trial_dir = finetuned
    tokenizer = make_tokenizer(config)
    jobs, expected = [], {}
    for task_id, name in enumerate(TASKS):
        out = tmp_path / name
        assert convert_checkpoint.main(["saved-model", "--model-dir", str(trial_dir), "--task", name,
                                        "--output-dir", str(out), "--precision", PRECISIONS[name]]) == 0
        task = glue.get_task(name)
        examples = glue.read_split(shared_data / "glue", task, "dev", DEV_ROWS)
        texts = {"text_a": [e.text_a for e in examples]}
        if task.train.text_b is not None:
            texts["text_b"] = [e.text_b for e in examples]
        (tmp_path / f"{name}.json").write_text(json.dumps(texts), encoding="utf-8")
        jobs.append([str(out), str(tmp_path / f"{name}.json"), str(tmp_path / f"{name}.npz")])
        features = featurize(examples, tokenizer, MAX_SEQ_LENGTH, task_id, task.is_regression)
        if name == "mrpc":
            assert (features.lengths == MAX_SEQ_LENGTH).sum() > DEV_ROWS // 2  # truncation is exercised
        logits = model(pad_batch(features, range(len(examples))), training=False)[name].numpy()
        expected[name] = (task, logits)
    (tmp_path / "run.py").write_text(LOAD_AND_RUN)
    subprocess.run([sys.executable, str(tmp_path / "run.py"), json.dumps(jobs)], check=True, capture_output=True)

    for name, (task, logits) in expected.items():
        served = dict(np.load(tmp_path / f"{name}.npz"))
        assert_computes_in(json.loads((tmp_path / f"{name}.npz.json").read_text()), PRECISIONS[name])
        if task.is_regression:
            assert sorted(served) == ["score"] and served["score"].dtype == np.float32
            np.testing.assert_allclose(served["score"] / glue.STS_MAX, logits[:, 0], atol=1e-5, rtol=0)
            assert served["score"].std() > 1e-3
            continue
        assert sorted(served) == ["label", "probabilities"]
        assert served["probabilities"].dtype == np.float32 and served["probabilities"].shape == (DEV_ROWS, 2)
        probabilities = np.exp(logits - logits.max(-1, keepdims=True))
        probabilities /= probabilities.sum(-1, keepdims=True)
        labels = [label.decode() for label in served["label"]]
        if PRECISIONS[name] == "float32":
            np.testing.assert_allclose(served["probabilities"], probabilities, atol=1e-5, rtol=0)
            assert labels == [glue.server_label(task, p) for p in logits.argmax(-1)]
        else:
            gap = np.abs(served["probabilities"] - probabilities).max()
            assert 0 < gap < BF16_PROBABILITY_TOLERANCE, gap
            assert labels == [glue.server_label(task, p) for p in served["probabilities"].argmax(-1)]
        assert served["probabilities"][:, 1].std() > 1e-3, served["probabilities"]  # not a constant

    # an export stores each weight once: its encoder and the served task's head (Q/K/V as one copy)
    pairs = json.loads((tmp_path / "mrpc.json").read_text(encoding="utf-8"))  # truncated: kept prefixes
    embedded = tf.saved_model.load(str(tmp_path / "mrpc")).signatures["embed"](
        **{key: tf.constant(values) for key, values in pairs.items()})
    assert_embed_offsets(tokenizer, {0: pairs["text_a"], 1: pairs["text_b"]},
                         {key: value.numpy() for key, value in embedded.items()})  # each token's characters

    saved = tf.train.list_variables(str(tmp_path / "mrpc" / "variables" / "variables"))
    head = model.heads[TASKS.index("mrpc")]
    assert sum(np.prod(shape) for key, shape in saved if key.endswith("VARIABLE_VALUE") and shape) == \
        sum(np.prod(v.shape) for v in model.encoder.variables + head.variables)  # (a scalar records precision)


def test_pair_truncation_in_the_graph_is_berts(finetuned):
    """Every pair of lengths 0..12 and 0..9 (ties included) cut to 12 tokens gives featurize's ids and
    segments; an empty second text makes a single sentence, cut to 10 tokens."""
    config, _, _ = finetuned
    tokenizer = make_tokenizer(config)
    examples = [glue.Example(i, " ".join(["the"] * a), " ".join(["cat"] * b), 0)
                for i, (a, b) in enumerate((a, b) for a in range(13) for b in range(10))]
    features = featurize(examples, tokenizer, 12, 0, False)
    batch = pad_batch(features, range(len(examples)))
    ids, mask, segments = encode_pair(tokenizer, tf.constant([e.text_a for e in examples]),
                                      tf.constant([e.text_b for e in examples]), 12)
    np.testing.assert_array_equal(ids.numpy(), batch["input_ids"])
    np.testing.assert_array_equal(mask.numpy(), batch["input_mask"])
    np.testing.assert_array_equal(segments.numpy(), batch["segment_ids"])


@pytest.mark.parametrize("model_dir, arguments, message", [
    ("finetuning_models/mrpc_cola_sts_model_1", ["--task", "RTE"], "was fine-tuned on mrpc, cola, sts only"),
    ("finetuning_models/mrpc_cola_sts_model_1", [], "holds the tasks mrpc, cola, sts: pass --task"),
    ("finetuning_models/mrpc_cola_sts_model_9", [], "model dir {} does not exist"),
    (".", ["--task", "mrpc"], "--task: {} is a pretrained model dir"),
    ("finetuning_models/mrpc_cola_sts_model_1", ["--step", "1"], "--step: {} is a fine-tuning trial's dir"),
])
def test_bad_export_gives_one_clear_error(finetuned, tmp_path, capsys, model_dir, arguments, message):
    model_dir = finetuned[2].parents[1] / model_dir  # relative to the pretrained model dir
    code = convert_checkpoint.main(["saved-model", "--model-dir", str(model_dir), "--output-dir",
                                    str(tmp_path / "out"), *arguments])
    message = message.format(model_dir)
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
