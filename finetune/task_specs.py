"""A user's task, defined by a few fields under a name of the user's choosing in `--hparams`:

    {"task_names": ["reviews"],
     "tasks": {"reviews": {"type": "classification", "format": "csv",
                           "train": "reviews/train.csv", "dev": "reviews/dev.csv",
                           "text": "text", "label": "rating"}}}

`check_spec` refuses an unknown type or field (listing the valid ones) and a value of the wrong
kind; `build_task` makes the task of a checked spec. Every field is documented in
docs/finetuning.md ("Your own tasks"); FIELDS below is the list it documents.
"""

import math
from typing import Optional

from electra_tf.errors import InputError
from finetune.classification import ClassificationTask
from finetune.multilabel import MultilabelTask
from finetune.regression import RegressionTask
from finetune.tagging import SCHEMES, TaggingTask
from finetune.task import Task

_COLUMN = (str, int)
_FILES = {"type": str, "format": str, "train": str, "dev": str, "test": str}
_SENTENCE = {**_FILES, "text": _COLUMN, "text_b": _COLUMN, "label": _COLUMN, "id": _COLUMN, "header": bool,
             "quoting": bool}
FIELDS = {  # type -> {field: the JSON kind(s) it takes}
    "classification": {**_SENTENCE, "labels": list},
    "multilabel": {**_SENTENCE, "labels": list, "label_delimiter": str, "threshold": (int, float)},
    "regression": {**_SENTENCE, "scale": (int, float)},
    "tagging": {**_FILES, "text": str, "label": str, "tag_column": int, "scheme": str},
}
FORMATS = {"classification": ("csv", "tsv", "jsonl"), "multilabel": ("csv", "tsv", "jsonl"),
           "regression": ("csv", "tsv", "jsonl"), "tagging": ("conll", "jsonl")}
REQUIRED = ("type", "format", "train", "dev")
TYPES = {"classification": ClassificationTask, "multilabel": MultilabelTask, "regression": RegressionTask,
         "tagging": TaggingTask}  # type -> its Task class (`from_spec`)


def _kind(expected) -> str:
    kinds = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join({str: "a string", int: "an integer", float: "a number", bool: "true or false",
                        list: "a list"}[k] for k in kinds)


def _finite(number) -> bool:
    """math.isfinite, false too for an integer past a float's range (JSON has no bound)."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def check_spec(name: str, spec) -> None:
    """Raises InputError naming the task and field of the first fault of a user task's spec."""
    where = f"tasks.{name}"
    if not isinstance(spec, dict):
        raise InputError(f"{where} must be an object of task fields (type, format, train, dev, ...)")
    kind = spec.get("type")
    if kind not in FIELDS:
        raise InputError(f"{where}.type {kind!r} is not one of: {', '.join(FIELDS)}")
    fields = FIELDS[kind]
    for field, value in spec.items():
        if field not in fields:
            raise InputError(f"{where}: unknown field {field!r} for a {kind} task; its fields are "
                             f"{', '.join(fields)}")
        expected = fields[field]
        if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
            raise InputError(f"{where}.{field} must be {_kind(expected)}, got {value!r}")
    missing = [field for field in REQUIRED if field not in spec]
    if missing:
        raise InputError(f"{where}: missing {', '.join(missing)}")
    if spec["format"] not in FORMATS[kind]:
        raise InputError(f"{where}.format {spec['format']!r} is not one of: {', '.join(FORMATS[kind])} "
                         f"(for a {kind} task)")
    by_index = [field for field in ("text", "text_b", "label", "id") if isinstance(spec.get(field), int)]
    if spec["format"] == "jsonl" and by_index:
        raise InputError(f"{where}.{by_index[0]}: a JSONL file's fields are named by key, not by index")
    if "scheme" in spec and spec["scheme"] not in SCHEMES:
        raise InputError(f"{where}.scheme {spec['scheme']!r} is not one of: {', '.join(SCHEMES)}")
    if "labels" in spec and not (spec["labels"] and all(isinstance(v, str) and v.strip() for v in spec["labels"])):
        raise InputError(f"{where}.labels must be a non-empty list of non-empty strings")
    if "labels" in spec and len(spec["labels"]) < TYPES[kind].min_labels:
        raise InputError(f"{where}.labels {spec['labels']!r}: a {kind} task needs at least "
                         f"{TYPES[kind].min_labels} labels")
    if spec.get("label_delimiter") == "":
        raise InputError(f"{where}.label_delimiter must not be empty")
    if "labels" in spec and len(set(spec["labels"])) < len(spec["labels"]):
        repeated = next(label for label in spec["labels"] if spec["labels"].count(label) > 1)
        raise InputError(f"{where}.labels names {repeated!r} twice")
    if not 0 < spec.get("threshold", 0.5) < 1:
        raise InputError(f"{where}.threshold must lie between 0 and 1 (a probability), got {spec['threshold']!r}")
    if "scale" in spec and not (_finite(spec["scale"]) and spec["scale"] != 0):  # its kind is checked above
        raise InputError(f"{where}.scale must be a finite number other than 0, got {spec['scale']!r:.40}")


def build_task(name: str, spec: dict, root: Optional[str], card: Optional[dict] = None) -> Task:
    """The task of a checked spec, its paths under `root`; `card` (a fine-tuned model's) gives the
    labels or tags it learned, so a model needs no train file to predict."""
    return TYPES[spec["type"]].from_spec(name, spec, root, card or {})

