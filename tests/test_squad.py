"""SQuAD 1.1 / 2.0 on the real files: reader counts, windows whose gold spans round-trip to the answer
text, gold answers through postprocessing and the official scores, span selection on hand-made beams,
output files and bad input. The QA head against NumPy: test_squad_head.py."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from electra_tf.errors import InputError
from electra_tf.modeling import BertConfig, build_encoder
from electra_tf.modeling.layer_utils import build_in_scope
from electra_tf.tokenization import Tokenizer
from finetune import qa_head, squad
from finetune.task import EvalSplit
from finetune.tasks import get_task
from finetune import squad_postprocess as post

# name: (v2, articles, paragraphs, questions, answerable, answers, gold spans that cut a WordPiece token)
FILES = {"dev-v1.1.json": (False, 48, 2067, 10570, 10570, 34726, 32),
         "dev-v2.0.json": (True, 35, 1204, 11873, 5928, 20302, 6),
         "train-v1.1-subset-44articles.json": (False, 44, 2430, 11877, 11877, 11877, 86),
         "train-v2.0-subset-10articles.json": (True, 10, 694, 4719, 4371, 4371, 29)}


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
    return Tokenizer(vocab_file, do_lower_case=True)


@pytest.fixture(scope="module")
def featurized(shared_data, tokenizer):
    """{file: (examples, features)} at the original's SQuAD sizes (512 / 128 / 64)."""
    result = {}
    for name, (v2, *_) in FILES.items():
        examples = squad.read_examples(shared_data / "squad" / name, v2)
        result[name] = examples, squad.featurize(examples, tokenizer, 512, 128, 64)
    return result


@pytest.mark.parametrize("name", list(FILES))
def test_reader_counts_and_gold_spans_round_trip(name, featurized, shared_data):
    v2, articles, paragraphs, questions, answerable, answers, cut = FILES[name]
    data = squad.load_dataset(shared_data / "squad" / name)
    assert (len(data), sum(len(a["paragraphs"]) for a in data)) == (articles, paragraphs)
    examples, features = featurized[name]
    assert len(examples) == questions
    assert sum(not e.is_impossible for e in examples) == answerable
    assert sum(len(e.answers) for e in examples) == answers
    failures = []
    for example in examples:
        if example.is_impossible:
            assert (example.answer_text, example.answers) == ("", ())
            continue
        tokens = features.doc_tokens[id(example.paragraph)]
        first, last = tokens.span_of(example.answer_start, example.answer_end)
        text = tokens.text(example.paragraph.context, first, last)
        if text != example.answer_text:
            failures.append((example.answer_text, text))
    # >= 99 %; every exception is an answer that starts or ends inside a WordPiece token
    # ("Japan" in "Japanese", "7" of "1817"), so the token span's text strictly contains it.
    assert len(failures) == cut and cut <= 0.01 * answerable
    assert all(answer in text and answer != text for answer, text in failures)
    # every window is well formed; answerable questions point at their window's gold tokens
    assert len(features) >= questions and np.all(features.doc_offset + features.doc_length + 1 <= 512)
    assert all(len(ids) == len(seg) <= 512 for ids, seg in zip(features.token_ids, features.segment_ids))
    for f in range(0, len(features), 7):
        example = examples[features.example_index[f]]
        start, end = features.start_positions[f], features.end_positions[f]
        assert features.is_impossible[f] == float(example.is_impossible)
        if start:
            tokens = features.doc_tokens[id(example.paragraph)]
            shift = features.doc_start[f] - features.doc_offset[f]
            assert example.answer_text in tokens.text(example.paragraph.context, start + shift, end + shift)


