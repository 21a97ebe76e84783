"""The SQuAD SavedModel (finetune.qa_server): reloaded in a fresh process that imports TensorFlow
and tensorflow-text only, it gives the answers, spans and null odds of predict.py and of the run's
own dev predictions, on contexts long enough to be cut into windows (SQuAD 2.0; SQuAD 1.1's server,
the same module without null odds, is called in this process without the save and reload).
predict.py on SQuAD (answers in input order, spans, null odds, the first window's token offsets)
is checked here too, on the same fine-tuned model."""

import io
import json

import numpy as np
import pytest
import tensorflow as tf

import convert_checkpoint
import predict
from electra_tf.tokenization import Tokenizer
from finetune.config import FinetuningConfig
from finetune.runner import run
from finetune.saved_model import build_server
from process_helpers import served_arrays, serve_signatures_in_fresh_process
from test_token_offsets import assert_embed_offsets, expected_offsets

QUESTIONS = 24
BASE = dict(model_size="tiny", random_init=True, train_batch_size=16, eval_batch_size=32, max_examples=QUESTIONS,
            num_train_epochs=1.0, iterations_per_loop=100, learning_rate=1e-3, max_seq_length=96, doc_stride=48,
            max_query_length=24)
FILES = {"squad": ("train-v2.0-subset-10articles.json", "dev-v2.0.json"),
         "squadv1": ("train-v1.1-subset-44articles.json", "dev-v1.1.json")}


def dev_questions(path, count: int) -> list:
    rows = []
    for article in json.loads(path.read_text(encoding="utf-8"))["data"]:
        for paragraph in article["paragraphs"]:
            rows += [{"id": qa["id"], "question": qa["question"], "context": paragraph["context"]}
                     for qa in paragraph["qas"]]
    return rows[:count]


@pytest.fixture(scope="module", params=["squad", "squadv1"])
def trained(request, tmp_path_factory, shared_data, vocab_file):
    """A tiny model fine-tuned on the task; its run's dev answers (and null odds), its trial dir."""
    task = request.param
    root = tmp_path_factory.mktemp(task)
    data = root / "finetuning_data" / task
    data.mkdir(parents=True)
    for split, name in zip(("train", "dev"), FILES[task]):
        (data / f"{split}.json").symlink_to(shared_data / "squad" / name)
    (root / "vocab.txt").symlink_to(vocab_file)
    config = FinetuningConfig.from_hparams("tiny", str(root), {**BASE, "task_names": [task]})
    run(config, io.StringIO())
    written = root / "models" / "tiny" / "results" / f"{task}_qa"
    answers = json.loads((written / f"{task}_preds.json").read_text())
    odds = json.loads((written / f"{task}_null_odds.json").read_text()) if task == "squad" else None
    questions = dev_questions(shared_data / "squad" / FILES[task][1], QUESTIONS)
    return task, config, root / "models/tiny/finetuning_models" / f"{task}_model_1", questions, answers, odds


def test_the_server_answers_as_predict_and_the_run(trained, tmp_path):
    task, config, trial_dir, questions, answers, odds = trained
    (tmp_path / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    assert predict.main(["--model-dir", str(trial_dir), "--input", str(tmp_path / "questions.jsonl"),
                         "--output", str(tmp_path / "out.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [row["id"] for row in rows] == [q["id"] for q in questions] == list(answers)  # input order, with ids
    for row, question in zip(rows, questions):
        assert row["answer"] == answers[row["id"]]
        assert row["answer"] == "empty" or question["context"][row["start"]:row["end"]] == row["answer"]
    texts = {0: [q["question"] for q in questions], 1: [q["context"] for q in questions]}
    inputs = {"question": texts[0], "context": texts[1]}
    if task == "squad":
        assert convert_checkpoint.main(["saved-model", "--model-dir", str(trial_dir), "--output-dir",
                                        str(tmp_path / "served")]) == 0
        outputs = serve_signatures_in_fresh_process(tmp_path / "served", {"serving_default": inputs, "embed": inputs},
                                                    tmp_path)  # one process loads the SavedModel for both
        served, embedded = outputs["serving_default"], outputs["embed"]  # embed: each question's first window
    else:  # SQuAD 1.1's server in this process: saving and reloading it run the code SQuAD 2.0's case checks
        server = build_server(trial_dir)
        served, embedded = (served_arrays(function(**{name: tf.constant(values) for name, values in inputs.items()}))
                            for function in (server.serve, server.embed))
    assert served["answer"].tolist() == [row["answer"] for row in rows] == [answers[q["id"]] for q in questions]
    assert served["start"].tolist() == [row["start"] for row in rows]
    assert served["end"].tolist() == [row["end"] for row in rows]
    windows = [len(q["context"].split()) > 60 for q in questions]
    assert sum(windows) > QUESTIONS // 2  # most contexts take more than one window
    assert sum(answer != "empty" for answer in served["answer"]) > QUESTIONS // 2
    assert_embed_offsets(Tokenizer(trial_dir / "vocab.txt"), texts, embedded)
    for question, answer, start, end in zip(questions, served["answer"], served["start"], served["end"]):
        assert answer == "empty" or question["context"][start:end] == answer
    if task == "squad":
        for row in rows:
            assert row["null_odds"] == pytest.approx(odds[row["id"]], abs=1e-4)
            assert row["abstains"] == (row["null_odds"] > config.qa_na_threshold)
        assert_predict_embeds_the_first_window(trial_dir, tmp_path, questions[0])
        np.testing.assert_allclose(served["null_odds"], [row["null_odds"] for row in rows], atol=1e-5, rtol=0)
        np.testing.assert_allclose(served["null_odds"], [odds[q["id"]] for q in questions], atol=1e-5, rtol=0)
        assert served["abstains"].tolist() == [row["abstains"] for row in rows]
        assert served["abstains"].tolist() == list(served["null_odds"] > config.qa_na_threshold)
    else:
        assert sorted(served) == ["answer", "end", "score", "start"]


def assert_predict_embeds_the_first_window(trial_dir, tmp_path, question):
    """predict.py --embeddings on a question: its first window's tokens, the question's then a
    prefix of the context's, each at its characters in its text (as the SQuAD featurizer aligns them)."""
    (tmp_path / "first.jsonl").write_text(json.dumps(question) + "\n")
    assert predict.main(["--model-dir", str(trial_dir), "--embeddings", "--input", str(tmp_path / "first.jsonl"),
                         "--output", str(tmp_path / "embedded.jsonl")]) == 0
    [row] = [json.loads(line) for line in (tmp_path / "embedded.jsonl").read_text().splitlines()]
    tokens = row["embedding"]["tokens"]
    tokenizer = Tokenizer(trial_dir / "vocab.txt")
    in_question = [(t["start"], t["end"]) for t in tokens if t["segment"] == 0 and t["start"] is not None]
    in_context = [(t["start"], t["end"]) for t in tokens if t["segment"] == 1 and t["start"] is not None]
    assert in_question == list(zip(*expected_offsets(tokenizer, question["question"])[1:]))
    assert in_context == list(zip(*expected_offsets(tokenizer, question["context"])[1:]))[:len(in_context)]
    assert 0 < len(in_context) < len(expected_offsets(tokenizer, question["context"])[0])  # a window of it
