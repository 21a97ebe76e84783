"""GLUE readers, scorers, featurization, bucketing, result statistics and the fine-tuning config."""

import io
import json
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.stats
import sklearn.metrics

from electra_tf.errors import InputError
from finetune import glue, scorers
from finetune.config import FinetuningConfig
from finetune.glue_presets import glue_preset
from finetune.inputs import Features, epoch_batches, pad_batch, steps_per_epoch, truncate_pair
from finetune.predict_inputs import InputSource
from finetune.results import aggregate, format_table, write_results

# MANIFEST.md's verified row counts (train, dev, test); QNLI ships without train.
COUNTS = {"cola": (8551, 1043, 1063), "sst": (67349, 872, 1821), "mrpc": (3668, 408, 1725),
          "sts": (5749, 1500, 1379), "rte": (2490, 277, 3000), "wnli": (635, 71, 146), "qnli": (None, 5463, 5463)}


@pytest.fixture(scope="module")
def glue_dir(shared_data):
    return shared_data / "glue"


@pytest.mark.parametrize("task_name", sorted(COUNTS))
def test_every_shared_tsv_parses_with_manifest_counts(glue_dir, task_name):
    task = glue.get_task(task_name)
    for split, expected in zip(("train", "dev", "test"), COUNTS[task_name]):
        if expected is None:
            continue
        examples = glue.read_split(glue_dir, task, split, double_unordered=False)
        assert len(examples) == expected, split
        if split == "test":
            assert [e.index for e in examples] == [str(i) for i in range(expected)]
            assert all(e.label is None for e in examples)
        else:
            assert all(e.label is not None and e.text_a for e in examples)
            pairs = task_name not in ("cola", "sst")
            assert all((e.text_b is not None) == pairs for e in examples)


def test_label_distributions_match_the_manifest(glue_dir):
    cola = glue.read_split(glue_dir, glue.get_task("CoLA"), "train")
    assert sum(e.label for e in cola) == 6023  # label 1 rows; CoLA has no header
    mrpc = glue.read_split(glue_dir, glue.get_task("mrpc"), "dev")
    assert sum(e.label for e in mrpc) == 279  # the BOM'd header is skipped, not read as a row
    rte = glue.read_split(glue_dir, glue.get_task("rte"), "dev")
    assert sum(e.label == 0 for e in rte) == 146  # entailment is label 0
    sts = glue.read_split(glue_dir, glue.get_task("STS-B"), "dev")
    assert min(e.label for e in sts) == 0.0 and max(e.label for e in sts) == 1.0  # score / 5


def test_double_unordered_adds_swapped_pairs_to_train_only(glue_dir):
    task = glue.get_task("mrpc")
    train = glue.read_split(glue_dir, task, "train")
    assert len(train) == 2 * 3668
    first, swapped = train[0], train[3668]
    assert (swapped.text_a, swapped.text_b, swapped.label) == (first.text_b, first.text_a, first.label)
    assert len(glue.read_split(glue_dir, task, "dev")) == 408
    assert len(glue.read_split(glue_dir, glue.get_task("rte"), "train")) == 2490  # not an unordered task


def test_task_names_and_folders(tmp_path):
    assert [glue.canonical_task_name(n) for n in ("SST-2", "sts-b", "STS-B", "MNLI", "cola", "QQP", "WNLI")] == \
        ["sst", "sts", "sts", "mnli", "cola", "qqp", "wnli"]
    with pytest.raises(InputError, match="unknown task 'mnli-m'"):
        glue.canonical_task_name("mnli-m")
    with pytest.raises(InputError, match="'newsqa' is not supported yet"):
        glue.canonical_task_name("newsqa")
    assert [glue.canonical_task_name(n) for n in ("SQuAD", "squadv1", "chunk")] == ["squad", "squadv1", "chunk"]
    (tmp_path / "rte").mkdir()
    (tmp_path / "RTE").mkdir()
    assert glue.task_dir(tmp_path, glue.get_task("RTE")) == tmp_path / "rte"  # the original's name first
    with pytest.raises(InputError, match="neither .*/sst nor .*/SST-2"):
        glue.task_dir(tmp_path, glue.get_task("sst"))