def _gold_beams(examples, features, max_answer_length):
    """One-beam head outputs that point, in the max-context window of its start, at the first gold
    answer that round-trips and fits max_answer_length (else at [CLS], i.e. nothing)."""
    n = len(features)
    starts, ends = np.zeros([n, 1], np.int32), np.zeros([n, 1, 1], np.int32)
    for f in range(n):
        example = examples[features.example_index[f]]
        tokens = features.doc_tokens[id(example.paragraph)]
        spans = [tokens.span_of(start, start + len(text)) for start, text in example.answers]
        good = [(s, e) for (s, e), (_, text) in zip(spans, example.answers)
                if tokens.text(example.paragraph.context, s, e) == text and e - s < max_answer_length]
        if not (good or spans):
            continue
        s, e = (good or spans)[0]
        first, offset, length = features.doc_start[f], features.doc_offset[f], features.doc_length[f]
        if first <= s and e < first + length and features.max_context[f][s - first]:
            starts[f, 0], ends[f, 0, 0] = s - first + offset, e - first + offset
    return {"start_top_index": starts, "end_top_index": ends, "start_top_log_probs": np.zeros([n, 1]),
            "end_top_log_probs": np.zeros([n, 1, 1]), "null_score": np.zeros(n)}


def test_gold_answers_score_100_through_postprocessing(featurized, shared_data, tmp_path):
    data = {name: squad.load_dataset(shared_data / "squad" / name) for name in ("dev-v1.1.json", "dev-v2.0.json")}
    # the official scorers on the gold texts themselves
    gold = {qa["id"]: qa["answers"][0]["text"]
            for a in data["dev-v1.1.json"] for p in a["paragraphs"] for qa in p["qas"]}
    assert post.evaluate_v1(data["dev-v1.1.json"], gold) == {"exact_match": 100.0, "f1": 100.0}
    # v1.1: one question is out of reach of any token span ("four" inside the one token "fourth")
    examples, features = featurized["dev-v1.1.json"]
    predictions, odds, nbest = post.predict_answers(examples, features, _gold_beams(examples, features, 64),
                                                    max_answer_length=64)
    assert odds == {} and len(predictions) == 10570 and nbest[examples[0].qas_id][0]["probability"] == 1.0
    misses = [e.qas_id for e in examples if predictions[e.qas_id] not in [t for _, t in e.answers]]
    assert misses == ["56dfa1d34a1a83140091ebd4"] and predictions[misses[0]] == "fourth"
    scores = post.evaluate_v1(data["dev-v1.1.json"], predictions)
    assert scores["exact_match"] == pytest.approx(100.0 * 10569 / 10570) == scores["f1"]
    # v2.0: every answerable question reached; null odds below the threshold keep the answers
    examples, features = featurized["dev-v2.0.json"]
    beams = _gold_beams(examples, features, 64)
    beams["null_score"] = np.array([1.0 if examples[i].is_impossible else -5.0 for i in features.example_index])
    predictions, odds, _ = post.predict_answers(examples, features, beams, max_answer_length=64, v2=True)
    assert set(odds.values()) == {1.0, -5.0}
    paths = post.output_paths(tmp_path, "squad", "squad")
    post.write_json(paths["preds"], predictions)
    post.write_json(paths["null_odds"], odds)
    assert paths["preds"] == tmp_path / "squad_qa" / "squad_preds.json"
    scores = post.evaluate_v2(data["dev-v2.0.json"], json.loads(paths["preds"].read_text()),
                              json.loads(paths["null_odds"].read_text()), threshold=-2.75)
    assert (scores["exact"], scores["f1"], scores["total"]) == (100.0, 100.0, 11873)
    assert (scores["HasAns_total"], scores["NoAns_total"], scores["best_f1"]) == (5928, 5945, 100.0)
    # no answers at all: the no-answer rate, 5945 / 11873
    empty = post.evaluate_v2(data["dev-v2.0.json"], {q: "" for q in predictions}, {q: 0.0 for q in predictions})
    assert empty["exact"] == pytest.approx(100.0 * 5945 / 11873) == empty["f1"]
    assert (empty["HasAns_exact"], empty["NoAns_exact"]) == (0.0, 100.0)
    with pytest.raises(InputError, match="no prediction"):
        post.evaluate_v2(data["dev-v2.0.json"], {}, {})


