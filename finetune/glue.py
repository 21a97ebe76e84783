"""The GLUE tasks: where their files are, which columns hold what, their labels and server names.

Each task is described by a `GlueTask` (data, not code): the original's short name (cola, sst,
mrpc, sts, qqp, mnli, qnli, rte, wnli), the GLUE download's folder name, the columns of its train /
dev and test TSVs (docs/fidelity.md#glue-reading), its labels, and the GLUE server's file name and label strings.
`read_split` turns one split into `Example`s; TSVs are read with quoting off, as the original did
(rows hold unbalanced double quotes), a UTF-8 BOM is dropped (MRPC), and a short row or an unknown
label raises InputError naming the file and line.
"""

import dataclasses
from pathlib import Path
from typing import List, Optional, Tuple

from electra_tf.errors import InputError
from finetune.table_files import RowId


@dataclasses.dataclass(frozen=True)
class Columns:
    """Where a split's fields are; negative indices count from the row's end, as the original."""

    text_a: int
    text_b: Optional[int] = None
    label: Optional[int] = None  # None: unlabelled (test)
    index: Optional[int] = None  # the GLUE `index` / `id` column of a test file
    header: bool = True


@dataclasses.dataclass(frozen=True)
class GlueTask:
    name: str  # the original's task name, used in file and result names
    folder: str  # the GLUE download's folder name (also accepted as a task name)
    labels: Tuple[str, ...]  # () for regression
    train: Columns
    test: Columns
    metrics: Tuple[str, ...]  # reported keys; the first is the task's main score
    server_name: str  # the GLUE server's file name (without .tsv)
    double_unordered: bool = False  # train also with the two texts swapped (MRPC, STS-B)
    # split name -> file stem; "dev" splits beyond the first get a metric prefix (MNLI mismatched)
    dev_files: Tuple[Tuple[str, str], ...] = (("", "dev"),)
    test_files: Tuple[Tuple[str, str], ...] = ()  # (server file name, file stem)

    @property
    def is_regression(self) -> bool:
        return not self.labels


# The header names of the label column in GLUE's train and dev files (MRPC's first, the others'
# last); a test file's header has none of them.
LABEL_HEADERS = frozenset({"label", "score", "Quality", "is_duplicate", "gold_label"})
STS_MAX = 5.0  # STS-B scores lie in [0, 5]; the original trains on score / 5
_BINARY = ("0", "1")
_ENTAILMENT = ("entailment", "not_entailment")
_NLI = ("contradiction", "entailment", "neutral")  # the original's order
_PAIR = Columns(1, 2, 3)
_PAIR_TEST = Columns(1, 2, index=0)

TASKS = {t.name: t for t in (
    GlueTask("cola", "CoLA", _BINARY, Columns(3, label=1, header=False), Columns(1, index=0),
             ("mcc",), "CoLA"),
    GlueTask("sst", "SST-2", _BINARY, Columns(0, label=1), Columns(1, index=0), ("accuracy",), "SST-2"),
    GlueTask("mrpc", "MRPC", _BINARY, Columns(3, 4, 0), Columns(3, 4, index=0), ("accuracy", "f1"),
             "MRPC", double_unordered=True),
    GlueTask("sts", "STS-B", (), Columns(-3, -2, -1), Columns(-2, -1, index=0),
             ("pearson", "spearman", "mse"), "STS-B", double_unordered=True),
    GlueTask("qqp", "QQP", _BINARY, Columns(3, 4, 5), Columns(1, 2, index=0), ("accuracy", "f1"), "QQP"),
    GlueTask("mnli", "MNLI", _NLI, Columns(8, 9, -1), Columns(8, 9, index=0),
             ("accuracy", "mm_accuracy"), "MNLI-m",
             dev_files=(("", "dev_matched"), ("mm_", "dev_mismatched")),
             test_files=(("MNLI-m", "test_matched"), ("MNLI-mm", "test_mismatched"),
                         ("AX", "diagnostic"))),
    GlueTask("qnli", "QNLI", _ENTAILMENT, _PAIR, _PAIR_TEST, ("accuracy",), "QNLI"),
    GlueTask("rte", "RTE", _ENTAILMENT, _PAIR, _PAIR_TEST, ("accuracy",), "RTE"),
    GlueTask("wnli", "WNLI", _BINARY, _PAIR, _PAIR_TEST, ("accuracy",), "WNLI"),
)}
_ALIASES = {**{t.folder.lower(): t.name for t in TASKS.values()}, **{t: t for t in TASKS}}
_ALIASES.update({"sst2": "sst", "stsb": "sts", "sst-2": "sst", "sts-b": "sts"})
# The AX diagnostic set: columns index, sentence1, sentence2 (no labels), MNLI's label set.
_DIAGNOSTIC = Columns(1, 2, index=0)
# The original's span-extraction and tagging tasks (finetune.squad_task, finetune.chunk_preset) and its
# MRQA tasks (not supported).
SPAN_TASKS = ("squad", "squadv1", "chunk")
NOT_YET = ("newsqa", "naturalqs", "triviaqa", "searchqa")


