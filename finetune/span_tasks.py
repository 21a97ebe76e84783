"""The SQuAD and chunking tasks behind one small interface, for the fine-tuning runner to call.

A task here answers what `finetune.glue.GlueTask` + `finetune.inputs` + `finetune.heads` +
`finetune.scorers` answer for GLUE:
- `presets`: the original's single-task overrides (SQuAD: 512 tokens, 2 epochs; chunk: 256 tokens);
- `read(finetuning_data, split, max_examples)`: examples of train / dev (/ test);
- `featurize(examples, tokenizer, config, task_id, split)`: model inputs (a `finetune.inputs.Features`
  subclass, so `len`, `lengths` and `pad_batch` work as for GLUE);
- `make_head(config, hidden_size)`: the head (`call(sequence_output, batch, training)`,
  `per_example_loss(outputs, batch)`, `predictions(outputs)`);
- `batch(features, indices, pad_to)` and `batch_spec`: a padded batch and its extra keys' specs;
- `score(config, examples, features, predictions, results_dir)`: the scores (first key = the main
  score), writing the original's output files where it does.
`predictions` are the head's `predictions` per feature in feature order: for SQuAD a dict of
arrays with a leading feature axis; for chunking a list with one int array [kept words] per sentence.
"""

import dataclasses
import functools
from pathlib import Path
from typing import Dict, List, Optional

import tensorflow as tf

from finetune import chunking, squad, squad_postprocess
from finetune.qa_head import QAHead


@dataclasses.dataclass(frozen=True)
class SquadTask:
    """`squad` (SQuAD 2.0) or `squadv1` (SQuAD 1.1)."""

    name: str
    presets = {"max_seq_length": 512, "num_train_epochs": 2.0}
    dev_files = (("", "dev"),)  # (metric prefix, file stem), as GlueTask
    batch_spec = {"start_positions": tf.TensorSpec([None], tf.int32),
                  "end_positions": tf.TensorSpec([None], tf.int32),
                  "is_impossible": tf.TensorSpec([None], tf.float32)}
    batch = staticmethod(squad.qa_batch)

    @property
    def v2(self) -> bool:
        return squad.TASKS[self.name]

    def read(self, finetuning_data, split: str, max_examples: Optional[int] = None) -> List[squad.Example]:
        return squad.read_examples(squad.split_file(finetuning_data, self.name, split), self.v2, max_examples,
                                   training=split == "train", labels=split != "test")

    def featurize(self, examples, tokenizer, config, task_id: int, split: str) -> squad.QAFeatures:
        return squad.featurize(examples, tokenizer, config.max_seq_length, config.doc_stride,
                               config.max_query_length, task_id,
                               drop_windows_without_answer=config.drop_windows_without_answer and split == "train"
                               and not self.v2)

    def make_head(self, config, hidden_size: int) -> QAHead:
        return QAHead(self.name, hidden_size, config.beam_size, config.joint_prediction,
                      config.answerable_classifier, config.answerable_uses_start_logits, config.answerable_weight)

    def score(self, config, examples, features, predictions: Dict, results_dir,
              split: str = "dev") -> Dict[str, float]:
        """Answers -> `<results_dir>/<tasks>_qa/<task>_{preds,null_odds,eval}.json` and the official scores;
        the answers are scored against the split's own file (only the questions that were read)."""
        answers, null_odds = self._answers(config, examples, features, predictions)
        paths = squad_postprocess.output_paths(results_dir, config.tasks_key, self.name)
        squad_postprocess.write_json(paths["preds"], answers)
        dataset = _only(squad.load_dataset(squad.split_file(config.raw_data_dir, self.name, split)), set(answers))
        if self.v2:
            squad_postprocess.write_json(paths["null_odds"], null_odds)
            scores = squad_postprocess.evaluate_v2(dataset, answers, null_odds, config.qa_na_threshold)
        else:
            scores = squad_postprocess.evaluate_v1(dataset, answers)
        squad_postprocess.write_json(paths["eval"], scores)
        return {"f1": scores["f1"], **scores}

    def _answers(self, config, examples, features, predictions: Dict):
        """({id: best span}, {id: null odds} (SQuAD 2.0)) of the head's outputs per window."""
        answers, null_odds, _ = squad_postprocess.predict_answers(
            examples, features, predictions, config.n_best_size, config.max_answer_length, self.v2,
            config.answerable_classifier)
        return answers, null_odds

    def write_test(self, config, examples, features, predictions: Dict, results_dir) -> Path:
        """SQuAD 2.0's test answers, as the original writes them: the best span, or "" where its
        null odds exceed `qa_na_threshold`; `<results_dir>/<tasks>_qa/<task>_test_preds.json`."""
        answers, null_odds = self._answers(config, examples, features, predictions)
        final = {qid: "" if null_odds[qid] > config.qa_na_threshold else text for qid, text in answers.items()}
        directory = squad_postprocess.output_paths(results_dir, config.tasks_key, self.name)["preds"].parent
        return squad_postprocess.write_json(directory / f"{self.name}_test_preds.json", final)