def test_postprocessing_picks_the_right_span(tokenizer, tmp_path):
    context = "The quick brown fox jumped over the lazy dog near Denver's river bank in 1895."
    path = tmp_path / "tiny.json"
    qa = {"id": "q1", "question": "Who jumped?", "answers": [{"text": "brown fox", "answer_start": 10}],
          "is_impossible": False}
    path.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"context": context, "qas": [qa]}]}]}))
    examples = squad.read_examples(path, v2=True)
    features = squad.featurize(examples, tokenizer, 16, 4, 64)  # [CLS] who jumped ? [SEP] 10 tokens [SEP]
    assert len(features) == 3 and list(features.doc_start) == [0, 4, 8] and set(features.doc_offset) == {5}
    # windows without the answer ("brown fox" = doc tokens 2..3: window 0 only) point at [CLS], as in
    # the original's code; `drop_windows_without_answer` (a SQuAD 1.1 option) leaves them out
    assert list(features.start_positions) == [7, 0, 0] and list(features.end_positions) == [8, 0, 0]
    kept = squad.featurize(examples, tokenizer, 16, 4, 64, drop_windows_without_answer=True)
    assert list(kept.doc_start) == [0] and (kept.start_positions[0], kept.end_positions[0]) == (7, 8)
    first = features.doc_start[0]
    # window 0 holds "brown fox" at input 7..8; the best raw score points into the question (invalid),
    # then a span ending before it starts, then one longer than max_answer_length
    beams = {"start_top_index": np.array([[2, 8, 6, 7]] * 3),
             "start_top_log_probs": np.array([[0.0, -0.1, -0.2, -0.5]] * 3),
             "end_top_index": np.array([[[3, 3, 3, 3], [7, 7, 7, 7], [14, 13, 14, 14], [8, 9, 7, 7]]] * 3),
             "end_top_log_probs": np.array([[[0.0] * 4, [-0.1] * 4, [-0.1, -0.6, -2, -2], [-0.3, -0.4, -3, -3]]] * 3),
             "null_score": np.array([0.5, -1.0, 2.0])}
    predictions, odds, nbest = post.predict_answers(examples, features, beams, n_best_size=3, max_answer_length=7,
                                                    v2=True)
    # window 0 (doc tokens 0..9 at inputs 5..14): start 2 is in the question, 8 ("fox") has only
    # earlier ends, 6 ("quick") only spans of 8 and 9 tokens; start 7 ("brown") gives 7..8, 7..9,
    # 7..7 (twice). Windows 1 and 2 are not the max-context window of their starts but 8 (doc
    # token 11 in window 2), whose ends all precede it.
    assert first == 0 and predictions == {"q1": "brown fox"} and odds == {"q1": -1.0}
    assert [(c["text"], c["start_logit"] + c["end_logit"]) for c in nbest["q1"]] == [
        ("brown fox", pytest.approx(-0.8)), ("brown fox jumped", pytest.approx(-0.9)), ("brown", pytest.approx(-3.5))]
    assert sum(c["probability"] for c in nbest["q1"]) == pytest.approx(1.0)
    longer, _, _ = post.predict_answers(examples, features, beams, n_best_size=3, max_answer_length=9, v2=True)
    assert longer == {"q1": "quick brown fox jumped over the lazy dog near"}  # 6..14 now fits: -0.3
    # characters map back exactly: "Denver" out of "Denver's", "1895" out of "1895."
    tokens = features.doc_tokens[id(examples[0].paragraph)]
    assert tokens.text(context, *tokens.span_of(context.index("Denver"), context.index("Denver") + 6)) == "Denver"
    assert tokens.text(context, *tokens.span_of(context.index("1895"), context.index("1895") + 4)) == "1895"