def canonical_task_name(name: str) -> str:
    """The original's name for a task given by it, or by its GLUE folder name (any case)."""
    if isinstance(name, str) and name.lower() in SPAN_TASKS:
        return name.lower()
    try:
        return _ALIASES[name.lower()]
    except (KeyError, AttributeError):
        if name in NOT_YET:
            raise InputError(f"task_names: {name!r} is not supported yet (the MRQA tasks are not ported); "
                             f"give task_names, e.g. [\"mrpc\"]") from None
        valid = (", ".join(sorted(TASKS)) + " (or " + ", ".join(t.folder for t in TASKS.values()) + "), "
                 + ", ".join(SPAN_TASKS))
        raise InputError(f"task_names: unknown task {name!r}; tasks are {valid}") from None


def get_task(name: str) -> GlueTask:
    return TASKS[canonical_task_name(name)]


@dataclasses.dataclass
class Example:
    """One row: eid is its position in the split (the original's eid); index the GLUE test index
    or a user task's id."""

    eid: int
    text_a: str
    text_b: Optional[str]
    label: Optional[object]  # label position (int) or float target; None when unlabelled
    index: RowId = None


def task_dir(finetuning_data: Path, task: GlueTask) -> Path:
    """`finetuning_data/<task>` under the original's name or the GLUE folder name."""
    for name in (task.name, task.folder):
        if (finetuning_data / name).is_dir():
            return finetuning_data / name
    raise InputError(f"no data for task {task.name}: neither {finetuning_data / task.name} nor "
                     f"{finetuning_data / task.folder} is a directory")


def split_file(finetuning_data: Path, task: GlueTask, stem: str) -> Path:
    """The TSV of a split (`train`, `dev_matched`, `diagnostic`, ...). MNLI's diagnostic set may also
    sit where the GLUE download puts it: `diagnostic/diagnostic.tsv` or `AX/test.tsv`."""
    candidates = [task_dir(finetuning_data, task) / f"{stem}.tsv"]
    if stem == "diagnostic":
        candidates += [finetuning_data / "diagnostic" / "diagnostic.tsv", finetuning_data / "AX" / "test.tsv",
                       finetuning_data / "ax" / "test.tsv"]
    for path in candidates:
        if path.is_file():
            return path
    raise InputError(f"task {task.name}: no {stem} file; looked for " + ", ".join(map(str, candidates)))


def read_rows(path: Path, header: bool, max_rows: Optional[int] = None) -> List[Tuple[int, List[str]]]:
    """(1-based line number, tab-separated fields) of each non-empty data row, quoting off."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: MRPC's header starts with a BOM
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read it ({error})") from None
    rows = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if (header and number == 1) or not line.strip():
            continue
        if max_rows is not None and len(rows) >= max_rows:
            break
        rows.append((number, line.split("\t")))
    return rows


def _field(row: List[str], column: int, path: Path, line: int, what: str) -> str:
    if not -len(row) <= column < len(row):
        raise InputError(f"{path}:{line}: malformed row: {len(row)} tab-separated field(s), "
                         f"no column {column} for the {what}")
    return row[column]


def _label(task: GlueTask, raw: str, path: Path, line: int):
    if task.is_regression:
        try:
            return float(raw) / STS_MAX
        except ValueError:
            raise InputError(f"{path}:{line}: score {raw!r} is not a number") from None
    if raw not in task.labels:
        raise InputError(f"{path}:{line}: unknown label {raw!r} for {task.name}; "
                         f"expected one of {', '.join(task.labels)}")
    return task.labels.index(raw)


def read_examples(path: Path, task: GlueTask, columns: Columns, max_rows: Optional[int] = None,
                  swap: bool = False) -> List[Example]:
    """The examples of one TSV; `swap` adds each pair again with text_a and text_b exchanged."""
    examples = []
    for line, row in read_rows(path, columns.header, max_rows):
        text_a = _field(row, columns.text_a, path, line, "first text")
        text_b = None if columns.text_b is None else _field(row, columns.text_b, path, line, "second text")
        label = None
        if columns.label is not None:
            label = _label(task, _field(row, columns.label, path, line, "label").strip(), path, line)
        index = None if columns.index is None else _field(row, columns.index, path, line, "index")
        examples.append(Example(len(examples), text_a, text_b, label, index))
    if swap:
        examples += [Example(len(examples) + e.eid, e.text_b, e.text_a, e.label, e.index) for e in examples]
    if not examples:
        raise InputError(f"{path}: holds no examples")
    return examples


def read_split(finetuning_data: Path, task: GlueTask, split: str, max_rows: Optional[int] = None,
               double_unordered: bool = True) -> List[Example]:
    """`split` is "train", a dev stem (`dev`, `dev_matched`, ...) or a test stem (`test`, ...)."""
    path = split_file(finetuning_data, task, split)
    if split == "diagnostic":
        return read_examples(path, task, _DIAGNOSTIC, max_rows)
    if split.startswith("test"):
        return read_examples(path, task, task.test, max_rows)
    swap = split == "train" and double_unordered and task.double_unordered
    return read_examples(path, task, task.train, max_rows, swap=swap)


def server_splits(task: GlueTask) -> Tuple[Tuple[str, str], ...]:
    """(server file name, split stem) of each test file of the task."""
    return task.test_files or ((task.server_name, "test"),)


def server_label(task: GlueTask, prediction) -> str:
    """A prediction (class position or normalised score) as the GLUE server expects it."""
    if task.is_regression:
        return f"{min(max(float(prediction) * STS_MAX, 0.0), STS_MAX):.3f}"
    return task.labels[int(prediction)]
