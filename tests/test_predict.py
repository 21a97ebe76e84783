"""predict.py: the predictions of a fine-tuned model on new input agree with the run's own dev
predictions (labels, tags) and with its SavedModel (probabilities within 1e-5); embeddings are the
encoder's; bad input gets one error and leaves no output. SQuAD: test_saved_model_squad.py, on the
model it fine-tunes."""

import csv
import errno
import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import convert_checkpoint
import predict
from electra_tf.errors import InputError
from electra_tf.tokenization import Tokenizer
from finetune.config import FinetuningConfig
from finetune.predicting import Predictor
from finetune.runner import Trial, run
from finetune.task_data import load_task_data, make_tokenizer
from test_token_offsets import assert_embed_offsets, expected_offsets

ROWS = 48
BASE = dict(model_size="tiny", random_init=True, max_seq_length=40, train_batch_size=16, eval_batch_size=32,
            max_examples=ROWS, num_train_epochs=1.0, iterations_per_loop=100, learning_rate=1e-3)
REVIEWS = {"type": "classification", "format": "csv", "train": "reviews/train.csv", "dev": "reviews/dev.csv",
           "text": "sentence", "label": "sentiment", "id": "ref"}
PHRASES = {"type": "tagging", "format": "conll", "train": "chunk/train.txt", "dev": "chunk/dev.txt"}
FRESH_TAGGER = """
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # its ops, which the graph uses
assert not any(name.split(".")[0] in ("electra_tf", "finetune") for name in sys.modules)
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
out = serve(text=tf.constant(json.load(open(sys.argv[2]))))
np.savez(sys.argv[3], **{name: value.numpy().astype(str) if value.dtype == tf.string else value.numpy()
                         for name, value in out.items()})
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory, shared_data, vocab_file):
    """A data dir whose model `tiny` was fine-tuned on reviews (SST-2 rows as CSV, with an id
    column) and, separately, phrases (CoNLL-2000 as a tagging task); {task: (config, trial dir)}."""
    root = tmp_path_factory.mktemp("predict")
    data = root / "finetuning_data"
    (data / "reviews").mkdir(parents=True)
    for split in ("train", "dev"):
        header, *rows = (shared_data / "glue" / "SST-2" / f"{split}.tsv").read_text(encoding="utf-8").split("\n")
        with open(data / "reviews" / f"{split}.csv", "w", newline="", encoding="utf-8") as out:
            writer = csv.writer(out)
            writer.writerow(["ref", "sentence", "sentiment"])
            writer.writerows([f"{split}-{i}", *row.split("\t")] for i, row in enumerate(rows[:ROWS]))
    (data / "chunk").mkdir()
    (data / "chunk" / "train.txt").symlink_to(shared_data / "conll2000" / "train.txt")
    (data / "chunk" / "dev.txt").symlink_to(shared_data / "conll2000" / "test.txt")
    (data / "SST-2").symlink_to(shared_data / "glue" / "SST-2")
    (root / "vocab.txt").symlink_to(vocab_file)
    out = {}
    for name, spec in (("reviews", REVIEWS), ("phrases", PHRASES), ("sst", None)):
        tasks = {name: spec} if spec else {}
        config = FinetuningConfig.from_hparams("tiny", str(root), {**BASE, "task_names": [name], "tasks": tasks})
        run(config, io.StringIO())
        out[name] = (config, root / "models" / "tiny" / "finetuning_models" / f"{name}_model_1")
    return root, out


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """{task: the SavedModel convert_checkpoint.py exports from its trial dir} for reviews and
    phrases, exported once for the tests that serve them."""
    root, models = trained
    out = tmp_path_factory.mktemp("exported")
    for name in ("reviews", "phrases"):
        assert convert_checkpoint.main(["saved-model", "--model-dir", str(models[name][1]), "--output-dir",
                                        str(out / name)]) == 0
    return {name: out / name for name in ("reviews", "phrases")}


def dev_predictions(config, trial_dir):
    """The run's own predictions on its dev split, from the fine-tuned model (no training)."""
    config = FinetuningConfig.from_hparams("tiny", config.data_dir, {**BASE, "task_names": config.task_names,
                                                                     "tasks": config.tasks, "do_train": False,
                                                                     "init_checkpoint": str(trial_dir)})
    data = load_task_data(config, make_tokenizer(config))
    trial = Trial(config, data, 1, io.StringIO())
    trial.initialise()
    return trial.predict(data.dev[0])[0], data.dev[0]


