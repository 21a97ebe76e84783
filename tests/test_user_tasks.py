"""The user's own tasks (`tasks` in --hparams): the general types reproduce the built-in presets
they generalise (SST-2 as a CSV classification task predicts what `sst` predicts; CoNLL-2000 as a
tagging task what `chunk` predicts), their metrics equal independent computations, their LiteRT
exports serve what the SavedModel and the run give (a tagger's is refused), a classifier and a
tagger train in one run, and test predictions carry the rows' ids."""

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as sk

import convert_checkpoint
from electra_tf.training.interruption import Interruption
from finetune import chunking
from finetune.config import FinetuningConfig
from finetune.inputs import Features, pad_batch
from finetune.litert import LiteServer
from finetune.multitask import MixedFeatures, batch_spec, mixed_batch
from finetune.runner import Trial, run
from finetune.task_data import load_task_data, make_tokenizer
from finetune.tasks import get_task
from process_helpers import serve_in_fresh_process

ROWS = 64
BASE = dict(model_size="tiny", random_init=True, max_seq_length=40, train_batch_size=16, eval_batch_size=32,
            max_examples=ROWS, num_train_epochs=1.0, iterations_per_loop=100, learning_rate=1e-3, seed=3)
REVIEWS = {"type": "classification", "format": "csv", "train": "reviews/train.csv", "dev": "reviews/dev.csv",
           "text": "sentence", "label": "sentiment"}
PHRASES = {"type": "tagging", "format": "conll", "train": "chunk/train.txt", "dev": "chunk/dev.txt"}


def _tsv_rows(path, limit):
    header, *rows = path.read_text(encoding="utf-8").split("\n")
    return header.split("\t"), [row.split("\t") for row in rows if row][:limit]


