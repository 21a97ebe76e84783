"""The SQuAD SavedModel (finetune.qa_server): reloaded in a fresh process that imports TensorFlow
and tensorflow-text only, it gives the answers, spans and null odds of predict.py and of the run's
own dev predictions, for SQuAD 2.0 and 1.1, on contexts long enough to be cut into windows."""

import io
import json

import numpy as np
import pytest

import convert_checkpoint
import predict
from electra_tf.tokenization import Tokenizer
from finetune.config import FinetuningConfig
from finetune.runner import run
from process_helpers import serve_in_fresh_process
from test_token_offsets import assert_embed_offsets

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


def test_fresh_process_answers_as_predict_and_the_run(trained, tmp_path):
    task, config, trial_dir, questions, answers, odds = trained
    (tmp_path / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    assert predict.main(["--model-dir", str(trial_dir), "--input", str(tmp_path / "questions.jsonl"),
                         "--output", str(tmp_path / "out.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert convert_checkpoint.main(["saved-model", "--model-dir", str(trial_dir), "--output-dir",
                                    str(tmp_path / "served")]) == 0
    served = serve_in_fresh_process(tmp_path / "served", {"question": [q["question"] for q in questions],
                                                          "context": [q["context"] for q in questions]}, tmp_path)
    assert served["answer"].tolist() == [row["answer"] for row in rows] == [answers[q["id"]] for q in questions]
    assert served["start"].tolist() == [row["start"] for row in rows]
    assert served["end"].tolist() == [row["end"] for row in rows]
    windows = [len(q["context"].split()) > 60 for q in questions]
    assert sum(windows) > QUESTIONS // 2  # most contexts take more than one window
    assert sum(answer != "empty" for answer in served["answer"]) > QUESTIONS // 2
    texts = {0: [q["question"] for q in questions], 1: [q["context"] for q in questions]}
    embedded = serve_in_fresh_process(tmp_path / "served", {"question": texts[0], "context": texts[1]}, tmp_path,
                                      "embed")  # each question's first window
    assert_embed_offsets(Tokenizer(trial_dir / "vocab.txt"), texts, embedded)
    for question, answer, start, end in zip(questions, served["answer"], served["start"], served["end"]):
        assert answer == "empty" or question["context"][start:end] == answer
    if task == "squad":
        np.testing.assert_allclose(served["null_odds"], [row["null_odds"] for row in rows], atol=1e-5, rtol=0)
        np.testing.assert_allclose(served["null_odds"], [odds[q["id"]] for q in questions], atol=1e-5, rtol=0)
        assert served["abstains"].tolist() == [row["abstains"] for row in rows]
        assert served["abstains"].tolist() == list(served["null_odds"] > config.qa_na_threshold)
    else:
        assert sorted(served) == ["answer", "end", "score", "start"]
