"""A disk that runs full mid-write, for the data build, a pretraining checkpoint and a fine-tuning
run: one line naming the file, the free space there and what is intact, exit status 1, nothing
half-written or temporary left; once space is freed, the same command completes (the build) or
resumes (training) to the result of a run that never met a full disk.

The disk is a tmpfs the test mounts (as root, which CI is), filled with a filler file; where no
tmpfs can be mounted, TensorFlow's ENOSPC error is injected at the same write instead.
"""

import errno
import io
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import safetensors.numpy
import tensorflow as tf

import run_finetuning
import run_pretraining
from electra_tf.training.reporting import Reporter
from pretrain_data import vocab_learning
from full_disk_helpers import SmallDisk, files_under, no_space
from process_helpers import REPO, pretraining_hparams
from script_helpers import load_script
from test_finetuning import BASE, data_dir  # noqa: F401 (the fine-tuning data dir fixture)

MB = 1 << 20
build_script = load_script("build_pretraining_dataset.py")


@pytest.fixture
def small_disk(tmp_path, monkeypatch):
    disks = []

    def make(size):
        disks.append(SmallDisk(tmp_path / "disk", size, monkeypatch))
        return disks[-1]

    yield make
    for disk in disks:
        disk.unmount()


def one_line(err):
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


def test_data_build_on_a_full_disk_writes_nothing_then_completes_once_space_is_freed(
        corpus_dir, vocab_file, tmp_path, small_disk, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for path in sorted(corpus_dir.iterdir())[:2]:
        (corpus / path.name).symlink_to(path)
    disk = small_disk(64 * MB)
    processes = "2" if disk.real else "1"  # an injected error reaches this process's writes only
    command = ["--corpus-dir", str(corpus), "--vocab-file", str(vocab_file), "--max-seq-length", "64",
               "--input-format", "wikiextractor", "--num-processes", processes, "--quiet"]
    assert build_script.main([*command, "--output-dir", str(tmp_path / "calm")]) == 0
    calm = files_under(tmp_path / "calm")
    built = sum(calm.values())
    assert built > MB

    class FullWriter:  # the injected disk: the first shard's 50th record finds no space
        def __init__(self, path):
            self.path, self.handle, self.count = path, open(path, "wb"), 0

        def write(self, record):
            self.count += 1
            if self.count == 50:
                raise no_space(self.path)
            self.handle.write(record)

        def close(self):
            self.handle.close()

    disk.fill(built // 2, lambda patch: patch.setattr(tf.io, "TFRecordWriter", FullWriter))
    output = disk.path / "out"
    capsys.readouterr()
    assert build_script.main([*command, "--output-dir", str(output)]) == 1
    line = one_line(capsys.readouterr().err)
    named = re.fullmatch(rf"error: no space left on the device for (\S+) \((\d+(\.\d)? (bytes|kB|MB|GB)) free "
                         rf"there\); nothing was written to {re.escape(str(output))}: free space and run the "
                         rf"same command again", line)
    assert named, line
    assert re.fullmatch(rf"{re.escape(str(disk.path))}/\.out\.tmp-\d+/pretrain_data\.tfrecord-\d-of-\d",
                        named.group(1)), line  # the shard it was writing
    assert files_under(disk.path) == ({"filler": disk.filler.stat().st_size} if disk.real else {})

    disk.free()
    assert build_script.main([*command, "--output-dir", str(output)]) == 0
    assert files_under(output).keys() == calm.keys()
    for name in calm:
        if name.startswith("pretrain_data.tfrecord"):
            assert (output / name).read_bytes() == (tmp_path / "calm" / name).read_bytes(), name
    assert sorted(p.name for p in disk.path.iterdir()) == ["out"]


def pretrain(data_dir, name, capsys, **values):
    code = run_pretraining.main(["--data-dir", str(data_dir), "--model-name", name,
                                 "--hparams", pretraining_hparams(**values)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def model_weights(prefix):
    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map() if name.startswith("model/")}


def test_pretraining_checkpoint_on_a_full_disk_keeps_the_last_one_and_the_same_command_resumes(
        pretraining_data_dir, small_disk, capsys):
    values = dict(num_train_steps=20, deterministic=True, keep_checkpoint_max=1)
    assert pretrain(pretraining_data_dir, "calm", capsys, **values)[0] == 0
    calm = pretraining_data_dir / "models" / "calm" / "ckpt-20"
    checkpoint = sum(p.stat().st_size for p in calm.parent.glob("ckpt-20.*"))
    disk = small_disk(3 * checkpoint + 16 * MB)
    model_dir = disk.path / "full"
    save = tf.train.CheckpointManager.save

    def save_on_a_full_disk(manager, checkpoint_number=None, **kwargs):
        if checkpoint_number != 20:
            return save(manager, checkpoint_number=checkpoint_number, **kwargs)
        shard = model_dir / "ckpt-20_temp" / "part-00000-of-00001.data-00000-of-00001.tempstate1"
        shard.parent.mkdir()
        shard.write_bytes(b"\0" * 1000)
        raise no_space(shard)

    # ckpt-10 fits, ckpt-20 does not: keep_checkpoint_max 1 may delete ckpt-10 only once ckpt-20 is complete
    disk.fill(checkpoint * 3 // 2 + MB, lambda patch: patch.setattr(tf.train.CheckpointManager, "save",
                                                                    save_on_a_full_disk))
    code, out, err = pretrain(pretraining_data_dir, "full", capsys, model_dir=str(model_dir), **values)
    assert code == 1, err
    assert re.fullmatch(rf"error: no space left on the device for {re.escape(str(model_dir / 'ckpt-20'))} "
                        rf"\(.+ free there\); the newest intact checkpoint is {re.escape(str(model_dir / 'ckpt-10'))}:"
                        rf" free space and run the same command to resume from it", one_line(err))
    assert re.findall(r"^step (\d+)/", out, flags=re.M) == ["10", "20"]
    left = files_under(model_dir)
    assert not [name for name in left if name.startswith("ckpt-20") or "_temp" in name or "tmp" in name], left
    assert {"ckpt-10.index", "ckpt-10.data-00000-of-00001", "checkpoint", "config.json"} <= left.keys()
    assert ".lock" not in left
    assert tf.train.latest_checkpoint(str(model_dir)) == str(model_dir / "ckpt-10")

    disk.free()
    stale = model_dir / "ckpt-15_temp" / "part-00000-of-00001.data-00000-of-00001.tempstate2"
    stale.parent.mkdir()
    stale.write_bytes(b"\0" * 100)  # what a run killed mid-save leaves: the next run removes it
    code, out, err = pretrain(pretraining_data_dir, "full", capsys, model_dir=str(model_dir), **values)
    assert code == 0, err
    assert f"resuming from {model_dir / 'ckpt-10'}" in out
    assert re.findall(r"^step (\d+)/", out, flags=re.M) == ["20"]
    assert not list(model_dir.glob("*_temp")) and not (model_dir / "ckpt-10.index").exists()
    expected, resumed = model_weights(calm), model_weights(model_dir / "ckpt-20")
    assert expected.keys() == resumed.keys() and len(expected) > 20
    for name, value in expected.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)


def test_finetuning_on_a_full_disk_then_the_same_command_completes(data_dir, tmp_path, small_disk,  # noqa: F811
                                                                     capsys):
    """The undisturbed run and the one after freeing space are fresh run_finetuning.py processes (two
    runs in one process draw different dropout masks); the one that meets the full disk runs here,
    where an injected error can reach it."""
    def command(where):
        values = {**BASE, "task_names": ["mrpc"], "finetuning_models_dir": str(where / "models"),
                  "results_dir": str(where / "results")}
        return ["--data-dir", str(data_dir), "--model-name", "tiny", "--hparams", json.dumps(values)]

    def finetune_process(where):
        return subprocess.run([sys.executable, str(REPO / "run_finetuning.py"), *command(where)], capture_output=True,
                              text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(REPO)))

    calm = finetune_process(tmp_path / "calm")
    assert calm.returncode == 0, calm.stderr
    disk = small_disk(32 * MB)
    write = tf.train.Checkpoint.write

    def write_on_a_full_disk(checkpoint, file_prefix, **kwargs):
        if not str(file_prefix).endswith("finetuned"):
            return write(checkpoint, file_prefix, **kwargs)
        shard = f"{file_prefix}_temp/part-00000-of-00001.data-00000-of-00001.tempstate3"
        os.makedirs(os.path.dirname(shard))
        open(shard, "wb").close()
        raise no_space(shard)

    disk.fill(2 * MB, lambda patch: patch.setattr(tf.train.Checkpoint, "write", write_on_a_full_disk))
    assert run_finetuning.main(command(disk.path)) == 1
    trial = disk.path / "models" / "mrpc_model_1"
    results = disk.path / "results" / "mrpc_results.json"
    assert re.fullmatch(rf"error: no space left on the device for {re.escape(str(trial / 'finetuned'))} \(.+ free "
                        rf"there\); {re.escape(str(results))} keeps the scores of the trials that finished, if "
                        rf"any; free space and run the same command again", one_line(capsys.readouterr().err))
    assert not [p for p in trial.iterdir() if p.name.startswith("finetuned")]  # neither its temp dir nor half files
    assert not results.exists() and not list((disk.path / "models").glob(".*.lock"))

    disk.free()
    rerun = finetune_process(disk.path)
    assert rerun.returncode == 0, rerun.stderr
    expected = json.loads((tmp_path / "calm" / "results" / "mrpc_results.json").read_text())["trials"]
    assert json.loads(results.read_text())["trials"] == expected and "loss" in expected[0]["mrpc"]
    assert sorted(p.name for p in trial.glob("finetuned*")) == ["finetuned.data-00000-of-00001", "finetuned.index"]


