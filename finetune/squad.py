"""SQuAD 1.1 / 2.0: reading the official JSON and cutting questions + contexts into model windows.

Reading (the original's `QATask._add_examples`): each context is split into words
(`finetune.squad_context.Paragraph`), and an answer's `answer_start` (a character offset) gives its
first and last word. A bad file -- malformed JSON, a missing field, a question with no context --
raises InputError naming the file and the question id. A training question whose answer is not
found where `answer_start` points (the original's "Could not find answer") is skipped, as the
original did, and counted; real training sets have a few. More than MAX_UNFINDABLE_SHARE of them
means the wrong file (or offsets into another text) and is an error, as is such an answer in a dev
file, where the original never looked.

Featurizing (the original's `QATask.featurize`): the context's sub-tokens, which keep the
characters they came from (`finetune.squad_context.DocTokens`), go into
`[CLS] question [SEP] window [SEP]` (question cut to max_query_length tokens, segment 0; window
and its `[SEP]` segment 1), windows of at most max_seq_length - len(question) - 3 tokens starting
every min(window, doc_stride) tokens; feature eid = 1000 * example eid + window index. Gold
start/end point at the answer's tokens (those overlapping its characters) inside the window, or
both at 0 (`[CLS]`) when the window does not hold the whole answer or the question is unanswerable.
"""

import dataclasses
import itertools
import json
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from electra_tf.errors import InputError
from electra_tf.tokenization import Tokenizer
from finetune.inputs import Features, _tokenize, pad_batch
from finetune.squad_context import DocTokens, Paragraph, tokenize_paragraphs

MAX_UNFINDABLE_SHARE = 0.05  # of a training file's answerable questions; more is an error
SPAN_EID_FACTOR = 1000  # feature eid = 1000 * example eid + window index (the original's)
TASKS = {"squad": True, "squadv1": False}  # the original's task names -> is SQuAD 2.0


def split_file(finetuning_data, task_name: str, split: str) -> Path:
    """`finetuning_data/<task>/<split>.json`, the original's layout (split: train, dev or test)."""
    path = Path(finetuning_data) / task_name / f"{split}.json"
    if not path.is_file():
        raise InputError(f"task {task_name}: no {split} file {path}")
    return path


@dataclasses.dataclass
class Example:
    """One question. Positions are None when the split carries no answers (a test file)."""

    eid: int
    qas_id: str
    question: str
    paragraph: Paragraph
    is_impossible: bool = False
    answer_text: Optional[str] = None  # the first answer ("" when unanswerable)
    answer_start: int = -1  # its character offset in the context (-1 when unanswerable)
    start_word: int = -1
    end_word: int = -1
    answers: Tuple[Tuple[int, str], ...] = ()  # (answer_start, text) of every gold answer

    @property
    def answer_end(self) -> int:
        """One past the answer's last character."""
        return self.answer_start + len(self.answer_text or "")


