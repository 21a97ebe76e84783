"""SQuAD 2.0 (`squad`) and 1.1 (`squadv1`) behind the task interface (`finetune.task`): windows of
the context (`finetune.squad`), the original's QA head (`finetune.qa_head`) and its answer
postprocessing and official scores (`finetune.squad_postprocess`). Trained alone it takes 512
tokens and 2 epochs, as the original.
"""

from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from finetune import squad, squad_postprocess
from electra_tf.errors import InputError
from finetune.qa_head import QAHead
from finetune.qa_server import QAServer
from finetune.squad_context import Paragraph
from finetune.table_files import Layout, RowId, blank_text, id_cell, iter_rows, text_cell
from finetune.task import EDGE, EvalSplit, Task, text_offsets


class SquadTask(Task):
    """`squad` (SQuAD 2.0) or `squadv1` (SQuAD 1.1)."""

    type_name = "squad"
    presets = {"max_seq_length": 512, "num_train_epochs": 2.0}
    batch_spec = {"start_positions": tf.TensorSpec([None], tf.int32),
                  "end_positions": tf.TensorSpec([None], tf.int32),
                  "is_impossible": tf.TensorSpec([None], tf.float32)}

    def __init__(self, name: str):
        self.name = name

    @property
    def v2(self) -> bool:
        return squad.TASKS[self.name]

    def read(self, config, split: str, max_examples: Optional[int]) -> List[squad.Example]:
        return squad.read_examples(squad.split_file(config.raw_data_dir, self.name, split), self.v2, max_examples,
                                   training=split == "train", labels=split != "test")

    def featurize(self, examples, tokenizer, config, task_id: int, split: str) -> squad.QAFeatures:
        return squad.featurize(examples, tokenizer, config.max_seq_length, config.doc_stride,
                               config.max_query_length, task_id,
                               drop_windows_without_answer=config.drop_windows_without_answer and split == "train"
                               and not self.v2)

    def make_batch(self, features, indices, pad_to=None) -> dict:
        return squad.qa_batch(features, indices, pad_to)

    def test_splits(self, config):
        return (("", "test"),) if self.v2 else ()  # the original writes SQuAD 2.0's test answers only

    def make_head(self, config, hidden_size: int) -> QAHead:
        return QAHead(self.name, hidden_size, config.beam_size, config.joint_prediction,
                      config.answerable_classifier, config.answerable_uses_start_logits, config.answerable_weight,
                      config.n_best_size)

    def prediction_columns(self, predictions):
        return predictions  # the head's dict: {output key: [B, ...]}

    def gather(self, columns):
        return columns  # {head output key: [array per window]}

    def score(self, config, split: EvalSplit, predictions: Dict, loss: float) -> Dict[str, float]:
        """Answers -> `<results_dir>/<tasks>_qa/<task>_{preds,null_odds,eval}.json` and the official scores;
        the answers are scored against the split's own file (only the questions that were read)."""
        answers, null_odds = self._answers(config, split.examples, split.features, predictions)
        paths = squad_postprocess.output_paths(config.results_dir, config.tasks_key, self.name)
        squad_postprocess.write_json(paths["preds"], answers)
        dataset = _only(squad.load_dataset(squad.split_file(config.raw_data_dir, self.name, split.name)), set(answers))
        if self.v2:
            squad_postprocess.write_json(paths["null_odds"], null_odds)
            scores = squad_postprocess.evaluate_v2(dataset, answers, null_odds, config.qa_na_threshold)
        else:
            scores = squad_postprocess.evaluate_v1(dataset, answers)
        squad_postprocess.write_json(paths["eval"], scores)
        return {"f1": scores["f1"], **scores, "loss": float(loss)}

    def _answers(self, config, examples, features, predictions: Dict):
        """({id: best span}, {id: null odds} (SQuAD 2.0)) of the head's outputs per window."""
        answers, null_odds, _ = squad_postprocess.predict_answers(
            examples, features, predictions, config.n_best_size, config.max_answer_length, self.v2,
            config.answerable_classifier)
        return answers, null_odds

    def write_test(self, config, split: EvalSplit, predictions: Dict, results_dir) -> Path:
        """SQuAD 2.0's test answers, as the original writes them: the best span, or "" where its
        null odds exceed `qa_na_threshold`; `<results_dir>/<tasks>_qa/<task>_test_preds.json`."""
        answers, null_odds = self._answers(config, split.examples, split.features, predictions)
        final = {qid: "" if null_odds[qid] > config.qa_na_threshold else text for qid, text in answers.items()}
        directory = squad_postprocess.output_paths(results_dir, config.tasks_key, self.name)["preds"].parent
        return squad_postprocess.write_json(directory / f"{self.name}_test_preds.json", final)

    def read_inputs(self, source) -> Iterator[Tuple[RowId, squad.Example]]:
        """JSONL (`question`, `context`, an `id` if present) or plain text (a question and its
        context a line, separated by a tab)."""
        if source.format == "jsonl":
            rows = ((line, cells) for line, cells in iter_rows(
                source.name, Layout("jsonl"), {"question": "question", "context": "context", "id": "id"},
                optional=("id",), source=source.stream(), on_blank=source.empty))
        elif source.format == "text":
            rows = ((line, _question_and_context(source.name, line, text)) for line, text in source.lines())
        else:
            raise InputError(f"{source.name}: a SQuAD task reads jsonl or text, not {source.format}")
        for line, cells in rows:
            texts = cells.get("question"), cells.get("context")  # None: a text line without its context
            if any(text is None or blank_text(text) for text in texts):
                if source.empty(line, "question or context"):
                    continue
            paragraph = Paragraph.split(text_cell(cells["context"], source.name, line, "context"))
            question = text_cell(cells["question"], source.name, line, "question")
            row_id = id_cell(cells.get("id"), source.name, line)
            # keyed by file and line (ids may repeat), which an error about the question names
            yield row_id, squad.Example(line, f"{source.name}:{line}", question, paragraph)

    def example_features(self, features) -> np.ndarray:
        return np.unique(features.example_index, return_index=True)[1]  # each question's first window

    def token_offsets(self, config, tokenizer, examples, features) -> List[np.ndarray]:
        """The question's tokens (characters in the question), then the first window's context
        tokens (characters in the context)."""
        questions = text_offsets(tokenizer, [e.question for e in examples])
        rows = []
        for example, question, f in zip(examples, questions, self.example_features(features)):
            doc = features.doc_tokens[id(example.paragraph)]
            window = slice(features.doc_start[f], features.doc_start[f] + features.doc_length[f])
            rows.append(np.concatenate([EDGE, question[:features.doc_offset[f] - 2], EDGE,
                                        np.stack([doc.char_start[window], doc.char_end[window]], -1), EDGE]))
        return rows

    def predict_outputs(self, head, outputs) -> Dict[str, tf.Tensor]:
        return head.predictions(outputs)  # the beams of every window

    def prediction_rows(self, config, fetched, examples, features) -> List[dict]:
        """The answer and its characters in the context; for SQuAD 2.0 the null odds and whether the
        model abstains (odds above `qa_na_threshold`, as the original's test answers)."""
        _, null_odds, nbest = squad_postprocess.predict_answers(
            examples, features, fetched, config.n_best_size, config.max_answer_length, self.v2,
            config.answerable_classifier)
        rows = []
        for example in examples:
            best = next((c for c in nbest[example.qas_id] if c["text"]), nbest[example.qas_id][0])
            row = {"answer": best["text"], "start": best["start"], "end": best["end"]}
            if self.v2:
                odds = null_odds[example.qas_id]
                row.update(null_odds=odds, abstains=bool(odds > config.qa_na_threshold))
            rows.append(row)
        return rows

    def server(self, tokenizer, model, config, precision: str) -> QAServer:
        return QAServer(tokenizer, model, self, config, precision)

    def card(self) -> dict:
        return {"type": self.type_name, "v2": self.v2}


def _question_and_context(name: str, line: int, text: str) -> dict:
    """A plain-text line's question and context (a blank line has neither: it is empty)."""
    if text.strip() and "\t" not in text:
        raise InputError(f"{name}:{line}: a line is a question and its context separated by a tab (a SQuAD "
                         f".json file is a run's train, dev or test file; predict.py reads JSONL or text)")
    return dict(zip(("question", "context"), text.split("\t", 1)))


def _only(dataset: list, ids) -> list:
    """The articles with only the questions in `ids` (max_examples reads a prefix of the file)."""
    return [{"paragraphs": [{"context": p["context"], "qas": [qa for qa in p["qas"] if qa["id"] in ids]}
                            for p in article["paragraphs"]]} for article in dataset]
