"""From the QA head's beams to answers, the original's output files, and the official SQuAD scores.

`predict_answers` follows the original's `SpanBasedQAScorer.write_predictions`: for every question,
the candidate spans of all its windows (each start beam i with each of its end beams j) are kept
when both ends lie in the window's context, the start is not `[CLS]`, the window is the start
token's max-context window, end >= start, and the span has at most max_answer_length tokens;
they are ranked by start + end log-probability, and the first n_best_size distinct texts form the
n-best list ("empty" when none survives). A span's text is the exact context substring its tokens
cover (`finetune.squad_context.DocTokens`). For SQuAD 2.0 the prediction is the best non-empty text and
the question's null odds are the minimum over its windows of the null score (the answerability
logit; without the classifier, null score minus the best span's score): the evaluator turns a
prediction into "" when its null odds exceed qa_na_threshold (-2.75).

Scores come from Model Garden's copies of the official evaluation scripts
(`official.nlp.tools.squad_evaluate_v1_1` / `_v2_0`), reported under the official scripts' names
(×100): v1.1 `exact_match`, `f1`; v2.0 `exact`, `f1`, `total`, `HasAns_*`, `NoAns_*`,
`best_exact(_thresh)`, `best_f1(_thresh)`. Model Garden's v2 `evaluate` fixes the threshold at
1.0, so the v2 scores are assembled from its pieces with the configured threshold.
"""

import dataclasses
import json
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np
from official.nlp.tools import squad_evaluate_v1_1, squad_evaluate_v2_0

from electra_tf import atomic_files
from electra_tf.errors import InputError
from finetune.squad import Example, QAFeatures

NO_PREDICTION = "empty"  # the original's text when no span survives the filters


@dataclasses.dataclass
class Candidate:
    text: str
    start_log_prob: float
    end_log_prob: float
    start: int = -1  # the text's [start, end) characters in the context (-1: no prediction)
    end: int = -1

    @property
    def score(self) -> float:
        return self.start_log_prob + self.end_log_prob


def _softmax(scores: Sequence[float]) -> List[float]:
    values = np.exp(np.asarray(scores, np.float64) - np.max(scores))
    return list(values / values.sum())


def _window_spans(features: QAFeatures, f: int, outputs: Dict[str, np.ndarray], max_answer_length: int):
    """(start log-prob, end log-prob, first doc token, last doc token) of window f's valid spans."""
    offset, length, start = features.doc_offset[f], features.doc_length[f], features.doc_start[f]
    best_context = features.max_context[f]
    starts, ends = outputs["start_top_index"][f], outputs["end_top_index"][f]
    for i, start_index in enumerate(starts):
        for j, end_index in enumerate(ends[i]):
            in_context = offset <= start_index < offset + length and offset <= end_index < offset + length
            if start_index == 0 or not in_context:
                continue
            if not best_context[start_index - offset] or end_index < start_index:
                continue
            if end_index - start_index + 1 > max_answer_length:
                continue
            yield (float(outputs["start_top_log_probs"][f][i]), float(outputs["end_top_log_probs"][f][i, j]),
                   int(start + start_index - offset), int(start + end_index - offset))