def _field(mapping, key, kind, where: str):
    if not isinstance(mapping, dict) or key not in mapping:
        raise InputError(f"{where}: missing field {key!r}")
    value = mapping[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise InputError(f"{where}: field {key!r} is {type(value).__name__}, expected {kind.__name__}")
    return value


def load_dataset(path) -> list:
    """The `data` list (articles) of a SQuAD JSON file; InputError for unreadable or malformed JSON."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise InputError(f"{path}: cannot read it ({error})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"{path}: not valid SQuAD JSON ({error})") from None
    return _field(document, "data", list, str(path))


class UnfindableAnswer(InputError):
    """An answer whose text is not where its `answer_start` points."""


def _locate(paragraph: Paragraph, start: int, text: str) -> int:
    """The character offset of answer `text` given `answer_start` `start`, or -1 when the original
    would not have found it: its words at `start` .. `start + len(text) - 1` must contain the text
    (whitespace collapsed, lower-cased, as the original checks). An `answer_start` inside those
    words but off the exact character is corrected to where the text is; an answer that matches
    only so (another case or spacing) keeps `start`, whose words the original takes."""
    context = paragraph.context
    if text.strip() and 0 <= start and context[start:start + len(text)] == text:
        return start
    last = start + len(text) - 1
    if not text.strip() or start < 0 or last >= len(context):
        return -1
    first_word, last_word = int(paragraph.char_to_word[start]), int(paragraph.char_to_word[last])
    if " ".join(paragraph.words[first_word:last_word + 1]).lower().find(" ".join(text.split()).lower()) == -1:
        return -1
    found = context.find(text, int(paragraph.word_start[first_word]), int(paragraph.word_end[last_word]))
    return start if found < 0 else found


def _answers(qa: dict, paragraph: Paragraph, where: str) -> Tuple[Tuple[int, str], ...]:
    """(answer_start, text) of every answer of an answerable question, each checked."""
    answers = _field(qa, "answers", list, where)
    if not answers:
        raise InputError(f"{where}: answerable question has no answers")
    checked = []
    for number, answer in enumerate(answers):
        text = _field(answer, "text", str, f"{where} answer {number}")
        start = _field(answer, "answer_start", int, f"{where} answer {number}")
        located = _locate(paragraph, start, text)
        if located < 0:
            found = paragraph.context[max(start, 0):max(start, 0) + len(text)]
            raise UnfindableAnswer(f"{where}: answer {number}: answer_start {start} does not point at the answer "
                                   f"text {text!r} (the context there reads {found!r})")
        checked.append((located, text))
    return tuple(checked)


def read_examples(path, v2: bool, max_examples: Optional[int] = None, training: bool = False,
                  log: Callable[[str], None] = print, labels: bool = True) -> List[Example]:
    """The questions of a SQuAD file, in file order; `v2` reads `is_impossible` (SQuAD 2.0).

    Answers are read whenever the file has them (train and dev; the scorer reads the dev answers
    from the file itself, the first answer's positions give the dev loss). With `training`, a
    question whose answer cannot be found is skipped and the count goes to `log`; otherwise it is
    an error. With `labels` false (a test file, whatever it holds) answers are not read at all."""
    unfindable: List[str] = []
    examples = list(itertools.islice(_questions(path, v2, training, unfindable, labels), max_examples))
    if unfindable:
        _check_unfindable(path, unfindable, len(unfindable) + sum(bool(e.answers) for e in examples), log)
    if not examples:
        raise InputError(f"{path}: holds no questions")
    return examples


def _questions(path, v2: bool, training: bool, unfindable: List[str], labels: bool = True) -> Iterator[Example]:
    """The examples of `read_examples`, one by one; skipped questions go to `unfindable`."""
    eid, seen = 0, set()
    for article_index, article in enumerate(load_dataset(path)):
        where_article = f"{path}: article {article_index}"
        for paragraph_index, paragraph_json in enumerate(_field(article, "paragraphs", list, where_article)):
            questions = paragraph_json.get("qas") if isinstance(paragraph_json, dict) else None
            first_id = questions[0].get("id") if questions and isinstance(questions[0], dict) else None
            context = _field(paragraph_json, "context", str,
                             f"{where_article} paragraph {paragraph_index} (question {first_id})")
            paragraph = Paragraph.split(context)
            for qa in _field(paragraph_json, "qas", list, where_article):
                qas_id = qa.get("id", "?") if isinstance(qa, dict) else "?"
                where = f"{path}: question {qas_id}"
                _field(qa, "id", str, where)
                if qas_id in seen and not training:  # predictions and scores are keyed by id
                    raise InputError(f"{where}: an earlier question has the same id (ids must be unique)")
                seen.add(qas_id)
                question = _field(qa, "question", str, where)
                if not paragraph.words:
                    raise InputError(f"{where}: the question has no context (its paragraph is empty)")
                labelled = labels and "answers" in qa  # a test file has no answers
                is_impossible = v2 and labelled and _field(qa, "is_impossible", bool, where)
                example = Example(eid, qas_id, question, paragraph, is_impossible)
                if is_impossible:
                    example.answer_text = ""
                elif labelled:
                    try:
                        example.answers = _answers(qa, paragraph, where)
                    except UnfindableAnswer as error:
                        if not training:
                            raise
                        unfindable.append(str(error))
                        continue
                    example.answer_start, example.answer_text = example.answers[0]
                    example.start_word = int(paragraph.char_to_word[example.answer_start])
                    example.end_word = int(paragraph.char_to_word[example.answer_end - 1])
                eid += 1
                yield example


def _check_unfindable(path, unfindable: List[str], answerable: int, log: Callable[[str], None]) -> None:
    """Logs the skipped questions, or raises when they are too many for a sound file."""
    share = len(unfindable) / answerable
    if share > MAX_UNFINDABLE_SHARE:
        raise InputError(f"{path}: the answer of {len(unfindable)} of {answerable} answerable questions "
                         f"({share:.0%}) is not where its answer_start points, more than the "
                         f"{MAX_UNFINDABLE_SHARE:.0%} a sound training file has: is it the right file? "
                         f"First: {unfindable[0]}")
    log(f"{path}: skipped {len(unfindable)} of {answerable} answerable training questions whose answer is not "
        f"where answer_start points (the original's \"Could not find answer\"); first: {unfindable[0]}")


@dataclasses.dataclass
class QAFeatures(Features):
    """Windows of `Features` plus what the QA head, loss and postprocessing need, per window."""

    eids: np.ndarray  # int64 [N]: 1000 * example eid + window index
    example_index: np.ndarray  # int32 [N]: position of the example in the featurized list
    doc_start: np.ndarray  # int32 [N]: the window's first sub-token in DocTokens
    doc_offset: np.ndarray  # int32 [N]: where that token sits in the input (len(question) + 2)
    doc_length: np.ndarray  # int32 [N]
    max_context: List[np.ndarray]  # each bool [doc_length]: is this window the token's best context
    start_positions: np.ndarray  # int32 [N]
    end_positions: np.ndarray  # int32 [N]
    is_impossible: np.ndarray  # float32 [N]
    doc_tokens: Dict[int, DocTokens]  # id(paragraph) -> its sub-tokens


def window_starts(num_tokens: int, window: int, doc_stride: int) -> List[Tuple[int, int]]:
    """(start, length) of each window over num_tokens sub-tokens (the original's doc spans)."""
    spans, start = [], 0
    while start < num_tokens:
        length = min(num_tokens - start, window)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, doc_stride)
    return spans


def max_context(spans: List[Tuple[int, int]], num_tokens: int) -> List[np.ndarray]:
    """Per window, whether it is each of its tokens' window with most context: the highest
    min(left, right) + 0.01 * window length, the first window on ties (the original's rule)."""
    scores = np.full([len(spans), num_tokens], -np.inf)
    for i, (start, length) in enumerate(spans):
        position = np.arange(length)
        scores[i, start:start + length] = np.minimum(position, length - 1 - position) + 0.01 * length
    best = np.argmax(scores, axis=0)  # [T]
    return [best[start:start + length] == i for i, (start, length) in enumerate(spans)]


def featurize(examples: Sequence[Example], tokenizer: Tokenizer, max_seq_length: int, doc_stride: int,
              max_query_length: int, task_id: int = 0, drop_windows_without_answer: bool = False) -> QAFeatures:
    """Every window of every example (see the module docstring). A window that does not hold the
    gold answer points at [CLS] (start = end = 0), as in the original's code for SQuAD 1.1 and 2.0
    alike; with `drop_windows_without_answer` (an option for SQuAD 1.1 training) it is left out."""
    doc_tokens = tokenize_paragraphs([e.paragraph for e in examples], tokenizer)
    questions = _tokenize(tokenizer, [e.question for e in examples])
    rows = {name: [] for name in ("token_ids", "segment_ids", "eids", "example_index", "doc_start", "doc_offset",
                                  "doc_length", "max_context", "start_positions", "end_positions",
                                  "is_impossible")}
    for index, (example, query) in enumerate(zip(examples, questions)):
        query = list(query[:max_query_length])
        tokens = doc_tokens[id(example.paragraph)]
        window = max_seq_length - len(query) - 3
        if window < 1:
            raise InputError(f"max_seq_length {max_seq_length} leaves no room for the context after a "
                             f"{len(query)}-token question (max_query_length {max_query_length})")
        gold = None
        if example.answer_text and not example.is_impossible:
            gold = tokens.span_of(example.answer_start, example.answer_end)
        if not len(tokens.ids):  # no window could hold an answer: say so rather than answer nothing
            raise InputError(f"question {example.qas_id}: its context has no tokens (only characters the "
                             f"tokenizer drops)")
        spans = window_starts(len(tokens.ids), window, doc_stride)
        for span_index, ((start, length), best) in enumerate(zip(spans, max_context(spans, len(tokens.ids)))):
            offset = len(query) + 2
            ids = [tokenizer.cls_id, *query, tokenizer.sep_id, *tokens.ids[start:start + length], tokenizer.sep_id]
            inside = gold is not None and start <= gold[0] and gold[1] < start + length
            if drop_windows_without_answer and not inside:
                continue
            rows["token_ids"].append(np.asarray(ids, np.int32))
            rows["segment_ids"].append(np.asarray([0] * offset + [1] * (length + 1), np.int32))
            rows["eids"].append(SPAN_EID_FACTOR * example.eid + span_index)
            rows["example_index"].append(index)
            rows["doc_start"].append(start)
            rows["doc_offset"].append(offset)
            rows["doc_length"].append(length)
            rows["max_context"].append(best)
            rows["start_positions"].append(gold[0] - start + offset if inside else 0)
            rows["end_positions"].append(gold[1] - start + offset if inside else 0)
            rows["is_impossible"].append(float(example.is_impossible))
    n = len(rows["eids"])
    ints = lambda name: np.asarray(rows[name], np.int32)  # noqa: E731
    return QAFeatures(rows["token_ids"], rows["segment_ids"], np.full(n, task_id, np.int32),
                      np.zeros(n, np.int32), np.zeros(n, np.float32), np.asarray(rows["eids"], np.int64),
                      ints("example_index"), ints("doc_start"), ints("doc_offset"), ints("doc_length"),
                      rows["max_context"], ints("start_positions"), ints("end_positions"),
                      np.asarray(rows["is_impossible"], np.float32), doc_tokens)


def qa_batch(features: QAFeatures, indices: Sequence[int], pad_to: Optional[int] = None) -> dict:
    """`finetune.inputs.pad_batch` plus start_positions, end_positions (int32 [B]) and
    is_impossible (float32 [B])."""
    batch = pad_batch(features, indices, pad_to)
    indices = np.asarray(indices)
    batch.update(start_positions=features.start_positions[indices], end_positions=features.end_positions[indices],
                 is_impossible=features.is_impossible[indices])
    return batch