def predicted(args) -> list:
    assert predict.main(args) == 0
    output = args[args.index("--output") + 1]
    return [json.loads(line) for line in open(output, encoding="utf-8")]


def test_classification_agrees_with_the_run_and_the_saved_model(trained, exported, tmp_path):
    root, models = trained
    config, trial_dir = models["reviews"]
    labels, split = dev_predictions(config, trial_dir)
    rows = predicted(["--model-dir", str(trial_dir), "--input", str(root / "finetuning_data/reviews/dev.csv"),
                      "--output", str(tmp_path / "out.jsonl")])
    assert [row["id"] for row in rows] == [f"dev-{i}" for i in range(ROWS)]  # input order, with the ids
    assert [row["label"] for row in rows] == [("0", "1")[int(label)] for label in labels]
    saved_model = tf.saved_model.load(str(exported["reviews"]))
    probabilities = saved_model.signatures["serving_default"](
        text_a=tf.constant([e.text_a for e in split.examples]))["probabilities"].numpy()
    np.testing.assert_allclose([[row["probabilities"][name] for name in ("0", "1")] for row in rows], probabilities,
                               atol=1e-5)
    embedded = saved_model.signatures["embed"](text_a=tf.constant([e.text_a for e in split.examples[:4]]))
    assert_embed_offsets(Tokenizer(root / "vocab.txt"), {0: [e.text_a for e in split.examples[:4]]},
                         {key: value.numpy() for key, value in embedded.items()})  # each token's characters
    dev = str(root / "finetuning_data/reviews/dev.csv")
    with_embeddings = predicted(["--model-dir", str(trial_dir), "--input", dev, "--embeddings",
                                 "--output", str(tmp_path / "embedded.jsonl")])
    np.testing.assert_allclose([row["embedding"]["mean"] for row in with_embeddings[:4]], embedded["mean"].numpy(),
                               atol=1e-5)
    text = tmp_path / "texts.txt"  # plain text, a text a line: the same predictions
    text.write_text("".join(e.text_a + "\n" for e in split.examples[:5]), encoding="utf-8")
    plain = predicted(["--model-dir", str(trial_dir), "--input", str(text), "--output", str(tmp_path / "plain.jsonl")])
    assert [row["label"] for row in plain] == [row["label"] for row in rows[:5]] and "id" not in plain[0]


def test_a_glue_preset_reads_its_dev_and_test_layouts(trained, tmp_path, shared_data):
    root, models = trained
    config, trial_dir = models["sst"]
    labels, split = dev_predictions(config, trial_dir)
    rows = predicted(["--model-dir", str(trial_dir), "--input", str(shared_data / "glue/SST-2/dev.tsv"),
                      "--output", str(tmp_path / "dev.jsonl")])
    assert [row["label"] for row in rows[:ROWS]] == [("0", "1")[int(label)] for label in labels]
    header, *lines = (shared_data / "glue/SST-2/test.tsv").read_text(encoding="utf-8").splitlines()
    (tmp_path / "test.tsv").write_text("\n".join([header] + lines[:5]) + "\n", encoding="utf-8")
    (tmp_path / "test.txt").write_text("".join(line.split("\t")[1] + "\n" for line in lines[:5]), encoding="utf-8")
    test = predicted(["--model-dir", str(trial_dir), "--input", str(tmp_path / "test.tsv"),
                      "--output", str(tmp_path / "test.jsonl")])
    plain = predicted(["--model-dir", str(trial_dir), "--input", str(tmp_path / "test.txt"),
                       "--output", str(tmp_path / "plain.jsonl")])
    assert [row["id"] for row in test] == [line.split("\t")[0] for line in lines[:5]]  # the index column
    assert [row["probabilities"] for row in test] == [row["probabilities"] for row in plain]