def _write(path, lines, bom=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(("\ufeff" if bom else "") + "\n".join(lines) + "\n", encoding="utf-8")


def test_mnli_layout_matched_mismatched_and_diagnostic(tmp_path):
    row = "\t".join(["0", "1", "2", "g", "bp1", "bp2", "p1", "p2", "A man eats.", "Someone eats.", "{}"])
    head = "\t".join(f"c{i}" for i in range(11))
    _write(tmp_path / "MNLI" / "dev_matched.tsv", [head, row.format("entailment"), row.format("neutral")])
    _write(tmp_path / "MNLI" / "dev_mismatched.tsv", [head, row.format("contradiction")])
    _write(tmp_path / "MNLI" / "test_matched.tsv", [head[:-4], row.rsplit("\t", 1)[0]])
    _write(tmp_path / "AX" / "test.tsv", ["index\tsentence1\tsentence2", "0\tA \"quoted\tB"])
    task = glue.get_task("MNLI")
    assert [e.label for e in glue.read_split(tmp_path, task, "dev_matched")] == [1, 2]
    assert [e.label for e in glue.read_split(tmp_path, task, "dev_mismatched")] == [0]
    assert glue.read_split(tmp_path, task, "test_matched")[0].text_b == "Someone eats."
    diagnostic = glue.read_split(tmp_path, task, "diagnostic")[0]
    assert (diagnostic.text_a, diagnostic.text_b) == ('A "quoted', "B")  # quoting off: the quote stays
    assert [name for name, _ in glue.server_splits(task)] == ["MNLI-m", "MNLI-mm", "AX"]


@pytest.mark.parametrize("task_name", sorted(COUNTS))
def test_a_preset_predicts_from_a_glue_file_what_training_reads_from_it(glue_dir, task_name):
    """predict.py on a GLUE dev or test file takes the texts (and a test file's index) the training
    reader takes: the train/dev headers of STS-B and of the NLI tasks start with `index` as the
    test headers do, and STS-B's text columns differ between the two."""
    task, preset = glue.get_task(task_name), glue_preset(task_name)
    for split in ("dev", "test"):
        expected = glue.read_split(glue_dir, task, split, double_unordered=False)
        source = InputSource.open(str(glue.split_file(glue_dir, task, split)), None, False, preset)
        rows = list(preset.read_inputs(source))
        assert [(e.text_a, e.text_b) for _, e in rows] == [(e.text_a, e.text_b) for e in expected], split
        assert [row_id for row_id, _ in rows] == [e.index for e in expected], split


def test_a_qqp_preset_predicts_from_its_dev_and_test_layouts(tmp_path):
    """QQP (not in the shared data): its dev header starts with `id` too, with other text columns."""
    _write(tmp_path / "QQP" / "dev.tsv", ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
                                          "7\t11\t12\tWhy is it?\tWhy not?\t0"])
    _write(tmp_path / "QQP" / "test.tsv", ["id\tquestion1\tquestion2", "3\tHow so?\tHow come?"])
    preset = glue_preset("qqp")
    read = lambda name: list(preset.read_inputs(InputSource.open(str(tmp_path / "QQP" / name), None, False, preset)))
    [(dev_id, dev)], [(test_id, test)] = read("dev.tsv"), read("test.tsv")
    assert (dev_id, dev.text_a, dev.text_b) == (None, "Why is it?", "Why not?")
    assert (test_id, test.text_a, test.text_b) == ("3", "How so?", "How come?")


def test_a_preset_reads_a_test_layout_from_standard_input(glue_dir, monkeypatch):
    """`--input - --input-format tsv`: the header is looked at without being consumed, as in a file."""
    lines = (glue_dir / "SST-2" / "test.tsv").read_bytes().splitlines(keepends=True)[:4]
    monkeypatch.setattr("sys.stdin", SimpleNamespace(buffer=io.BufferedReader(io.BytesIO(b"".join(lines)))))
    preset = glue_preset("sst")
    rows = list(preset.read_inputs(InputSource.open("-", "tsv", False, preset)))
    assert [(row_id, e.text_a) for row_id, e in rows] == [tuple(line.decode().rstrip("\n").split("\t"))
                                                          for line in lines[1:]]