@pytest.mark.parametrize("mutate, message", [
    (lambda d: "{not json", r"bad.json: not valid SQuAD JSON"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0].update(answer_start=3),
     r"bad.json: question q1: answer 0: answer_start 3 does not point at the answer text 'brown fox'"),
    (lambda d: d["data"][0]["paragraphs"][0].update(context="  "), r"question q1: the question has no context"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0].__delitem__("is_impossible"),
     r"question q1: missing field 'is_impossible'"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0].update(answers=[]), r"question q1: answerable question has no"),
    (lambda d: d["data"][0]["paragraphs"][0].__delitem__("context"),
     r"bad.json: article 0 paragraph 0 \(question q1\): missing field 'context'"),
])
def test_bad_files_are_input_errors(tmp_path, mutate, message):
    document = {"data": [{"title": "t", "paragraphs": [{"context": "The quick brown fox.", "qas": [
        {"id": "q1", "question": "Who?", "answers": [{"text": "brown fox", "answer_start": 10}],
         "is_impossible": False}]}]}]}
    changed = mutate(document)
    path = tmp_path / "bad.json"
    path.write_text(changed if isinstance(changed, str) else json.dumps(document))
    with pytest.raises(InputError, match=message):
        squad.read_examples(path, v2=True)
    with pytest.raises(InputError, match=r"task squad: no dev file .*squad/dev.json"):
        squad.split_file(tmp_path, "squad", "dev")


def test_tiny_model_trains_and_its_predictions_are_scored(shared_data, tokenizer, tmp_path):
    path = shared_data / "squad" / "train-v2.0-subset-10articles.json"
    examples = squad.read_examples(path, v2=True, max_examples=12)
    features = squad.featurize(examples, tokenizer, 96, 32, 24)
    assert len(features) > len(examples)  # contexts longer than one window
    tf_keras.utils.set_random_seed(7)
    config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    encoder = build_encoder(config)
    head = qa_head.QAHead("squad", 32, beam_size=5)
    build_in_scope(head, None, "task_specific")
    variables = encoder.trainable_variables + head.trainable_variables
    optimizer = tf_keras.optimizers.Adam(3e-3)
    batch = squad.qa_batch(features, list(range(8)))
    assert batch["input_ids"].shape == (8, max(len(features.token_ids[i]) for i in range(8)))
    losses = []
    for _ in range(6):
        with tf.GradientTape() as tape:
            sequence = encoder(batch["input_ids"], batch["input_mask"], batch["segment_ids"], training=True)
            loss = tf.reduce_sum(head.per_example_loss(head(sequence, batch, training=True), batch))
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        losses.append(float(loss))
    assert losses[-1] < losses[0]
    outputs = {}
    for start in range(0, len(features), 8):
        indices = list(range(start, min(start + 8, len(features))))
        batch = squad.qa_batch(features, indices, pad_to=96)
        sequence = encoder(batch["input_ids"], batch["input_mask"], batch["segment_ids"])
        for key, value in head.predictions(head(sequence, batch)).items():
            outputs.setdefault(key, []).append(value.numpy())
    outputs = {key: np.concatenate(values) for key, values in outputs.items()}
    assert outputs["end_top_index"].shape == (len(features), 5, 5)
    predictions, odds, _ = post.predict_answers(examples, features, outputs, v2=True)
    for example in examples:  # each answer is a substring of its context (or the nonce "empty")
        assert predictions[example.qas_id] in example.paragraph.context or predictions[example.qas_id] == "empty"
    paths = post.output_paths(tmp_path, "squad", "squad")
    post.write_json(paths["preds"], predictions)
    post.write_json(paths["null_odds"], odds)
    ids = set(predictions)
    dataset = [{"paragraphs": [{"context": p["context"], "qas": [qa for qa in p["qas"] if qa["id"] in ids]}
                               for p in article["paragraphs"]]} for article in squad.load_dataset(path)]
    scores = post.evaluate_v2(dataset, json.loads(paths["preds"].read_text()),
                              json.loads(paths["null_odds"].read_text()))
    assert scores["total"] == 12 and 0.0 <= scores["f1"] <= 100.0 and "best_f1_thresh" in scores
    post.write_json(paths["eval"], scores)
    assert json.loads(paths["eval"].read_text())["total"] == 12