def test_tagging_agrees_with_the_run_and_gives_entity_spans(trained, exported, tmp_path):
    root, models = trained
    config, trial_dir = models["phrases"]
    tag_ids, split = dev_predictions(config, trial_dir)
    rows = predicted(["--model-dir", str(trial_dir), "--input", str(root / "finetuning_data/chunk/dev.txt"),
                      "--input-format", "conll", "--output", str(tmp_path / "out.jsonl")])
    assert len(rows) == 2012 and len(tag_ids) == ROWS  # the whole file; the run read ROWS of it
    tags = split.task.tags
    for row, ids, sentence, kept in zip(rows[:ROWS], tag_ids, split.examples, split.features.labeled_positions):
        assert row["words"] == list(sentence.words)
        assert row["tags"] == [tags[int(i)] for i in ids[:len(kept)]] + [None] * (len(sentence.words) - len(kept))
        for entity in row["entities"]:  # spans of the words joined by spaces
            assert " ".join(sentence.words)[entity["start"]:entity["end"]] == entity["text"]
    line = "Rockwell International Corp. said it signed  a tentative agreement ."
    (tmp_path / "line.txt").write_text(line + "\n")
    [row] = predicted(["--model-dir", str(trial_dir), "--input", str(tmp_path / "line.txt"), "--input-format", "text",
                       "--output", str(tmp_path / "line.jsonl")])  # .txt is CoNLL for this task: its files are
    assert len(row["words"]) == len(line.split())
    assert all(line[e["start"]:e["end"]] == e["text"] for e in row["entities"])  # spans in the line itself
    # U+001C-U+001F are whitespace to str.split, not to Unicode (nor to the SavedModel); U+00A0 and U+3000 are both
    # and U+200B alone is a word the tokenizer drops whole: one [UNK] with a tag of its own (chunking.featurize)
    odd = "Rockwell\x1cInternational Corp.\u00a0said\u3000it signed \u200b a\x1ftentative agreement ."
    sentences = [" ".join(sentence.words) for sentence in split.examples[:12]] + [line, odd]
    (tmp_path / "lines.txt").write_text("\n".join(sentences) + "\n")
    rows = predicted(["--model-dir", str(trial_dir), "--input", str(tmp_path / "lines.txt"), "--input-format", "text",
                      "--output", str(tmp_path / "lines.jsonl")])
    (tmp_path / "sentences.json").write_text(json.dumps(sentences))
    subprocess.run([sys.executable, "-c", FRESH_TAGGER, str(exported["phrases"]), str(tmp_path / "sentences.json"),
                    str(tmp_path / "served.npz")], check=True, capture_output=True, cwd=tmp_path,
                   env={**os.environ, "PYTHONPATH": ""})
    served = dict(np.load(tmp_path / "served.npz"))  # a process with TensorFlow and tensorflow_text only
    plain = sentences[:-1]  # the reference offsets split words as SQuAD does, which U+00A0 does not break
    embedded = tf.saved_model.load(str(exported["phrases"])).signatures["embed"](text=tf.constant(plain))
    assert_embed_offsets(Tokenizer(root / "vocab.txt"), {1: plain},  # tagging inputs are segment 1
                         {key: value.numpy() for key, value in embedded.items()})
    assert rows[-1]["words"] == ["Rockwell\x1cInternational", "Corp.", "said", "it", "signed", "\u200b",
                                 "a\x1ftentative", "agreement", "."]
    odd_tokens = tf.saved_model.load(str(exported["phrases"])).signatures["embed"](text=tf.constant([odd]))
    unk = odd.index("\u200b")
    spans = list(zip(odd_tokens["token_start"].numpy()[0].tolist(), odd_tokens["token_end"].numpy()[0].tolist()))
    assert (unk, unk + 1) in spans and spans[spans.index((unk, unk + 1)) + 1][0] == unk + 2  # then "a\x1ftentative"
    (tmp_path / "odd.txt").write_text(odd + "\n")
    [row] = predicted(["--model-dir", str(trial_dir), "--input", str(tmp_path / "odd.txt"), "--input-format", "text",
                       "--embeddings", "--output", str(tmp_path / "odd.jsonl")])  # predict.py's offsets: the same
    assert [(t["start"], t["end"]) for t in row["embedding"]["tokens"]] == [
        (None, None) if span == (-1, -1) else span for span in spans[:len(row["embedding"]["tokens"])]]
    for i, row in enumerate(rows):  # the SavedModel splits, tags and finds the entities as predict does
        words = len(row["words"])
        assert int((served["word_start"][i] >= 0).sum()) == words
        assert [t or None for t in served["tags"][i][:words].tolist()] == row["tags"]
        found = [(kind, int(start), int(end)) for kind, start, end in zip(
            served["entity_type"][i].tolist(), served["entity_start"][i], served["entity_end"][i]) if start >= 0]
        assert found == [(e["type"], e["start"], e["end"]) for e in row["entities"]]