def test_a_preset_names_the_line_of_bytes_that_are_not_utf8(tmp_path):
    (tmp_path / "in.tsv").write_bytes(b"sentence\tlabel\nfine film\t1\ncaf\xe9 film\t0\n")
    preset = glue_preset("sst")
    with pytest.raises(InputError, match=r"in.tsv:3: bytes that are not UTF-8"):
        list(preset.read_inputs(InputSource.open(str(tmp_path / "in.tsv"), None, False, preset)))


@pytest.mark.parametrize("lines, message", [
    (["#\tid1\tid2\ts1\ts2", "1\ta\tb\tone sentence"], r"train.tsv:2: malformed row: 4 tab-separated field"),
    (["#\tid1\tid2\ts1\ts2", "1\ta\tb\tx\ty", "yes\ta\tb\tx\ty"], r"train.tsv:3: unknown label 'yes' for mrpc"),
])
def test_bad_rows_and_labels_name_file_and_line(tmp_path, lines, message):
    _write(tmp_path / "mrpc" / "train.tsv", lines, bom=True)
    with pytest.raises(InputError, match=message):
        glue.read_split(tmp_path, glue.get_task("mrpc"), "train")


def test_bad_sts_score_names_file_and_line(tmp_path):
    head = "\t".join(f"c{i}" for i in range(10))
    _write(tmp_path / "STS-B" / "dev.tsv", [head, "\t".join(["x"] * 9 + ["high"])])
    with pytest.raises(InputError, match=r"dev.tsv:2: score 'high' is not a number"):
        glue.read_split(tmp_path, glue.get_task("sts"), "dev")


def test_scorers_equal_sklearn_and_scipy():
    rng = np.random.default_rng(0)
    labels, predictions = rng.integers(0, 2, 300), rng.integers(0, 2, 300)
    metrics = sklearn.metrics
    assert scorers.accuracy(labels, predictions) == pytest.approx(100 * metrics.accuracy_score(labels, predictions))
    assert scorers.f1(labels, predictions) == pytest.approx(100 * sklearn.metrics.f1_score(labels, predictions))
    assert scorers.matthews_corrcoef(labels, predictions) == pytest.approx(
        100 * sklearn.metrics.matthews_corrcoef(labels, predictions))
    three, other = rng.integers(0, 3, 300), rng.integers(0, 3, 300)
    assert scorers.matthews_corrcoef(three, other) == pytest.approx(100 * metrics.matthews_corrcoef(three, other))
    assert scorers.matthews_corrcoef([1, 1, 0], [1, 1, 1]) == 0.0 == metrics.matthews_corrcoef([1, 1, 0], [1, 1, 1])
    x = rng.integers(0, 6, 200).astype(float)  # many ties
    y = x + rng.normal(size=200)
    assert scorers.pearson(x, y) == pytest.approx(100 * scipy.stats.pearsonr(x, y)[0])
    assert scorers.spearman(x, y) == pytest.approx(100 * scipy.stats.spearmanr(x, y)[0])
    assert scorers.score(("accuracy", "mm_accuracy"), [0, 1], [0, 0], loss=0.5) == {"accuracy": 50.0, "loss": 0.5}


def test_truncation_is_berts_longest_first():
    assert truncate_pair([1, 2, 3, 4, 5], [6, 7], 5) == ([1, 2, 3], [6, 7])
    assert truncate_pair([1, 2], [3, 4, 5], 3) == ([1, 2], [3])  # b is longer, then ties drop from b
    assert truncate_pair([1, 2], [], 5) == ([1, 2], [])


def _features(lengths):
    ids = [np.arange(1, n + 1, dtype=np.int32) for n in lengths]
    n = len(lengths)
    return Features(ids, [np.zeros(k, np.int32) for k in lengths], np.zeros(n, np.int32), np.zeros(n, np.int32),
                    np.zeros(n, np.float32))