def _chunk_types(sentence) -> list:
    return sorted({tag[2:] for tag in sentence.tags if tag != "O"})


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, shared_data, vocab_file):
    """finetuning_data/ with SST-2, STS-B and chunk (train.txt, dev.txt = CoNLL's test.txt) linked,
    and user files written from the same rows: reviews/*.csv (SST-2), similarity/*.csv (STS-B),
    topics/*.jsonl (CoNLL-2000 sentences labelled with the chunk types they hold)."""
    root = tmp_path_factory.mktemp("user_tasks")
    data = root / "finetuning_data"
    for folder in ("SST-2", "STS-B"):
        (data / folder).mkdir(parents=True)
        for split in ("train", "dev"):
            (data / folder / f"{split}.tsv").symlink_to(shared_data / "glue" / folder / f"{split}.tsv")
    (data / "chunk").mkdir()
    (data / "chunk" / "train.txt").symlink_to(shared_data / "conll2000" / "train.txt")
    (data / "chunk" / "dev.txt").symlink_to(shared_data / "conll2000" / "test.txt")
    (root / "vocab.txt").symlink_to(vocab_file)
    for folder, source, columns in (("reviews", "SST-2", ("sentence", "sentiment")),
                                    ("similarity", "STS-B", ("first", "second", "score"))):
        (data / folder).mkdir()
        for split in ("train", "dev"):
            header, rows = _tsv_rows(shared_data / "glue" / source / f"{split}.tsv", 2 * ROWS)
            with open(data / folder / f"{split}.csv", "w", newline="", encoding="utf-8") as out:
                writer = csv.writer(out)
                writer.writerow(columns)
                writer.writerows([row[0], row[1]] if source == "SST-2" else row[-3:] for row in rows)
    (data / "topics").mkdir()
    for split, source in (("train", "train.txt"), ("dev", "test.txt")):
        sentences = chunking.read_sentences(shared_data / "conll2000" / source, 2 * ROWS)
        lines = [json.dumps({"text": " ".join(s.words), "topics": _chunk_types(s)}) for s in sentences]
        (data / "topics" / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def config_of(data_dir, **values) -> FinetuningConfig:
    return FinetuningConfig.from_hparams("tiny", str(data_dir), {**BASE, **values})


def trained(config):
    """(dev scores, dev predictions of the first task) of one trial."""
    data = load_task_data(config, make_tokenizer(config))
    trial = Trial(config, data, 1, io.StringIO())
    trial.initialise()
    with Interruption(io.StringIO()) as interrupt:
        scores = trial.train(interrupt)
    return scores, trial.predict(data.dev[0])[0], data


def served_by_litert(model_dir, output_dir, text_a, text_b=None) -> dict:
    """The outputs of a trial's LiteRT export (convert_checkpoint.py litert) on raw texts."""
    assert convert_checkpoint.main(["litert", "--model-dir", str(model_dir), "--output-dir", str(output_dir)]) == 0
    return LiteServer(output_dir)(text_a, text_b)


def test_sst_as_a_csv_classification_task_predicts_what_sst_predicts(data_dir):
    built_in, built_in_predictions, _ = trained(config_of(data_dir, task_names=["sst"]))
    user, user_predictions, data = trained(config_of(data_dir, task_names=["reviews"], tasks={"reviews": REVIEWS}))
    assert data.tasks[0].labels == ("0", "1")  # SST-2's, in GLUE's order
    np.testing.assert_array_equal(user_predictions, built_in_predictions)
    assert user["reviews"]["accuracy"] == built_in["sst"]["accuracy"]
    labels = np.array([e.label for e in data.dev[0].examples])
    assert user["reviews"]["macro_f1"] == pytest.approx(100 * sk.f1_score(labels, user_predictions, average="macro"))
    assert user["reviews"]["mcc"] == pytest.approx(100 * sk.matthews_corrcoef(labels, user_predictions))
    assert user["reviews"]["1/recall"] == pytest.approx(100 * sk.recall_score(labels, user_predictions))


def test_conll_as_a_tagging_task_predicts_what_chunk_predicts(data_dir):
    built_in, built_in_predictions, _ = trained(config_of(data_dir, task_names=["chunk"], conlleval_chunks=True))
    user, user_predictions, data = trained(config_of(data_dir, task_names=["phrases"], tasks={"phrases": PHRASES}))
    assert len(data.tasks[0].tags) == 42  # the BIOES tags of both files, as chunk's
    assert all(np.array_equal(a, b) for a, b in zip(user_predictions, built_in_predictions))
    assert list(user["phrases"])[:3] == ["f1", "precision", "recall"]  # the main score first
    for metric in ("f1", "precision", "recall"):
        assert user["phrases"][metric] == built_in["chunk"][metric]
    assert {"NP/f1", "VP/recall", "PP/precision"} <= set(user["phrases"])  # per-type scores too


def test_multilabel_and_regression_metrics_equal_independent_ones(data_dir):
    topics = {"type": "multilabel", "format": "jsonl", "train": "topics/train.jsonl", "dev": "topics/dev.jsonl",
              "text": "text", "label": "topics", "threshold": 0.4}
    config = config_of(data_dir, task_names=["topics"], tasks={"topics": topics}, num_train_epochs=3.0,
                       learning_rate=3e-3)
    scores, probabilities, data = trained(config)
    task = data.tasks[0]
    gold = np.stack([e.label for e in data.dev[0].examples]) > 0.5
    predicted = probabilities >= 0.4
    assert probabilities.shape == gold.shape == (ROWS, len(task.labels)) and "NP" in task.labels
    assert scores["topics"]["micro_f1"] == pytest.approx(100 * sk.f1_score(gold, predicted, average="micro",
                                                                           zero_division=0))
    assert scores["topics"]["macro_f1"] == pytest.approx(100 * sk.f1_score(gold, predicted, average="macro",
                                                                           zero_division=0))
    assert convert_checkpoint.main(["saved-model", "--model-dir", config.model_dir(1), "--output-dir",
                                    str(data_dir / "topics_served")]) == 0
    outputs = serve_in_fresh_process(data_dir / "topics_served", {"text_a": [e.text_a for e in data.dev[0].examples]},
                                     data_dir)  # TensorFlow and tensorflow-text alone
    np.testing.assert_allclose(outputs["probabilities"], probabilities, atol=1e-5)
    assert outputs["labels"].tolist() == [[name if p >= 0.4 else "" for name, p in zip(task.labels, row)]
                                          for row in probabilities]
    assert 0 < (probabilities >= 0.4).sum() < probabilities.size  # labels both over and under the threshold
    lite = served_by_litert(config.model_dir(1), data_dir / "topics_lite", [e.text_a for e in data.dev[0].examples])
    assert sorted(lite) == ["labels", "probabilities"]
    np.testing.assert_allclose(lite["probabilities"], outputs["probabilities"], atol=1e-5)
    assert lite["labels"].tolist() == outputs["labels"].tolist()
    np_index = task.labels.index("NP")
    assert scores["topics"]["NP/f1"] == pytest.approx(100 * sk.f1_score(gold[:, np_index], predicted[:, np_index]))

    similarity = {"type": "regression", "format": "csv", "train": "similarity/train.csv",
                  "dev": "similarity/dev.csv", "text": "first", "text_b": "second", "label": "score", "scale": 5}
    config = config_of(data_dir, task_names=["similarity"], tasks={"similarity": similarity})
    scores, values, data = trained(config)
    targets = np.array([e.label for e in data.dev[0].examples])
    assert targets.max() <= 1.0 and targets.max() > 0.8  # learned as score / 5
    assert scores["similarity"]["pearson"] == pytest.approx(100 * stats.pearsonr(targets, values)[0], abs=1e-6)
    assert scores["similarity"]["spearman"] == pytest.approx(100 * stats.spearmanr(targets, values)[0], abs=1e-6)
    assert scores["similarity"]["mse"] == pytest.approx(float(np.mean((targets - values) ** 2)))
    examples = data.dev[0].examples
    lite = served_by_litert(config.model_dir(1), data_dir / "similarity_lite", [e.text_a for e in examples],
                            [e.text_b for e in examples])
    assert sorted(lite) == ["score"]
    np.testing.assert_allclose(lite["score"], 5 * values, atol=5e-5)  # on the task's own scale


def test_mixed_batches_of_glue_tasks_equal_padding_their_concatenation(data_dir):
    config = config_of(data_dir, task_names=["sst", "sts"], max_examples=20)
    data = load_task_data(config, make_tokenizer(config))
    assert isinstance(data.train, MixedFeatures)
    indices = np.random.default_rng(0).permutation(len(data.train))[:16]
    mixed = mixed_batch(data.train, indices, None, batch_spec(data.tasks))
    concatenated = Features([t for p in data.train.parts for t in p.token_ids],
                            [s for p in data.train.parts for s in p.segment_ids],
                            *(np.concatenate([getattr(p, key) for p in data.train.parts])
                              for key in ("task_id", "label_ids", "targets")))
    padded = pad_batch(concatenated, indices)
    assert mixed.keys() == padded.keys()
    for key in padded:
        np.testing.assert_array_equal(mixed[key], padded[key], err_msg=key)


def test_a_classifier_and_a_tagger_train_in_one_run(data_dir, capsys):
    config = config_of(data_dir, task_names=["my_reviews", "phrases"], tasks={"my_reviews": REVIEWS, "phrases": PHRASES},
                       num_trials=2, keep_best_model=True, keep_all_models=False)
    data = load_task_data(config, make_tokenizer(config))
    batch = data.train_batch(data.train, np.arange(ROWS - 4, ROWS + 4))  # 4 reviews, then 4 sentences
    assert batch["task_id"].tolist() == [0] * 4 + [1] * 4
    assert batch["labels_mask"][:4].sum() == 0 and batch["labels_mask"][4:].sum() > 0  # the reviews tag nothing
    document = run(config, io.StringIO())
    assert [set(trial) for trial in document["trials"]] == [{"my_reviews", "phrases"}] * 2
    assert document["tasks"] == ["my_reviews", "phrases"]  # a name's own "_" kept
    assert document["aggregate"]["phrases"]["f1"]["n"] == 2
    assert [os.path.isdir(config.model_dir(trial)) for trial in (1, 2)] == [False, True]  # the last one is kept
    assert 0 <= document["aggregate"]["my_reviews"]["accuracy"]["median"] <= 100
    refused = data_dir / "phrases_lite"  # a tagger reads every token: a LiteRT export serves [CLS] heads
    assert convert_checkpoint.main(["litert", "--model-dir", config.model_dir(2), "--task", "phrases",
                                    "--output-dir", str(refused)]) != 0
    assert "task phrases is a tagging task; a LiteRT export serves tasks whose head reads [CLS] alone" \
        in capsys.readouterr().err
    assert not refused.exists()


def test_a_user_tasks_test_predictions_carry_the_rows_ids(data_dir, shared_data):
    tickets = data_dir / "finetuning_data" / "tickets"
    tickets.mkdir()
    header, rows = _tsv_rows(shared_data / "glue" / "SST-2" / "dev.tsv", 40)
    for split, part in (("train", rows[:30]), ("dev", rows[30:])):  # dev has no id column: only test needs one
        (tickets / f"{split}.tsv").write_text(("ref\ttext\tmood\n" if split == "train" else "text\tmood\n") + "".join(
            (f"r{i}\t" if split == "train" else "") + f"{text}\t{'happy' if label == '1' else 'sad'}\n"
            for i, (text, label) in enumerate(part)))
    # a blank id: the row's position stands in; blank labels: a test file's rows are to be predicted
    (tickets / "test.tsv").write_text("ref\ttext\tmood\nt1\tA gem .\t\n\tDull and long .\t\n")
    spec = {"type": "classification", "format": "tsv", "train": "tickets/train.tsv", "dev": "tickets/dev.tsv",
            "test": "tickets/test.tsv", "text": "text", "label": "mood", "id": "ref"}
    config = config_of(data_dir, task_names=["tickets"], tasks={"tickets": spec}, write_test_outputs=True,
                       results_dir=str(data_dir / "ticket_results"))
    document = run(config, io.StringIO())
    path = data_dir / "ticket_results" / "test_predictions" / "tickets.jsonl"
    assert document["test_predictions"]["files"] == [str(path)]
    written = [json.loads(line) for line in path.read_text().splitlines()]
    assert [row["id"] for row in written] == ["t1", 1] and {row["label"] for row in written} <= {"happy", "sad"}
    assert (data_dir / "ticket_results" / "tickets_results.txt").is_file()


def test_a_tagger_without_an_o_tag_writes_test_predictions_with_their_ids(data_dir, shared_data):
    """Every word an entity (part-of-speech tags as one-word entities: no O anywhere): the test file's
    sentences, which have no tags, featurize all the same; JSONL ids reach the predictions as the
    file gives them (a number stays a number) and a blank line is left out, as in train and dev."""
    folder = data_dir / "finetuning_data" / "pos"
    folder.mkdir()
    blocks = (shared_data / "conll2000" / "train.txt").read_text().split("\n\n")[:ROWS]  # word, POS, chunk
    sentences = [[line.split() for line in block.splitlines()] for block in blocks]
    (folder / "train.jsonl").write_text("".join(json.dumps(
        {"tokens": [word for word, _, _ in s], "tags": ["B-" + pos for _, pos, _ in s]}) + "\n" for s in sentences))
    (folder / "test.jsonl").write_text(json.dumps({"id": 7, "tokens": ["The", "cat", "sat", "."]}) + "\n\n"
                                       + json.dumps({"id": "s2", "tokens": ["Dogs", "bark"]}) + "\n")
    spec = {"type": "tagging", "format": "jsonl", "train": "pos/train.jsonl", "dev": "pos/train.jsonl",
            "test": "pos/test.jsonl"}
    config = config_of(data_dir, task_names=["pos"], tasks={"pos": spec}, write_test_outputs=True,
                       results_dir=str(data_dir / "pos_results"))
    run(config, io.StringIO())
    written = [json.loads(line) for line in (data_dir / "pos_results/test_predictions/pos.jsonl").read_text()
               .splitlines()]
    tags = load_task_data(config, make_tokenizer(config)).tasks[0].tags
    assert "O" not in tags and all(tag.startswith("S-") for tag in tags)
    assert [(row["id"], row["words"]) for row in written] == [(7, ["The", "cat", "sat", "."]),  # JSON values as given
                                                                ("s2", ["Dogs", "bark"])]
    assert all(len(row["tags"]) == len(row["words"]) and set(row["tags"]) <= set(tags) for row in written)


def test_a_tagger_reads_words_as_its_model_normalised_text(data_dir):
    """A tagging task's words go through the model's tokenizer as it is: a model pretrained on
    lower-cased text that kept its accents (`"do_strip_accents": false`, German's umlauts, say)
    sees "müller", not "muller"; the default strips them, as every model did before."""
    from electra_tf.tokenization import Tokenizer
    folder = data_dir / "finetuning_data" / "names"
    folder.mkdir()
    words = ["Herr", "Müller", "wohnt", "in", "Köln", "an", "der", "Straße", "."]
    (folder / "train.jsonl").write_text(json.dumps({"tokens": words, "tags": ["O", "B-PER", "O", "O", "B-LOC",
                                                                              "O", "O", "O", "O"]}) + "\n")
    spec = {"type": "tagging", "format": "jsonl", "train": "names/train.jsonl", "dev": "names/train.jsonl"}
    ids = {}
    for strip in (True, False):
        config = config_of(data_dir, task_names=["names"], tasks={"names": spec}, do_strip_accents=strip)
        features = load_task_data(config, make_tokenizer(config)).dev[0].features
        ids[strip] = features.token_ids[0].tolist()
        reference = Tokenizer(data_dir / "vocab.txt", strip_accents=strip)
        pieces = [reference.tokenize_batch([word])[0].tolist() for word in words]
        assert ids[strip] == [reference.cls_id, *[i for p in pieces for i in p], reference.sep_id]
        assert features.labeled_positions[0].tolist() == list(1 + np.cumsum([0] + [len(p) for p in pieces[:-1]]))
    assert ids[True] != ids[False]


def test_squad_mixes_with_a_classifier(tmp_path, shared_data, vocab_file):
    """A SQuAD task and a classification task share a run's batches: each row keeps its own keys,
    the other task's are zeros, and one training step runs on the mixed batch."""
    (tmp_path / "finetuning_data" / "squadv1").mkdir(parents=True)
    (tmp_path / "finetuning_data" / "squadv1" / "train.json").symlink_to(
        shared_data / "squad" / "train-v1.1-subset-44articles.json")
    (tmp_path / "finetuning_data" / "SST-2").symlink_to(shared_data / "glue" / "SST-2")
    (tmp_path / "vocab.txt").symlink_to(vocab_file)
    config = FinetuningConfig.from_hparams("tiny", str(tmp_path), {**BASE, "task_names": ["sst", "squadv1"],
                                                                   "max_examples": 8, "max_seq_length": 64,
                                                                   "do_eval": False})
    data = load_task_data(config, make_tokenizer(config))
    squad_rows = len(data.train.parts[1])
    batch = data.train_batch(data.train, np.array([0, 8, 1, 9]))  # sst, squad, sst, squad
    assert batch["task_id"].tolist() == [0, 1, 0, 1] and squad_rows >= 8
    assert batch["start_positions"][[0, 2]].tolist() == [0, 0] and batch["is_impossible"].shape == (4,)
    trial = Trial(config, data, 1, io.StringIO())
    loss = trial.compile_train_step(10)(batch)
    assert np.isfinite(float(loss)) and float(loss) > 0


def test_label_order_is_the_same_whatever_the_hash_seed(tmp_path):
    """The head's label order: labels of equal value ("1", "1.0", "01") by their text, NaN or
    infinite ones as strings; a set's order alone changed with PYTHONHASHSEED between runs."""
    script = ("from finetune.labels import stable_labels; "
              "print(stable_labels(['1', '1.0', '01', '2', '0']), stable_labels(['nan', '1', '0', 'inf']))")
    repo = str(Path(__file__).resolve().parents[1])
    orders = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": repo}).stdout
              for seed in ("1", "2", "3")}
    assert orders == {"('0', '01', '1', '1.0', '2') ('0', '1', 'inf', 'nan')\n"}


def test_multilabel_labels_may_be_json_numbers(tmp_path):
    """As a classification label cell takes a JSON number as its text, so does a multi-label list."""
    (tmp_path / "t.jsonl").write_text('{"text": "a", "label": [1.5, "x"]}\n{"text": "b", "label": [2]}\n')
    spec = {"type": "multilabel", "format": "jsonl", "train": "t.jsonl", "dev": "t.jsonl"}
    task = get_task("t", {"t": spec}, str(tmp_path))
    assert task.labels == ("1.5", "2", "x")
    assert [e.label.tolist() for e in task.read(None, "dev", None)] == [[1, 0, 1], [0, 1, 0]]