def test_mean_embedding_is_the_encoders_output_over_real_tokens(trained, tmp_path):
    root, models = trained
    config, trial_dir = models["reviews"]
    texts = ["a gem of a film .", "dull , long and loud , with nothing to say about anything at all ."]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    rows = predicted(["--model-dir", str(trial_dir), "--input", str(tmp_path / "in.txt"), "--embeddings",
                      "--output", str(tmp_path / "out.jsonl")])
    predictor = Predictor(trial_dir)
    for text, row in zip(texts, rows):
        pieces = predictor.tokenizer.tokenize([text]).flat_values.numpy().tolist()
        ids = np.array([[predictor.tokenizer.cls_id, *pieces, predictor.tokenizer.sep_id]], np.int32)
        sequence = predictor.encoder(ids, np.ones_like(ids), np.zeros_like(ids), training=False).numpy()[0]
        np.testing.assert_allclose(row["embedding"]["mean"], sequence.mean(0), atol=1e-5)
        np.testing.assert_allclose(row["embedding"]["cls"], sequence[0], atol=1e-5)
        tokens = row["embedding"]["tokens"]  # each token's vector and its characters in the text
        np.testing.assert_allclose([token["vector"] for token in tokens], sequence, atol=1e-5)
        want_ids, starts, ends = expected_offsets(predictor.tokenizer, text)
        assert [token["token"] for token in tokens] == ["[CLS]", *predictor.tokenizer.convert_ids_to_tokens(want_ids),
                                                        "[SEP]"]
        assert [(token["start"], token["end"]) for token in tokens] == [(None, None), *zip(starts, ends), (None, None)]
    config, trial_dir = models["phrases"]  # a tagger: the characters of each word's tokens in the line
    line = "Rockwell International Corp. said it signed  a tentative agreement ."
    (tmp_path / "line.txt").write_text(line + "\n")
    [row] = predicted(["--model-dir", str(trial_dir), "--input", str(tmp_path / "line.txt"), "--input-format", "text",
                       "--embeddings", "--output", str(tmp_path / "line.jsonl")])
    tokens = row["embedding"]["tokens"][1:-1]
    assert [line[t["start"]:t["end"]].lower() for t in tokens] == [t["token"].lstrip("#") for t in tokens]
    assert {t["start"] for t in tokens} >= {line.index(word) for word in ("signed", "tentative", "agreement")}


