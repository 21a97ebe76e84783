"""Bad input to a user's task: one InputError naming the file and line (and the column or field),
and nothing written."""

import json

import pytest

import run_finetuning
from electra_tf.errors import InputError
from finetune.config import FinetuningConfig
from finetune.predict_inputs import InputSource
from finetune.task_data import load_task_data, make_tokenizer
from finetune.tasks import get_task

HPARAMS = dict(model_size="tiny", random_init=True, max_seq_length=32)
CSV = {"type": "classification", "format": "csv", "train": "t/train.csv", "dev": "t/dev.csv"}
GOOD_CSV = "text,label\nfine film,pos\ndull film,neg\n"
TAGGING_JSONL = {"type": "tagging", "format": "jsonl", "train": "t/train.jsonl", "dev": "t/train.jsonl"}
MULTILABEL_JSONL = {**CSV, "type": "multilabel", "format": "jsonl", "train": "t/train.jsonl", "dev": "t/train.jsonl"}


def load(tmp_path, spec: dict, files: dict, **hparams):
    """Writes `files` ({name under finetuning_data/t: text or bytes}) and loads the task `t`."""
    folder = tmp_path / "finetuning_data" / "t"
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    config = FinetuningConfig.from_hparams("m", str(tmp_path), {**HPARAMS, "task_names": ["t"], "tasks": {"t": spec},
                                                                **hparams})
    return load_task_data(config, make_tokenizer(config))


@pytest.fixture(autouse=True)
def vocab(tmp_path, vocab_file):
    (tmp_path / "vocab.txt").symlink_to(vocab_file)