def predict_answers(examples: Sequence[Example], features: QAFeatures, outputs: Dict[str, np.ndarray],
                    n_best_size: int = 20, max_answer_length: int = 30, v2: bool = False,
                    answerable_classifier: bool = True) -> Tuple[Dict[str, str], Dict[str, float], Dict[str, list]]:
    """(predictions {id: text}, null odds {id: float} (v2 only), n-best {id: [{text, probability,
    start_logit, end_logit, start, end}]}: start and end, the text's characters in the context).
    `outputs` holds `QAHead.predictions` per window, in the order of `features`
    (start_top_log_probs / start_top_index [N, k], end_top_* [N, k, k], null_score [N])."""
    windows: Dict[int, List[int]] = {}
    for f, index in enumerate(features.example_index):
        windows.setdefault(int(index), []).append(f)
    predictions, null_odds, nbest_json = {}, {}, {}
    for index, example in enumerate(examples):
        tokens = features.doc_tokens[id(example.paragraph)]
        spans, null_score = [], np.inf
        for f in windows.get(index, []):
            null_score = min(null_score, float(outputs["null_score"][f]))
            spans += list(_window_spans(features, f, outputs, max_answer_length))
        spans.sort(key=lambda span: span[0] + span[1], reverse=True)  # stable: beam order on ties
        nbest, seen = [], set()
        for start_lp, end_lp, first, last in spans:
            if len(nbest) >= n_best_size:
                break
            text = tokens.text(example.paragraph.context, first, last)
            if text not in seen:
                seen.add(text)
                characters = int(tokens.char_start[first]), int(tokens.char_end[last])
                nbest.append(Candidate(text, start_lp, end_lp, *characters))
        if not nbest:
            nbest.append(Candidate(NO_PREDICTION, 0.0, 0.0))
        probabilities = _softmax([c.score for c in nbest])
        nbest_json[example.qas_id] = [dict(text=c.text, probability=float(p), start_logit=c.start_log_prob,
                                           end_logit=c.end_log_prob, start=c.start, end=c.end)
                                      for c, p in zip(nbest, probabilities)]
        best = next((c for c in nbest if c.text), nbest[0])
        predictions[example.qas_id] = best.text
        if v2:
            null_odds[example.qas_id] = null_score if answerable_classifier else null_score - best.score
    return predictions, null_odds, nbest_json


def output_paths(results_dir, tasks_key: str, task_name: str) -> Dict[str, Path]:
    """The original's files: results/<tasks>_qa/<task>_{preds,null_odds,eval}.json."""
    directory = Path(results_dir) / f"{tasks_key}_qa"
    return {kind: directory / f"{task_name}_{kind}.json" for kind in ("preds", "null_odds", "eval")}


def write_json(path: Path, content) -> Path:
    """Writes `content` as JSON, whole or not at all (a full disk leaves no half file)."""
    return atomic_files.write_text(path, json.dumps(content, indent=2) + "\n")


def evaluate_v1(dataset: list, predictions: Dict[str, str]) -> Dict[str, float]:
    """The official v1.1 scores ×100 (a question without a prediction scores 0)."""
    scores = squad_evaluate_v1_1.evaluate(dataset, predictions)
    return {"exact_match": 100.0 * scores["exact_match"], "f1": 100.0 * scores["final_f1"]}


def evaluate_v2(dataset: list, predictions: Dict[str, str], null_odds: Dict[str, float],
                threshold: float = -2.75) -> Dict[str, float]:
    """The official v2.0 scores: a prediction counts as "" when its null odds exceed `threshold`."""
    qa_ids = {qa["id"] for article in dataset for paragraph in article["paragraphs"] for qa in paragraph["qas"]}
    missing = sorted(qa_ids - set(predictions))
    if missing:
        raise InputError(f"{len(missing)} question(s) have no prediction, e.g. {missing[0]}")
    odds = {qid: float(null_odds.get(qid, 0.0)) for qid in predictions}
    has_answer = squad_evaluate_v2_0._make_qid_to_has_ans(dataset)  # pylint: disable=protected-access
    exact_raw, f1_raw = squad_evaluate_v2_0._get_raw_scores(dataset, predictions)  # pylint: disable=protected-access
    apply = squad_evaluate_v2_0._apply_no_ans_threshold  # pylint: disable=protected-access
    exact, f1 = apply(exact_raw, odds, has_answer, threshold), apply(f1_raw, odds, has_answer, threshold)
    make = squad_evaluate_v2_0._make_eval_dict  # pylint: disable=protected-access
    scores = dict(make(exact, f1))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        ids = [qid for qid, answerable in has_answer.items() if answerable == wanted]
        if ids:
            scores.update({f"{prefix}_{key}": value for key, value in make(exact, f1, qid_list=ids).items()})
    best = squad_evaluate_v2_0._find_best_thresh  # pylint: disable=protected-access
    scores["best_exact"], scores["best_exact_thresh"] = best(predictions, exact_raw, odds, has_answer)
    scores["best_f1"], scores["best_f1_thresh"] = best(predictions, f1_raw, odds, has_answer)
    return scores
