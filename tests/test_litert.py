"""The LiteRT export of a fine-tuned classifier (finetune.litert), on a small model fine-tuned here on
SST-2 (not a constant one) and the real SST-2 dev sentences: float32 serves the SavedModel server's
probabilities, in batches and one sentence at a time (the one-sentence signature, which XNNPACK
runs nearly whole); int8 (dynamic-range) keeps its argmax on >= 99 % of the dev sentences and its dev
accuracy within 0.3 points of float32's, through the export (in batches and one by one) and through
`predict.py --int8`; --int8 with --embeddings is refused with one clear error, and an export missing
the file that names its task fails with one. Multi-label and regression exports, and a tagger's
refusal: tests/test_user_tasks.py."""

import json
import re
import shutil
import sys

import numpy as np
import pytest

import convert_checkpoint
import predict
import run_finetuning
from electra_tf.errors import InputError
from finetune import litert
from finetune.litert import ONE_SIGNATURE, LiteServer
from finetune.saved_model import build_server


def dev_rows(shared_data):
    lines = (shared_data / "glue" / "SST-2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    sentences, labels = zip(*(line.split("\t") for line in lines))
    return list(sentences), np.array([int(label) for label in labels])


@pytest.fixture(scope="module")
def trial(tmp_path_factory, shared_data, vocab_file):
    """A trial dir: a tiny ELECTRA fine-tuned on 4,000 SST-2 sentences from random weights."""
    root = tmp_path_factory.mktemp("litert")
    hparams = dict(task_names=["sst"], model_size="tiny", random_init=True, do_eval=False, vocab_file=str(vocab_file),
                   raw_data_dir=str(shared_data / "glue"), max_examples=4000, num_train_epochs=1.0,
                   max_seq_length=64, learning_rate=1e-3, keep_all_models=True)
    assert run_finetuning.main(["--data-dir", str(root), "--model-name", "lite",
                                "--hparams", json.dumps(hparams)]) == 0
    return next((root / "models").rglob("sst_model_1"))


@pytest.fixture(scope="module")
def served(trial, shared_data):
    """The SavedModel server's probabilities [872, 2] on the SST-2 dev sentences, in batches of 32."""
    sentences, _ = dev_rows(shared_data)
    server = build_server(trial)
    return np.concatenate([server.serve(np.array(sentences[start:start + 32], object))["probabilities"].numpy()
                           for start in range(0, len(sentences), 32)])


def export(trial, out, int8):
    arguments = ["litert", "--model-dir", str(trial), "--output-dir", str(out)] + (["--int8"] if int8 else [])
    assert convert_checkpoint.main(arguments) == 0
    return LiteServer(out)


def lite_probabilities(server, sentences, batch):
    return np.concatenate([server(sentences[start:start + batch])["probabilities"]
                           for start in range(0, len(sentences), batch)])


def test_float32_export_serves_the_saved_model_servers_probabilities(trial, served, shared_data, tmp_path):
    sentences, _ = dev_rows(shared_data)
    server = export(trial, tmp_path / "lite", int8=False)
    np.testing.assert_allclose(lite_probabilities(server, sentences, 32), served, atol=1e-5)
    np.testing.assert_allclose(lite_probabilities(server, sentences[:100], 1), served[:100], atol=1e-5)
    answer = server(sentences[:3])
    assert list(answer["label"]) == [str(i) for i in served[:3].argmax(axis=1)]
    with pytest.raises(InputError, match="task sst takes one text per example: no text_b"):
        server(sentences[:2], sentences[:2])  # SST-2 is no pair task: not served as one
    damaged = shutil.copytree(tmp_path / "lite", tmp_path / "damaged")
    (damaged / "served_task").unlink()
    with pytest.raises(InputError, match=re.escape(f"{damaged / 'served_task'} is missing")):
        LiteServer(damaged)


def test_a_saved_model_exports_as_its_trial_dir(trial, served, shared_data, tmp_path):
    """litert --model-dir takes a fine-tuned SavedModel too: its files live in assets.extra."""
    sentences, _ = dev_rows(shared_data)
    assert convert_checkpoint.main(["saved-model", "--model-dir", str(trial), "--output-dir", str(tmp_path / "sm")]) == 0
    server = export(tmp_path / "sm", tmp_path / "lite", int8=False)
    np.testing.assert_allclose(lite_probabilities(server, sentences[:100], 32), served[:100], atol=1e-5)


def test_one_sentence_signature_runs_in_xnnpack_whole(trial, tmp_path):
    """A single sentence's graph (`one_sentence`) has constant reshapes only, so that XNNPACK takes
    nearly all of it: 3 delegated partitions (the embedding lookups and the [CLS] gather stay
    outside), where the batch graph's gathers and computed reshapes cut it into 39."""
    from ai_edge_litert.interpreter import Interpreter
    export(trial, tmp_path / "lite", int8=False)
    loaded = Interpreter(model_path=str(tmp_path / "lite" / "model.tflite"), num_threads=2)
    loaded.allocate_tensors()
    assert loaded._interpreter.GetSubgraphIndexFromSignature(ONE_SIGNATURE) == 0  # the one _get_ops_details lists
    ops = [op["op_name"] for op in loaded._get_ops_details()]
    assert ops.count("DELEGATE") <= 3, ops


def test_int8_export_keeps_argmax_and_accuracy(trial, served, shared_data, tmp_path):
    sentences, labels = dev_rows(shared_data)
    float_accuracy = (served.argmax(axis=1) == labels).mean()
    assert float_accuracy > 0.6, float_accuracy  # a model that learned something, both labels predicted
    assert 0.1 < served.argmax(axis=1).mean() < 0.9
    server = export(trial, tmp_path / "lite8", int8=True)
    one_by_one = lite_probabilities(server, sentences[:200], 1)  # the one_sentence signature
    assert (one_by_one.argmax(axis=1) == served[:200].argmax(axis=1)).mean() >= 0.99
    int8 = lite_probabilities(server, sentences, 32)
    agreement = (int8.argmax(axis=1) == served.argmax(axis=1)).mean()
    int8_accuracy = (int8.argmax(axis=1) == labels).mean()
    print(f"float32 accuracy {float_accuracy:.4f}, int8 {int8_accuracy:.4f}, argmax agreement {agreement:.4f}, "
          f"largest probability difference {np.abs(int8 - served).max():.2e}")
    assert agreement >= 0.99
    assert abs(int8_accuracy - float_accuracy) <= 0.003
    assert np.abs(int8 - served).max() > 0  # really quantized


def test_predict_int8_keeps_argmax_and_accuracy(trial, served, shared_data, tmp_path):
    """predict.py --int8 (LiteRT, converted in memory) on the dev sentences as plain text lines."""
    sentences, labels = dev_rows(shared_data)
    (tmp_path / "dev.txt").write_text("".join(f"{sentence}\n" for sentence in sentences), encoding="utf-8")
    rows = {}
    for name, extra in (("float32", []), ("int8", ["--int8"])):
        output = tmp_path / f"{name}.jsonl"
        assert predict.main(["--model-dir", str(trial), "--input", str(tmp_path / "dev.txt"),
                             "--output", str(output)] + extra) == 0
        rows[name] = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    float_labels = np.array([int(row["label"]) for row in rows["float32"]])
    int8_labels = np.array([int(row["label"]) for row in rows["int8"]])
    assert (float_labels == served.argmax(axis=1)).all()  # predict's float32 path is the server's
    int8_probabilities = np.array([[row["probabilities"][k] for k in ("0", "1")] for row in rows["int8"]])
    assert 0 < np.abs(int8_probabilities - served).max() < 0.02
    assert (int8_labels == float_labels).mean() >= 0.99
    assert abs((int8_labels == labels).mean() - (float_labels == labels).mean()) <= 0.003


def test_a_missing_interpreter_is_one_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", None)  # as without the [litert] extra
    with pytest.raises(InputError, match=r"LiteRT's interpreter is not installed: pip install 'ai-edge-litert"):
        litert.interpreter(b"")


def test_predict_int8_refuses_embeddings(trial, tmp_path, capsys):
    """--int8 converts the [CLS] path only: --embeddings (every token's vector) is refused, nothing written."""
    (tmp_path / "in.txt").write_text("a gripping, funny film\n", encoding="utf-8")
    assert predict.main(["--model-dir", str(trial), "--input", str(tmp_path / "in.txt"),
                         "--output", str(tmp_path / "out.jsonl"), "--int8", "--embeddings"]) != 0
    assert "--int8 predicts with tasks whose head reads [CLS] alone" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()