@pytest.mark.parametrize("spec, files, message", [
    ({**CSV, "text": "review"}, {"train.csv": GOOD_CSV, "dev.csv": GOOD_CSV},
     r"t/train.csv:1: no column 'review' for the text; the header's columns are 'text', 'label'"),
    (CSV, {"train.csv": GOOD_CSV + "odd,film,pos\n", "dev.csv": GOOD_CSV},
     r"t/train.csv:4: 3 fields, but the header has 2"),
    (CSV, {"train.csv": GOOD_CSV + "lonely\n", "dev.csv": GOOD_CSV}, r"t/train.csv:4: 1 fields, but the header has 2"),
    (CSV, {"train.csv": GOOD_CSV + '"never closed,pos\n', "dev.csv": GOOD_CSV},
     r"t/train.csv:4: malformed CSV .*quote"),
    (CSV, {"train.csv": GOOD_CSV + "line one\rstill one,pos\n", "dev.csv": GOOD_CSV},
     r"t/train.csv:4: malformed CSV: a carriage return \(\\r\) inside an unquoted field"),
    (CSV, {"train.csv": "text,label\n ,pos\n", "dev.csv": GOOD_CSV},
     r"t/train.csv:2: the text \(column 'text'\) is empty"),
    (CSV, {"train.csv": GOOD_CSV, "dev.csv": GOOD_CSV + "so-so film,meh\n"},
     r"t/dev.csv:4: label 'meh' is not one of the task's labels \(neg, pos\)"),
    ({**CSV, "type": "regression"}, {"train.csv": "text,label\nfine,4.5\nbad,high\n", "dev.csv": GOOD_CSV},
     r"t/train.csv:3: target 'high' is not a number"),
    ({**CSV, "type": "multilabel"}, {"train.csv": 'text,label\nfine,"[""a""]"\nbad,a;b\n', "dev.csv": GOOD_CSV},
     r"t/train.csv:3: labels 'a;b' are neither a JSON list"),
    (CSV, {"train.csv": b"text,label\nfine,pos\ncaf\xe9,neg\n", "dev.csv": GOOD_CSV},
     r"t/train.csv:3: bytes that are not UTF-8"),
    (TAGGING_JSONL,
     {"train.jsonl": '{"tokens": ["a", "b"], "tags": ["O", "O"]}\n'
                     '{"tokens": ["John", "ran", "off"], "tags": ["B-PER", "O"]}\n'},
     r"t/train.jsonl:2: 3 tokens but 2 tags"),
    (TAGGING_JSONL,
     {"train.jsonl": '{"tokens": ["a"], "tags": ["O"]}\n{"tokens": [], "tags": []}\n'},
     r"t/train.jsonl:2: an empty sentence \(no tokens\)"),
    (TAGGING_JSONL,
     {"train.jsonl": '{"tokens": ["John"], "tags": ["B-PER"]}\n{"tokens": ["Paris"], "tags": ["LOC"]}\n'},
     r"t/train.jsonl:2: tag 'LOC' is not O or B-/I-<type> \(iob2\)"),
    ({"type": "tagging", "format": "conll", "train": "t/train.txt", "dev": "t/train.txt"},
     {"train.txt": "-DOCSTART- -X- O\n\nJohn NNP B-PER\nran VBD X-PER\n"},
     r"t/train.txt:4: tag 'X-PER' is not O or B-/I-<type>"),
    ({"type": "tagging", "format": "conll", "train": "t/train.txt", "dev": "t/dev.txt", "scheme": "iob2"},
     {"train.txt": "John B-PER\nran O\n", "dev.txt": "in O\n\n-DOCSTART- -X- O\n\nto O\nLyon B-LOC\n"},
     r"t/dev.txt:5: entity type 'LOC', which the train file \(.*t/train.txt\) never has"),
    ({"type": "tagging", "format": "conll", "train": "t/train.txt", "dev": "t/train.txt"},
     {"train.txt": "-DOCSTART- -X- O\n\n"}, r"t/train.txt: holds no sentences"),
    # one class: a softmax over it has loss 0 and scores 100 (it trained, exit 0); no label: dnnl aborted
    (CSV, {"train.csv": "text,label\nfine film,pos\ngood film,pos\n", "dev.csv": GOOD_CSV},
     r"t/train.csv: its labels are \['pos'\]: a classification task needs at least 2"),
    (MULTILABEL_JSONL,
     {"train.jsonl": '{"text": "a", "label": []}\n{"text": "b", "label": []}\n'},
     r"t/train.jsonl: its labels are \[\]: a multilabel task needs at least 1"),
    (MULTILABEL_JSONL,
     {"train.jsonl": '{"text": "a", "label": ["x"]}\n{"text": "b", "label": ["", "x"]}\n'},
     r"t/train.jsonl:2: the label '' of \['', 'x'\] is empty"),
    (MULTILABEL_JSONL,
     {"train.jsonl": '{"text": "a", "label": ["x"]}\n{"text": "b", "label": [["x"]]}\n'},
     r"t/train.jsonl:2: the label \['x'\] of \[\['x'\]\] is list, not text"),
    (TAGGING_JSONL,
     {"train.jsonl": '{"tokens": ["a"], "tags": ["O"]}\n{"tokens": ["a", ["b"]], "tags": ["O", "O"]}\n'},
     r"t/train.jsonl:2: 'tokens' must be a JSON list of words \(non-empty strings\)"),
    (TAGGING_JSONL,
     {"train.jsonl": '{"tokens": ["a", ""], "tags": ["O", "O"]}\n'},
     r"t/train.jsonl:1: 'tokens' must be a JSON list of words"),
    ({**CSV, "format": "jsonl", "train": "t/train.jsonl", "dev": "t/train.jsonl", "id": "id", "test": "t/train.jsonl"},
     {"train.jsonl": '{"text": "a", "label": "x", "id": 1}\n{"text": "b", "label": "y", "id": {"doc": 7}}\n'},
     r"t/train.jsonl:2: the id \{'doc': 7\} is dict, not text or a number"),
    ({**CSV, "format": "jsonl", "train": "t/train.jsonl", "dev": "t/train.jsonl", "id": "id"},
     {"train.jsonl": '{"text": "a", "label": "x", "id": 1}\n{"text": "b", "label": "y", "id": NaN}\n'},
     r"t/train.jsonl:2: the id nan is not a finite number"),
    # JSON's NaN (pandas' missing value) is no text and no label "nan"
    ({**CSV, "format": "jsonl", "train": "t/train.jsonl", "dev": "t/train.jsonl"},
     {"train.jsonl": '{"text": "a", "label": "x"}\n{"text": NaN, "label": "y"}\n'},
     r"t/train.jsonl:2: the text \(column 'text'\) is nan, not text \(a missing value\?\)"),
    ({**CSV, "format": "jsonl", "train": "t/train.jsonl", "dev": "t/train.jsonl"},
     {"train.jsonl": '{"text": "a", "label": "x"}\n{"text": "b", "label": NaN}\n'},
     r"t/train.jsonl:2: the label is nan, not text"),
    # without a header every row is as wide as the first: an unquoted comma in a text is an error
    ({**CSV, "header": False, "text": 0, "label": 1}, {"train.csv": "fine film,pos\ngreat, fun,pos\n",
                                                        "dev.csv": "fine film,pos\n"},
     r"t/train.csv:2: 3 fields, but line 1 has 2"),
    # a column given by name where the file has no header: an error for the optional id too (it was
    # never read, silently)
    ({**CSV, "header": False, "text": 0, "label": 1, "id": "row"}, {"train.csv": "fine film,pos\n",
                                                                     "dev.csv": "fine film,pos\n"},
     r"t/train.csv: id column 'row' is a name, but the task says the file has no header: give its index"),
    # a list as Python (and pandas) write it is not split on the delimiter into labels "['a'" and " 'b']"
    ({**CSV, "type": "multilabel", "label_delimiter": ","},
     {"train.csv": 'text,label\nfine,a\nbad,"[\'a\', \'b\']"\n', "dev.csv": GOOD_CSV},
     r"t/train.csv:3: labels \"\['a', 'b'\]\" are written as a Python list, not as JSON"),
    ({**CSV, "text": "text"}, {"train.csv": "text,text,label\nfine,film,pos\n", "dev.csv": GOOD_CSV},
     r"t/train.csv:1: the header names 'text' \(text\) 2 times: give its index"),
    # a label in brackets is no list: split on the delimiter as before (here into one unknown label)
    ({**CSV, "type": "multilabel", "label_delimiter": ",", "labels": ["[urgent]", "spam"]},
     {"train.csv": 'text,label\nfine,[urgent]\nbad,"[urgent],spam"\nugly,[late]\n', "dev.csv": GOOD_CSV},
     r"t/train.csv:4: label '\[late\]' is not one of the task's labels"),
    # past a float's range, or past Python's 4,300-digit limit for a JSON integer
    ({**CSV, "type": "regression", "format": "jsonl", "train": "t/train.jsonl", "dev": "t/train.jsonl"},
     {"train.jsonl": '{"text": "a", "label": 1}\n{"text": "b", "label": 1%s}\n' % ("0" * 400)},
     r"t/train.jsonl:2: target 10{19}\.\.\. \(401 digits\) is past a float's range"),
    ({**CSV, "format": "jsonl", "train": "t/train.jsonl", "dev": "t/train.jsonl"},
     {"train.jsonl": '{"text": "a", "label": "x"}\n{"text": "b", "label": 1%s}\n' % ("0" * 5000)},
     r"t/train.jsonl:2: not a JSON object \(a number of over 4,300 digits\)"),
])
def test_bad_input_names_the_file_and_line(tmp_path, spec, files, message):
    with pytest.raises(InputError, match=message):
        load(tmp_path, spec, files)