def test_span_task_interface_scores_and_writes_the_original_files(shared_data, tokenizer, tmp_path):
    data_dir = tmp_path / "finetuning_data"
    (data_dir / "squadv1").mkdir(parents=True)
    (data_dir / "squadv1" / "dev.json").symlink_to(shared_data / "squad" / "dev-v1.1.json")
    config = SimpleNamespace(max_seq_length=128, doc_stride=64, max_query_length=32, beam_size=20,
                             joint_prediction=True, answerable_classifier=True, answerable_uses_start_logits=True,
                             answerable_weight=0.5, n_best_size=20, max_answer_length=30, qa_na_threshold=-2.75,
                             tasks_key="squadv1", raw_data_dir=str(data_dir), drop_windows_without_answer=False,
                             results_dir=str(tmp_path / "results"))
    task = get_task("squadv1")
    assert (task.v2, task.presets["max_seq_length"], get_task("mrpc").type_name) == (False, 512, "classification")
    examples = task.read(config, "dev", 40)
    features = task.featurize(examples, tokenizer, config, task_id=0, split="dev")
    assert len(features) > 40 and set(task.make_batch(features, [0, 1])) >= set(task.batch_spec)
    # as training windows: those without the answer point at [CLS] (the original's code), or with the
    # option are left out
    kept = task.featurize(examples, tokenizer, config, task_id=0, split="train")
    assert len(kept) == len(features) and 0 < (kept.start_positions == 0).sum() < len(features) - 40
    config.drop_windows_without_answer = True
    dropped = task.featurize(examples, tokenizer, config, task_id=0, split="train")
    assert len(dropped) == (kept.start_positions > 0).sum() and dropped.start_positions.min() > 0
    assert set(dropped.example_index) == set(range(40))  # each question keeps the windows with its answer
    scores = task.score(config, EvalSplit(0, task, "dev", "", examples, features), _gold_beams(examples, features, 30),
                        0.0)
    assert list(scores)[:1] == ["f1"] and scores["exact_match"] == scores["f1"] == 100.0
    written = tmp_path / "results" / "squadv1_qa"
    assert sorted(p.name for p in written.iterdir()) == ["squadv1_eval.json", "squadv1_preds.json"]
    assert json.loads((written / "squadv1_eval.json").read_text())["f1"] == 100.0
    with pytest.raises(InputError, match="no train file"):
        task.read(config, "train", None)


def test_squad_v2_test_answers_follow_the_null_threshold(shared_data, tokenizer, tmp_path):
    """SQuAD 2.0's test answers as the original writes them: the best span, or "" where the null
    odds exceed qa_na_threshold."""
    examples = squad.read_examples(shared_data / "squad" / "dev-v2.0.json", v2=True, max_examples=60)
    features = squad.featurize(examples, tokenizer, 128, 64, 32)
    beams = _gold_beams(examples, features, 30)
    beams["null_score"] = np.array([1.0 if examples[i].is_impossible else -5.0 for i in features.example_index])
    config = SimpleNamespace(n_best_size=20, max_answer_length=30, answerable_classifier=True, qa_na_threshold=-2.75,
                             tasks_key="squad")
    task = get_task("squad")
    path = task.write_test(config, EvalSplit(0, task, "test", "", examples, features), beams, tmp_path)
    assert path == tmp_path / "squad_qa" / "squad_test_preds.json"
    answers = json.loads(path.read_text())
    assert len(answers) == 60 and {e.qas_id for e in examples if e.is_impossible} == {q for q, a in answers.items()
                                                                                       if a == ""}
    assert all(answers[e.qas_id] in [text for _, text in e.answers] for e in examples if not e.is_impossible)