def _only(dataset: list, ids) -> list:
    """The articles with only the questions in `ids` (max_examples reads a prefix of the file)."""
    return [{"paragraphs": [{"context": p["context"], "qas": [qa for qa in p["qas"] if qa["id"] in ids]}
                            for p in article["paragraphs"]]} for article in dataset]


@dataclasses.dataclass(frozen=True)
class ChunkTask:
    """CoNLL-2000 chunking; its label mapping covers the BIOES tags of every split file present."""

    name: str = chunking.TASK_NAME
    presets = {"max_seq_length": 256}
    dev_files = (("", "dev"),)
    batch_spec = {"labeled_positions": tf.TensorSpec([None, None], tf.int32),
                  "tag_ids": tf.TensorSpec([None, None], tf.int32),
                  "labels_mask": tf.TensorSpec([None, None], tf.float32)}
    batch = staticmethod(chunking.tagging_batch)

    def task_dir(self, finetuning_data) -> Path:
        return Path(finetuning_data) / self.name

    def read(self, finetuning_data, split: str, max_examples: Optional[int] = None) -> List[chunking.Sentence]:
        return chunking.read_split(self.task_dir(finetuning_data), split, max_examples)

    def label_mapping(self, finetuning_data) -> Dict[str, int]:
        return _chunk_labels(str(self.task_dir(finetuning_data)))

    def featurize(self, examples, tokenizer, config, task_id: int, split: str) -> chunking.TaggingFeatures:
        return chunking.featurize(examples, tokenizer, config.max_seq_length, self.label_mapping(config.raw_data_dir),
                                  task_id)

    def make_head(self, config, hidden_size: int) -> chunking.TaggingHead:
        return chunking.TaggingHead(self.name, len(self.label_mapping(config.raw_data_dir)), hidden_size)

    def score(self, config, examples, features, predictions, results_dir, split: str = "dev") -> Dict[str, float]:
        scores = chunking.score(features, predictions, self.label_mapping(config.raw_data_dir), config.conlleval_chunks)
        return {"f1": scores["f1"], **scores}  # the first key is the main score


@functools.lru_cache(maxsize=4)
def _chunk_labels(directory: str) -> Dict[str, int]:
    """The label mapping of a chunk data directory (read once per run)."""
    splits = [chunking.read_split(directory, "train"), chunking.read_split(directory, "dev")]
    if (Path(directory) / "test.txt").is_file():
        splits.append(chunking.read_split(directory, "test"))
    return chunking.label_mapping(*splits)


def get_span_task(name: str):
    """The task of an original task name (squad, squadv1, chunk), or None for other tasks."""
    if name in squad.TASKS:
        return SquadTask(name)
    if name == chunking.TASK_NAME:
        return ChunkTask()
    return None