@pytest.mark.parametrize("spec, files, message", [
    ({**TAGGING_JSONL, "test": "t/test.jsonl"},
     {"train.jsonl": '{"tokens": ["a"], "tags": ["O"]}\n', "test.jsonl": "\n"}, r"t/test.jsonl: holds no sentences"),
    ({"type": "tagging", "format": "conll", "train": "t/train.txt", "dev": "t/train.txt", "test": "t/test.txt"},
     {"train.txt": "John B-PER\n", "test.txt": "-DOCSTART- -X- O\n\n"}, r"t/test.txt: holds no sentences"),
])
def test_a_tagging_test_file_without_a_sentence_is_refused_before_training(tmp_path, spec, files, message):
    """Read with the data, before anything trains: it failed with a KeyError after the first trial."""
    with pytest.raises(InputError, match=message):
        load(tmp_path, spec, files, write_test_outputs=True)


@pytest.mark.parametrize("tasks, message", [
    ({"t": {**CSV, "type": "ranking"}}, r"tasks.t.type 'ranking' is not one of: classification, multilabel, "
                                        r"regression, tagging"),
    ({"t": {**CSV, "colour": "red"}}, r"tasks.t: unknown field 'colour' for a classification task; its fields "
                                      r"are type, format, train, dev, test, text, text_b, label, id"),
    ({"t": {**CSV, "header": "yes"}}, r"tasks.t.header must be true or false, got 'yes'"),
    ({"t": {**CSV, "format": "conll"}}, r"tasks.t.format 'conll' is not one of: csv, tsv, jsonl"),
    ({"mrpc": CSV}, r"tasks.mrpc: 'mrpc' is a built-in task's name"),
    ({"my/task": CSV}, r"tasks.my/task: a task name is letters, digits"),
    ({"embeddings": CSV}, r"tasks.embeddings: 'embeddings' names a part of the encoder"),
    ({"t": {**CSV, "labels": ["pos", "neg", "pos"]}}, r"tasks.t.labels names 'pos' twice"),
    ({"t": {**CSV, "type": "multilabel", "threshold": 50}}, r"tasks.t.threshold must lie between 0 and 1"),
    ({"t": {**CSV, "labels": ["pos"]}}, r"tasks.t.labels \['pos'\]: a classification task needs at least 2 labels"),
    ({"t": {**CSV, "type": "multilabel", "labels": ["a", " "]}}, r"tasks.t.labels must be a non-empty list of "
                                                                 r"non-empty strings"),
    ({"t": {**CSV, "type": "multilabel", "label_delimiter": ""}}, r"tasks.t.label_delimiter must not be empty"),
    ({"t": {**CSV, "type": "regression", "scale": 0}}, r"tasks.t.scale must be a finite number other than 0, got 0"),
    # Python's json reads NaN and Infinity: every target would be NaN (or 0, silently)
    ({"t": {**CSV, "type": "regression", "scale": float("nan")}}, r"tasks.t.scale must be a finite number .*nan"),
    ({"t": {**CSV, "type": "regression", "scale": float("inf")}}, r"tasks.t.scale must be a finite number .*inf"),
    ({"t": {**CSV, "type": "regression", "scale": 10 ** 400}}, r"tasks.t.scale must be a finite number"),
])
def test_bad_task_specs_are_refused(tmp_path, tasks, message):
    with pytest.raises(InputError, match=message):
        FinetuningConfig.from_hparams("m", str(tmp_path), {**HPARAMS, "task_names": list(tasks), "tasks": tasks})


