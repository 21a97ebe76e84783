"""SQuAD fine-tuning runs end to end (run_finetuning's `run` on the real files of ../shared/data/squad):
a tiny model trains on SQuAD 1.1 and its answers are scored; SQuAD 2.0's test answers are written."""

import json

import numpy as np

from finetune.config import FinetuningConfig
from finetune.runner import run


def test_run_finetuning_squadv1_end_to_end(shared_data, vocab_file, tmp_path):
    (tmp_path / "vocab.txt").symlink_to(vocab_file)
    (tmp_path / "finetuning_data" / "squadv1").mkdir(parents=True)
    for split, name in (("train", "train-v1.1-subset-44articles.json"), ("dev", "dev-v1.1.json")):
        (tmp_path / "finetuning_data" / "squadv1" / f"{split}.json").symlink_to(shared_data / "squad" / name)
    preset = FinetuningConfig.from_hparams("tiny", tmp_path, {"task_names": ["SQuADv1"], "model_size": "tiny"})
    assert (preset.max_seq_length, preset.num_train_epochs) == (512, 2.0)  # the original's squad presets
    config = FinetuningConfig.from_hparams("tiny", tmp_path, dict(
        task_names=["squadv1"], model_size="tiny", random_init=True, max_seq_length=128, max_examples=24,
        train_batch_size=8, eval_batch_size=16, num_train_epochs=1.0, iterations_per_loop=2, learning_rate=1e-3))
    with open(tmp_path / "log.txt", "w") as stream:
        document = run(config, stream)
    scores = document["trials"][0]["squadv1"]
    assert list(scores)[:3] == ["f1", "exact_match", "loss"] and 0.0 <= scores["f1"] <= 100.0
    assert np.isfinite(scores["loss"])
    qa_dir = tmp_path / "models" / "tiny" / "results" / "squadv1_qa"
    predictions = json.loads((qa_dir / "squadv1_preds.json").read_text())
    assert len(predictions) == 24 and json.loads((qa_dir / "squadv1_eval.json").read_text())["f1"] == scores["f1"]
    # every answer is a non-empty span of its own paragraph (whitespace aside: the original joins tokens by spaces)
    contexts = {qa["id"]: " ".join(paragraph["context"].split())
                for article in json.loads((shared_data / "squad" / "dev-v1.1.json").read_text())["data"]
                for paragraph in article["paragraphs"] for qa in paragraph["qas"]}
    for question, answer in predictions.items():
        assert answer.strip() and " ".join(answer.split()) in contexts[question], (question, answer)


def test_write_test_outputs_answers_every_squad_v2_test_question(shared_data, vocab_file, tmp_path):
    """With write_test_outputs, a SQuAD 2.0 run answers every question of finetuning_data/squad/
    test.json (max_examples does not cut it: an answer file needs them all) into
    results/squad_qa/squad_test_preds.json; its questions carry no answers."""
    (tmp_path / "vocab.txt").symlink_to(vocab_file)
    article = json.loads((shared_data / "squad" / "dev-v2.0.json").read_text())["data"][0]
    for index, paragraph in enumerate(article["paragraphs"][:3]):
        for qa in paragraph["qas"]:
            qa.pop("is_impossible"), qa.pop("plausible_answers", None), qa.pop("answers")
            if index == 0:
                qa["answers"] = []  # blanked labels without is_impossible: a test file's are not read
    test = {"version": "v2.0", "data": [{"title": article["title"], "paragraphs": article["paragraphs"][:3]}]}
    (tmp_path / "finetuning_data" / "squad").mkdir(parents=True)
    (tmp_path / "finetuning_data" / "squad" / "test.json").write_text(json.dumps(test))
    config = FinetuningConfig.from_hparams("tiny", tmp_path, dict(
        task_names=["squad"], model_size="tiny", random_init=True, do_train=False, do_eval=False,
        write_test_outputs=True, max_seq_length=128, max_examples=5, eval_batch_size=16))
    with open(tmp_path / "log.txt", "w") as stream:
        document = run(config, stream)
    written = tmp_path / "models" / "tiny" / "results" / "squad_qa" / "squad_test_preds.json"
    assert document["test_predictions"]["files"] == [str(written)]
    answers = json.loads(written.read_text())
    questions = [qa["id"] for paragraph in test["data"][0]["paragraphs"] for qa in paragraph["qas"]]
    assert sorted(answers) == sorted(questions) and len(questions) > 5
    contexts = " ".join(paragraph["context"] for paragraph in test["data"][0]["paragraphs"])
    assert all(answer == "" or answer in contexts for answer in answers.values())