def test_vocab_learning_and_an_export_on_a_full_disk_write_nothing(data_dir, tmp_path, small_disk,  # noqa: F811
                                                                   capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"sentence number {i} has words like token{i % 500} in it.\n" for i in range(5000)))
    disk = small_disk(16 * MB)
    vocab, export = disk.path / "vocab.txt", disk.path / "hf"

    def no_room(path):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    class FullFile(io.StringIO):
        def __init__(self, handle, *args, **kwargs):
            super().__init__()
            self.path = os.readlink(f"/proc/self/fd/{handle}")
            os.close(handle)

        def write(self, text):
            raise no_room(self.path)

    def inject(patch):
        patch.setattr(vocab_learning.os, "fdopen", FullFile)
        patch.setattr(safetensors.numpy, "save_file", lambda tensors, path, **kwargs: (_ for _ in ()).throw(
            no_room(path)))

    disk.fill(8 << 10, inject)  # the vocab takes about 45 kB, the export 8 MB
    capsys.readouterr()
    assert load_script("build_vocab.py").main(["--corpus", str(corpus), "--output", str(vocab), "--vocab-size",
                                               "20000", "--quiet"]) == 1
    assert re.fullmatch(rf"error: no space left on the device for {re.escape(str(vocab))} \(.+ free there\); "
                        rf"nothing was written to {re.escape(str(vocab))}: free space and run the same command again",
                        one_line(capsys.readouterr().err))
    assert load_script("convert_checkpoint.py").main(["to-hf", "--model-dir", str(data_dir / "models" / "tiny"),
                                                      "--output-dir", str(export)]) == 1
    assert re.fullmatch(rf"error: no space left on the device for {re.escape(str(export))} \(.+ free there\); "
                        rf"nothing was written to {re.escape(str(export))}: free space and run the same command again",
                        one_line(capsys.readouterr().err))
    assert sorted(p.name for p in disk.path.iterdir()) == (["filler"] if disk.real else [])


