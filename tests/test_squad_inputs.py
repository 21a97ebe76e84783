"""SQuAD rows as predict.py reads them (JSONL or text): answered row by row whatever their ids, bad
rows one error naming the line; and question ids unique in a file that is scored or written."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from electra_tf.errors import InputError
from electra_tf.tokenization import Tokenizer
from finetune import squad
from finetune.predict_inputs import InputSource
from finetune.tasks import get_task


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
    return Tokenizer(vocab_file, do_lower_case=True)


def test_predict_answers_rows_that_share_an_id_each_on_its_own(tokenizer, tmp_path):
    """predict.py's rows are answered row by row: two rows with one id (or a row whose id is another
    row's line number) keep their own answers; a JSON null question is an error naming the line."""
    task = get_task("squadv1")
    rows = [{"id": "q1", "question": "Who ran?", "context": "Bob ran."},
            {"id": "q1", "question": "Who swam?", "context": "Alice swam."},
            {"question": "Who sang?", "context": "Carol sang."}, {"id": "3", "question": "Who?", "context": "Dan sat."}]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    items = list(task.read_inputs(InputSource.open(str(path), None, False, task)))
    assert [row_id for row_id, _ in items] == ["q1", "q1", None, "3"]
    config = SimpleNamespace(max_seq_length=32, doc_stride=128, max_query_length=16, n_best_size=3,
                             max_answer_length=5, drop_windows_without_answer=False, answerable_classifier=False)
    examples = [example for _, example in items]
    features = task.featurize(examples, tokenizer, config, 0, "predict")
    count = len(features.token_ids)  # one window each; every beam points at the context's first token
    fetched = {"start_top_index": features.doc_offset[:, None], "start_top_log_probs": np.zeros((count, 1)),
               "end_top_index": features.doc_offset[:, None, None], "end_top_log_probs": np.zeros((count, 1, 1)),
               "null_score": np.zeros(count)}
    answers = task.prediction_rows(config, fetched, examples, features)
    assert [row["answer"] for row in answers] == ["Bob", "Alice", "Carol", "Dan"]
    path.write_text(json.dumps({"question": None, "context": "Bob ran."}) + "\n")
    with pytest.raises(InputError, match=r"in.jsonl:1: empty question or context"):
        list(task.read_inputs(InputSource.open(str(path), None, False, task)))
    path.write_text(json.dumps({"question": "Who?", "context": "\u200b \x07"}) + "\n")  # no token survives
    with pytest.raises(InputError, match=r"question .*in.jsonl:1: its context has no tokens"):
        task.featurize([e for _, e in task.read_inputs(InputSource.open(str(path), None, False, task))],
                       tokenizer, config, 0, "predict")
    (tmp_path / "in.txt").write_text("Who ran? Bob ran.\n")  # no tab between question and context
    with pytest.raises(InputError, match=r"in.txt:1: a line is a question and its context separated by a tab"):
        list(task.read_inputs(InputSource.open(str(tmp_path / "in.txt"), None, True, task)))


def test_a_dev_or_test_file_with_a_repeated_id_is_an_error(tmp_path):
    """Predictions and the official scores are keyed by question id: a repeat would mix two answers."""
    qas = [{"id": "q1", "question": question, "answers": [{"text": "Bob", "answer_start": 0}]}
           for question in ("Who ran?", "Who?")]
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"context": "Bob ran.", "qas": qas}]}]}))
    with pytest.raises(InputError, match=r"dev.json: question q1: an earlier question has the same id"):
        squad.read_examples(path, v2=False)
    assert len(squad.read_examples(path, v2=False, training=True)) == 2  # training keys nothing by id