def test_a_pair_without_second_tokens_is_a_single_sentence(vocab_file):
    """The original decides per example (`if tokens_b:`): a pair whose second text has no tokens is
    `[CLS] a [SEP]`, truncated to max_seq_length - 2 as a single sentence."""
    from electra_tf.tokenization import Tokenizer
    from finetune.inputs import featurize
    tokenizer = Tokenizer(vocab_file, do_lower_case=True)
    examples = [glue.Example(0, "a cat sat on the mat", "", 1), glue.Example(1, "a cat", "a dog", 0)]
    features = featurize(examples, tokenizer, 6, task_id=0, is_regression=False)
    cat, sat, on, dog = (tokenizer.convert_tokens_to_ids([w])[0] for w in ("cat", "sat", "on", "dog"))
    a = tokenizer.convert_tokens_to_ids(["a"])[0]
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    assert features.token_ids[0].tolist() == [cls, a, cat, sat, on, sep] and features.segment_ids[0].tolist() == [0] * 6
    assert features.token_ids[1].tolist() == [cls, a, cat, sep, a, sep] and features.segment_ids[1].tolist() == \
        [0, 0, 0, 0, 1, 1]
    # and after the cut: at max_seq_length 4 the pair's budget of 1 leaves "a" of the first text and
    # nothing of the second, which is then no segment (no second [SEP])
    short = featurize([glue.Example(0, "a cat", "dog", 0)], tokenizer, 4, task_id=0, is_regression=False)
    assert short.token_ids[0].tolist() == [cls, a, sep] and short.segment_ids[0].tolist() == [0, 0, 0]
    assert features.cut == 2 and short.cut == 1  # the examples that lost tokens (the run prints how many)


def test_length_bucketing_pads_to_the_longest_in_each_batch():
    rng = np.random.default_rng(1)
    lengths = rng.integers(5, 128, 1000)
    features = _features(lengths)
    dynamic = epoch_batches(lengths, 32, np.random.default_rng(2), dynamic=True)
    fixed = epoch_batches(lengths, 32, np.random.default_rng(2), dynamic=False)
    for batches in (dynamic, fixed):  # the original's ceil(1000 / 32): 31 full batches and the remainder, 8
        assert len(batches) == 32 and sorted(map(len, batches)) == [8] + [32] * 31
        assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(1000))  # every example once an epoch
    full = epoch_batches(lengths, 32, np.random.default_rng(2), dynamic=True, keep_partial=False)
    assert len(full) == 1000 // 32 and all(len(b) == 32 for b in full)  # drop_last_partial_batch
    assert len(np.unique(np.concatenate(full))) == 32 * 31
    assert (steps_per_epoch(1000, 32), steps_per_epoch(1000, 32, keep_partial=False), steps_per_epoch(992, 32)) == \
        (32, 31, 31)
    padded = lambda batches: sum(len(b) * lengths[b].max() for b in batches)
    assert padded(dynamic) < 0.75 * padded(fixed)  # buckets keep similar lengths together
    first = full[0]
    batch = pad_batch(features, first)
    assert batch["input_ids"].shape == (32, lengths[first].max())
    np.testing.assert_array_equal(batch["input_mask"].sum(1), lengths[first])
    assert pad_batch(features, first, pad_to=128)["input_ids"].shape == (32, 128)


def test_aggregate_statistics_and_files(tmp_path):
    trials = [{"mrpc": {"accuracy": a, "f1": f}} for a, f in ((80.0, 85.0), (84.0, 88.0), (81.0, 86.5))]
    table = aggregate(trials)
    accuracy = table["mrpc"]["accuracy"]
    assert accuracy == {"median": 81.0, "mean": pytest.approx(81.6667, abs=1e-4),
                        "std": pytest.approx(np.std([80, 84, 81], ddof=1)), "min": 80.0, "max": 84.0, "n": 3}
    assert format_table(table).splitlines()[0].split() == ["task", "metric", "median", "mean", "std", "min", "max", "n"]
    write_results(tmp_path, "mrpc", trials, {"note": 1})
    document = json.loads((tmp_path / "mrpc_results.json").read_text())
    assert document["trials"] == trials and document["aggregate"]["mrpc"]["f1"]["median"] == 86.5
    assert (tmp_path / "mrpc_results.txt").read_text().startswith(  # the original's lines, a trial each
        "mrpc: accuracy: 80.00 - f1: 85.00\nmrpc: accuracy: 84.00 - f1: 88.00\nmrpc: accuracy: 81.00 - f1: 86.50\n\n")