def test_bad_input_stops_with_one_error_and_no_output(trained, tmp_path, capsys, monkeypatch):
    root, models = trained
    trial_dir = str(models["reviews"][1])
    output = tmp_path / "out.jsonl"

    def error(args) -> str:
        assert predict.main(["--model-dir", trial_dir, "--output", str(output), *args]) == 2
        return capsys.readouterr().err.strip()

    (tmp_path / "bad.csv").write_text("ref,text\nr1,fine\n")
    assert "bad.csv:1: no column 'sentence' for the text" in error(["--input", str(tmp_path / "bad.csv")])
    (tmp_path / "gaps.txt").write_text("fine film\n\ndull film\n")
    assert "gaps.txt:2: empty line (pass --skip-empty" in error(["--input", str(tmp_path / "gaps.txt")])
    assert not output.exists() and not list(tmp_path.glob(".out.jsonl.partial*"))  # nothing half-written
    assert predict.main(["--model-dir", trial_dir, "--output", str(output), "--input", str(tmp_path / "gaps.txt"),
                         "--skip-empty"]) == 0
    assert len(output.read_text().splitlines()) == 2 and "1 empty line(s) skipped" in capsys.readouterr().err
    assert "exists; pass --overwrite" in error(["--input", str(tmp_path / "gaps.txt")])
    assert predict.main(["--model-dir", trial_dir, "--output", str(tmp_path), "--overwrite",
                         "--input", str(tmp_path / "gaps.txt")]) == 2
    assert f"--output {tmp_path} is a directory" in capsys.readouterr().err
    def no_space(*args):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / ".full.jsonl.partial"))
    monkeypatch.setattr(Predictor, "rows", no_space)  # the disk fills while predictions are written
    assert predict.main(["--model-dir", trial_dir, "--output", str(tmp_path / "full.jsonl"),
                         "--input", str(tmp_path / "gaps.txt"), "--skip-empty"]) == 1
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and f"no space left on the device for {tmp_path / 'full.jsonl'}" in error
    assert not list(tmp_path.glob("*full.jsonl*"))  # no output, no partial file
    shutil.copytree(root / "models" / "tiny", tmp_path / "pretrained", ignore=shutil.ignore_patterns("finetuning*"))
    with pytest.raises(InputError, match="holds no fine-tuned model"):
        Predictor(tmp_path / "pretrained")


def test_a_saved_model_predicts_as_its_trial_dir(trained, exported, tmp_path, capsys):
    """predict.py --model-dir takes a SavedModel exported from a trial: the same labels, tags and
    entities, probabilities within 1e-5; a SavedModel of another task, or of no fine-tuned task,
    and a dir without a fine-tuned model each get one clear error."""
    root, models = trained
    inputs = {"reviews": ["--input", str(root / "finetuning_data/reviews/dev.csv")],
              "phrases": ["--input", str(root / "finetuning_data/chunk/dev.txt"), "--input-format", "conll"]}
    for name, args in inputs.items():
        trial_dir = models[name][1]
        from_trial = predicted(["--model-dir", str(trial_dir), *args, "--output", str(tmp_path / f"{name}.jsonl")])
        from_saved = predicted(["--model-dir", str(exported[name]), *args, "--output",
                                str(tmp_path / f"{name}_saved.jsonl")])
        assert len(from_saved) == len(from_trial) > 0
        for saved, trial in zip(from_saved, from_trial):
            probabilities = (saved.pop("probabilities", None), trial.pop("probabilities", None))
            assert saved == trial  # ids, labels; words, tags and entities
            if probabilities[0] is not None:
                np.testing.assert_allclose(list(probabilities[0].values()), list(probabilities[1].values()),
                                           atol=1e-5)
    tf.saved_model.save(tf.Module(), str(tmp_path / "plain_saved_model"))
    capsys.readouterr()  # the progress lines so far
    output = ["--input", str(root / "finetuning_data/reviews/dev.csv"), "--output", str(tmp_path / "never.jsonl")]
    for model_dir, task, message in (
            (exported["reviews"], "phrases", f"--task phrases: {exported['reviews']} is a SavedModel of task reviews "
                                             f"(a classification task) only"),
            (tmp_path / "plain_saved_model", None, "is a SavedModel without a fine-tuned task"),
            (tmp_path, None, f"{tmp_path} holds no fine-tuned model")):
        task_args = ["--task", task] if task else []
        assert predict.main(["--model-dir", str(model_dir), *task_args, *output]) == 2
        error = capsys.readouterr().err.strip()
        assert message in error and error.count("\n") == 0, error
    assert not (tmp_path / "never.jsonl").exists()