def test_tensorboard_events_on_a_full_disk_keep_only_whole_records(small_disk):
    """A flush that found the disk full leaves part of a record at the end of the events file (a tmpfs
    does: a write stops at its last page); the reporter cuts it back, so every reader gets every
    whole record and no DataLossError."""
    disk = small_disk(1 * MB)
    steps_written = []

    def torn_flush(writer):  # without a tmpfs: what the kernel does, part of a record, then ENOSPC
        events = next((disk.path / "model" / "train").glob("events.out.tfevents.*"))
        with open(events, "ab") as handle:
            handle.write(b"\x2a\x00\x00\x00\x00")
        raise no_space(events)

    with pytest.raises(tf.errors.ResourceExhaustedError, match="No space left on device"):
        with Reporter(disk.path / "model", 10 ** 6, 32, chief=True) as reporter:
            for step in range(3):
                reporter.scalars("train", step, {"loss": 1.0 / (step + 1)})
                steps_written.append(step)
            disk.fill(4096, lambda patch: patch.setattr(type(reporter.writers["train"]), "flush", torn_flush))
            for step in range(3, 10 ** 5):
                reporter.scalars("train", step, {"loss": 1.0 / (step + 1), "learning_rate": 1e-4})
                steps_written.append(step)
    [events] = (disk.path / "model" / "train").glob("events.out.tfevents.*")
    records = [tf.compat.v1.Event.FromString(record.numpy()) for record in tf.data.TFRecordDataset(str(events))]
    steps = sorted({event.step for event in records if event.summary.value})
    assert steps[:len(steps_written)] == steps_written  # every flushed step is intact
    assert len(steps) <= len(steps_written) + 1  # at most the step whose flush failed, in part
    disk.free()