def test_server_labels():
    assert glue.server_label(glue.get_task("rte"), 1) == "not_entailment"
    assert glue.server_label(glue.get_task("mnli"), 2) == "neutral"
    assert glue.server_label(glue.get_task("cola"), 1) == "1"
    assert glue.server_label(glue.get_task("sts"), 0.5) == "2.500"
    assert glue.server_label(glue.get_task("sts"), 1.3) == "5.000"  # clipped to the server's range


def config(**hparams):
    return FinetuningConfig.from_hparams("m", "/data", hparams)


def test_config_defaults_are_the_originals():
    c = config(task_names=["mrpc"])
    assert (c.learning_rate, c.weight_decay_rate, c.layerwise_lr_decay, c.warmup_proportion) == (1e-4, 0.01, 0.8, 0.1)
    assert (c.max_seq_length, c.train_batch_size, c.eval_batch_size, c.num_train_epochs) == (128, 32, 32, 3.0)
    assert (c.model_size, c.embedding_size, c.double_unordered, c.num_trials, c.loss_reduction) == \
        ("small", 128, True, 1, "sum")
    assert c.init_checkpoint == "/data/models/m" and c.raw_data_dir == "/data/finetuning_data"
    assert c.results_dir == "/data/models/m/results"
    assert c.model_dir(2) == "/data/models/m/finetuning_models/mrpc_model_2"


def test_config_task_size_and_recipe_presets():
    assert config(task_names=["RTE"]).num_train_epochs == 10.0
    assert config(task_names=["STS-B"]).num_train_epochs == 10.0
    assert config(task_names=["rte", "mrpc"]).num_train_epochs == 3.0
    assert config(task_names=["rte"], num_train_epochs=2).num_train_epochs == 2.0  # the user wins
    large = config(task_names=["sst"], model_size="large")
    assert (large.learning_rate, large.layerwise_lr_decay, large.embedding_size) == (5e-5, 0.9, None)
    paper = config(task_names=["sst"], recipe="paper")
    assert (paper.learning_rate, paper.weight_decay_rate) == (3e-4, 0.0)
    paper_base = config(task_names=["sst"], recipe="paper", model_size="base")
    assert (paper_base.learning_rate, paper_base.weight_decay_rate) == (1e-4, 0.0)
    assert config(task_names=["sst"], recipe="paper", learning_rate=2e-4).learning_rate == 2e-4
    assert config(task_names=["SST-2", "CoLA"]).tasks_key == "sst_cola"


@pytest.mark.parametrize("hparams, message", [
    ({"task_names": ["mrpc"], "learnig_rate": 1e-4}, "did you mean 'learning_rate'"),
    ({"task_names": ["mrpc"], "recipe": "book"}, "recipe 'book' is not one of"),
    ({"task_names": "mrpc"}, "task_names in hparams must be list"),
    ({"task_names": []}, "must be a non-empty list"),
    ({"task_names": ["mrpc", "MRPC"]}, "names a task twice"),
    ({"task_names": ["mrpc"], "loss_reduction": "max"}, "loss_reduction 'max'"),
    ({"task_names": ["triviaqa"]}, "'triviaqa' is not supported yet"),
    ({"task_names": ["squad"], "doc_stride": 0}, "doc_stride 0 must be at least 1"),  # else windows never advance
    ({"task_names": ["squad"], "n_best_size": 0}, "n_best_size 0 must be at least 1"),
    ({"task_names": ["mrpc"], "seed": -1}, "seed -1 must be at least 0"),
    ({"task_names": ["mrpc"], "num_trials": 2, "init_checkpoint": "/data/models/m/finetuning_models/mrpc_model_2/finetuned"},
     "lies in /data/models/m/finetuning_models/mrpc_model_2, which trial 2 of this run replaces"),  # it would be deleted
    ({"task_names": ["mrpc"], "seed": 2 ** 32 - 1, "num_trials": 2}, r"below 2\*\*32 \(NumPy's seeds\)"),
])
def test_config_errors(hparams, message):
    with pytest.raises(InputError, match=message):
        config(**hparams)


def test_a_trial_dir_may_start_another_tasks_run_or_an_evaluation():
    trial = "/data/models/m/finetuning_models/mrpc_model_1"  # not replaced by these runs
    assert config(task_names=["sst"], init_checkpoint=trial).init_checkpoint == trial
    assert config(task_names=["mrpc"], init_checkpoint=trial, do_train=False).init_checkpoint == trial