def test_an_undefined_task_name_lists_the_defined_ones(tmp_path):
    with pytest.raises(InputError, match=r"unknown task 'reviews'.*the tasks defined under \"tasks\": t"):
        FinetuningConfig.from_hparams("m", str(tmp_path), {**HPARAMS, "task_names": ["reviews"], "tasks": {"t": CSV}})


def test_the_run_says_how_many_examples_max_seq_length_cut(tmp_path, capsys):
    """The original cuts long texts silently; a user's run says, per split, how many."""
    long_text = " ".join(["film"] * 40)
    load(tmp_path, CSV, {"train.csv": f"text,label\n{long_text},pos\nfine,neg\n{long_text} again,neg\n",
                         "dev.csv": GOOD_CSV})
    out = capsys.readouterr().out
    assert "t train: 2 of 3 examples do not fit max_seq_length 32 tokens and were cut" in out
    assert "t dev:" not in out  # nothing cut there


def test_a_test_files_labels_are_not_read(tmp_path):
    """They are to be predicted: a label train never had, a placeholder (-1, as HF datasets write
    for test rows) or a blank cell is no error, for classification as for regression."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test.csv").write_text("text,label,id\nfine,pos,a\nso-so,meh,b\nok,-1,c\nmeh,,d\n")
    for kind in ("classification", "regression"):
        task = get_task("t", {"t": {**CSV, "type": kind, "test": "t/test.csv", "id": "id"}}, str(tmp_path),
                        {"labels": ["neg", "pos"]})
        examples = task.read(None, "test", None)
        assert [(e.index, e.label) for e in examples] == [("a", None), ("b", None), ("c", None), ("d", None)]


@pytest.mark.parametrize("spec", [{**CSV, "test": "t/test.csv"},
                                  {"type": "tagging", "format": "jsonl", "train": "t/train.jsonl",
                                   "dev": "t/train.jsonl", "test": "t/test.jsonl"}])
def test_a_missing_test_file_names_itself(tmp_path, spec):
    files = {"train.csv": GOOD_CSV, "dev.csv": GOOD_CSV, "train.jsonl": '{"tokens": ["a"], "tags": ["O"]}\n'}
    with pytest.raises(InputError, match=rf"t/{spec['test'][2:]}: cannot read it \(No such file"):
        load(tmp_path, spec, files, write_test_outputs=True)


def test_a_pair_tasks_plain_text_input_skips_an_empty_second_text(tmp_path):
    """predict.py's plain text for a pair task: an empty second text is an empty text (skipped with
    --skip-empty, as in CSV), a line without the tab a malformed one."""
    task = get_task("pairs", {"pairs": {**CSV, "text_b": "other"}}, str(tmp_path), {"labels": ["neg", "pos"]})
    (tmp_path / "in.txt").write_text("first\tsecond\nonly first\t\nthird\tfourth\n")
    source = InputSource.open(str(tmp_path / "in.txt"), None, True, task)
    assert [(e.text_a, e.text_b) for _, e in task.read_inputs(source)] == [("first", "second"), ("third", "fourth")]
    assert source.skipped == 1
    with pytest.raises(InputError, match=r"in.txt:2: empty text \(pass --skip-empty"):
        list(task.read_inputs(InputSource.open(str(tmp_path / "in.txt"), None, False, task)))
    (tmp_path / "in.txt").write_text("no tab here\n")
    with pytest.raises(InputError, match=r"in.txt:1: a pair task's line is its two texts separated by one tab"):
        list(task.read_inputs(InputSource.open(str(tmp_path / "in.txt"), None, True, task)))


def test_the_script_writes_nothing_on_bad_input(tmp_path, capsys):
    folder = tmp_path / "finetuning_data" / "t"
    folder.mkdir(parents=True)
    (folder / "train.csv").write_text(GOOD_CSV)
    (folder / "dev.csv").write_text(GOOD_CSV + "so-so,meh\n")
    hparams = {**HPARAMS, "task_names": ["t"], "tasks": {"t": CSV}}
    code = run_finetuning.main(["--data-dir", str(tmp_path), "--model-name", "m", "--hparams", json.dumps(hparams)])
    error = capsys.readouterr().err.strip()
    assert code == 2 and error.count("\n") == 0 and "dev.csv:4: label 'meh'" in error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["finetuning_data", "vocab.txt"]


def test_a_headerless_test_file_may_lack_the_label_column(tmp_path):
    """Columns by index without a header: a test file of texts alone has no label column, which
    test files may lack, as with a header."""
    from finetune.table_files import Layout, read_rows
    path = tmp_path / "test.csv"
    path.write_text("fine film\ndull film\n", encoding="utf-8")
    rows = read_rows(path, Layout("csv", header=False), {"text": 0, "label": 1}, optional=("label",))
    assert rows == [(1, {"text": "fine film"}), (2, {"text": "dull film"})]
    with pytest.raises(InputError, match=r"test.csv:1: 1 fields, no column 1 for the label"):
        read_rows(path, Layout("csv", header=False), {"text": 0, "label": 1})
