"""Files broken the way they break in practice, and signals mid-run, with real files and processes:
one clear message and exit code each, and nothing already saved lost.

- a pretraining shard cut short: refused at start-up, naming the file and the byte offset; damage
  the start-up check did not read: the training loop's error names the file, the checkpoint stays;
- the newest checkpoint damaged: resume skips it, says why, and continues from the newest intact one;
  all damaged: an error naming them, with no hint at a config change;
- SIGTERM to a running run_pretraining.py: a checkpoint after the step it is in, exit 143, and
  the same command resumes from it; on this GPU-less machine stderr has no TensorFlow C++ lines;
- invalid UTF-8 in a corpus: counted per file in stats.json and the summary, or --strict-utf8 fails;
- SQuAD training answers that are not where answer_start points: skipped and counted, up to 5 %.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import run_pretraining
from electra_tf.errors import InputError
from finetune import squad
from pretrain_data import records
from process_helpers import REPO, pretraining_hparams as hparams, signal_when
TF_CPP_LINE = re.compile(r"^[IWE]\d{4} |cuInit|absl::InitializeLog", re.M)  # TensorFlow's C++ log lines


def pretrain(data_dir, name, capsys, **values):
    code = run_pretraining.main(["--data-dir", str(data_dir), "--model-name", name, "--hparams", hparams(**values)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def own_data_dir(pretraining_data_dir, tmp_path):
    """A data dir with its own copy of the training shard (to damage), the shared eval shards and vocab."""
    shards = tmp_path / "pretrain_tfrecords"
    shards.mkdir()
    for shard in (pretraining_data_dir / "pretrain_tfrecords").glob("pretrain_data.tfrecord-*"):
        shutil.copyfile(shard, shards / shard.name)
    (shards / "eval").symlink_to(pretraining_data_dir / "pretrain_tfrecords" / "eval")
    (tmp_path / "vocab.txt").symlink_to(pretraining_data_dir / "vocab.txt")
    return tmp_path


def test_truncated_shard_is_refused_at_start_up_naming_file_and_offset(own_data_dir, capsys):
    assert pretrain(own_data_dir, "cut", capsys, num_train_steps=10)[0] == 0
    checkpoint = (own_data_dir / "models" / "cut" / "ckpt-10.data-00000-of-00001").read_bytes()
    shard = next((own_data_dir / "pretrain_tfrecords").glob("pretrain_data.tfrecord-*"))
    size = shard.stat().st_size
    with open(shard, "r+b") as handle:
        handle.truncate(size // 2 + 7)  # a cut inside a record, as a full disk leaves it
    code, out, err = pretrain(own_data_dir, "cut", capsys, num_train_steps=20)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{shard}: damaged TFRecord file (truncated record at byte" in err and "Traceback" not in err
    offset = int(re.search(r"at byte (\d+)", err).group(1))
    assert size // 2 - 1000 < offset <= size // 2 + 7  # the start of the record that was cut
    assert "step " not in out  # refused before any training
    assert (own_data_dir / "models" / "cut" / "ckpt-10.data-00000-of-00001").read_bytes() == checkpoint

    shard.write_bytes(b"this is not a TFRecord file, it is text" * 20)
    code, _, err = pretrain(own_data_dir, "cut", capsys)
    assert code == 2 and f"{shard}: damaged TFRecord file (corrupted record at byte 0)" in err


def test_damage_found_mid_run_names_the_file(own_data_dir, capsys, monkeypatch):
    """Damage beyond what the start-up check reads (here: its first 10 records) stops training
    with one error naming the file, from inside the training loop."""
    monkeypatch.setattr(records, "FULL_CHECK_BYTES", 0)
    monkeypatch.setattr(records, "PARTIAL_CHECK_RECORDS", 10)
    shard = next((own_data_dir / "pretrain_tfrecords").glob("pretrain_data.tfrecord-*"))
    data = bytearray(shard.read_bytes())
    data[len(data) * 3 // 4] ^= 0xFF  # one flipped byte: its record's CRC fails
    shard.write_bytes(bytes(data))
    code, out, err = pretrain(own_data_dir, "flip", capsys, num_train_steps=10)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert re.search(rf"{re.escape(str(shard))}: damaged TFRecord file \(corrupted record at byte \d+\)", err)
    assert (own_data_dir / "models" / "flip" / "config.json").exists()  # past the start-up check: the loop met it


def test_damaged_newest_checkpoint_is_skipped_for_the_newest_intact_one(pretraining_data_dir, capsys):
    model_dir = pretraining_data_dir / "models" / "damaged_ckpt"
    assert pretrain(pretraining_data_dir, "damaged_ckpt", capsys)[0] == 0
    newest = model_dir / "ckpt-20.data-00000-of-00001"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    intact = (model_dir / "ckpt-10.data-00000-of-00001").read_bytes()

    code, out, err = pretrain(pretraining_data_dir, "damaged_ckpt", capsys, num_train_steps=30)
    assert code == 0, err
    assert re.search(r"skipping checkpoint \S*ckpt-20: its files are damaged \(.*[Cc]hecksum does not match", out)
    assert f"resuming from {model_dir / 'ckpt-10'}" in out
    assert re.findall(r"^step (\d+)/30", out, flags=re.M) == ["20", "30"]  # steps 11-30 trained again
    assert (model_dir / "ckpt-10.data-00000-of-00001").read_bytes() == intact

    for data_file in model_dir.glob("ckpt-*.data-*"):  # now every checkpoint is damaged
        data_file.write_bytes(data_file.read_bytes()[:100])
    code, out, err = pretrain(pretraining_data_dir, "damaged_ckpt", capsys, num_train_steps=40)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"no intact checkpoint in {model_dir}: ckpt-30 (" in err and "ckpt-20 (" in err
    assert "changed" not in err


def test_sigterm_saves_a_checkpoint_and_the_same_command_resumes(pretraining_data_dir):
    """A real run_pretraining.py, without TF_CPP_MIN_LOG_LEVEL set, gets SIGTERM once it trains. Its
    compiled loop runs 50 steps from the progress line at step 50 to the next (about 7 s here); the
    signal, 1 s into it, ends it after the step it is in, with that window's progress line and a
    checkpoint there (it used to wait for the loop's end, step 100)."""
    command = [sys.executable, str(REPO / "run_pretraining.py"), "--data-dir", str(pretraining_data_dir),
               "--model-name", "sigterm", "--hparams",
               hparams(num_train_steps=100000, save_checkpoints_steps=1000, log_every=50, iterations_per_loop=1000)]
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_CONFIG")}
    env["PYTHONPATH"] = str(REPO)
    code, out, err = signal_when(command, env, lambda line: line.startswith("step 50/"), signal.SIGTERM, delay=1.0)
    assert code == 128 + signal.SIGTERM, out + err
    assert "received SIGTERM: stopping at the next step boundary" in out
    stopped = re.search(r"^stopped: training stopped by SIGTERM at step (\d+); the checkpoint is (\S+)\. "
                        r"Run the same command again to resume$", err, flags=re.M)
    assert stopped, err
    step = int(stopped.group(1))
    assert 50 < step < 100 and stopped.group(2).endswith(f"ckpt-{step}"), out
    assert re.findall(r"^step (\d+)/", out, flags=re.M) == ["50", str(step)]  # its partial window logged too
    assert Path(stopped.group(2) + ".index").exists()
    assert not TF_CPP_LINE.search(err), err  # no GPU here: TensorFlow's C++ lines are hidden
    assert err.strip() == stopped.group(0)  # the process's own lines are all there is

    finish = [*command[:-1], hparams(num_train_steps=step + 5, log_every=1000)]
    done = subprocess.run(finish, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"resuming from {stopped.group(2)}" in done.stdout
    assert re.findall(r"^step (\d+)/", done.stdout, flags=re.M) == [str(step + 5)]
    assert not TF_CPP_LINE.search(done.stderr), done.stderr


def test_a_gpu_driver_keeps_error_lines_visible(tmp_path):
    """With an NVIDIA driver present (here: an nvidia-smi on the PATH), the level stays 2, so a GPU
    that fails to initialise is reported (here, cuInit fails: there is no GPU)."""
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env.update(PATH=f"{tmp_path}:{env['PATH']}", PYTHONPATH=str(REPO))
    script = ("import os; from electra_tf.cli import quiet_tensorflow_logs; quiet_tensorflow_logs(); "
              "import tensorflow as tf; tf.config.list_physical_devices(); print(os.environ['TF_CPP_MIN_LOG_LEVEL'])")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "2", done.stderr
    assert "failed call to cuInit" in done.stderr


def test_invalid_utf8_is_counted_per_file_or_refused(vocab_file, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "clean.txt").write_text("A clean first sentence is here.\nAnd a second clean one.\n")
    (corpus / "dirty.txt").write_bytes(b"Caf\xe9 au lait is a drink.\nThis line is fine.\n"
                                       b"Na\xefve bytes \xff\xfe again.\nThe end.\n")
    command = [sys.executable, str(REPO / "build_pretraining_dataset.py"), "--corpus-dir", str(corpus),
               "--vocab-file", str(vocab_file), "--max-seq-length", "16", "--quiet"]
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([*command, "--output-dir", str(tmp_path / "out")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "invalid UTF-8 in 1 file(s), 2 line(s); the bad bytes were dropped" in done.stdout
    assert "dirty.txt (2 lines)" in done.stdout
    assert not TF_CPP_LINE.search(done.stderr) and done.stderr == "", done.stderr
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["invalid_utf8_lines_replaced"] == 2 and stats["invalid_utf8_lines_per_file"] == {"dirty.txt": 2}

    refused = subprocess.run([*command, "--output-dir", str(tmp_path / "strict"), "--strict-utf8"], env=env,
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and refused.stderr.strip() == (
        f"error: {corpus / 'dirty.txt'}: line 1: invalid UTF-8 (byte 0xe9 at byte 3 of the line); "
        "fix the file, or leave out --strict-utf8 to drop such bytes")
    assert not (tmp_path / "strict").exists()


def squad_file(path, answer_starts):
    """A SQuAD 1.1 file: one question per entry of `answer_starts` on the same context."""
    context = "The quick brown fox jumped over the lazy dog near the river bank."
    questions = [{"id": f"q{i}", "question": "What jumped?", "answers": [{"text": "brown fox", "answer_start": start}]}
                 for i, start in enumerate(answer_starts)]
    path.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"context": context, "qas": questions}]}]}))
    return path


def test_a_path_without_permission_is_one_line_naming_it(tmp_path, capsys):
    """Root reads every file, so the denial is raised where a script's job would meet it."""
    from electra_tf.cli import exit_code
    locked = tmp_path / "train.tsv"

    def job():
        raise PermissionError(13, "Permission denied", str(locked))
    assert exit_code(job) == 2
    assert capsys.readouterr().err == f"error: permission denied: {locked}\n"


def test_squad_training_skips_unfindable_answers_up_to_a_threshold(tmp_path):
    log = []
    # 1 of 30 wrong (3 %): skipped and counted; one off by two characters inside the answer's words: corrected
    path = squad_file(tmp_path / "train.json", [10] * 28 + [12, 40])
    examples = squad.read_examples(path, v2=False, training=True, log=log.append)
    assert len(examples) == 29 and "q29" not in {e.qas_id for e in examples}
    assert [e.eid for e in examples] == list(range(29))
    assert examples[28].qas_id == "q28" and examples[28].answer_start == 10 and examples[28].start_word == 2
    assert log == [f"{path}: skipped 1 of 30 answerable training questions whose answer is not where answer_start "
                   "points (the original's \"Could not find answer\"); first: "
                   f"{path}: question q29: answer 0: answer_start 40 does not point at the answer text 'brown fox' "
                   "(the context there reads ' dog near')"]
    with pytest.raises(InputError, match=r"question q29: answer 0: answer_start 40 does not point"):
        squad.read_examples(path, v2=False)  # a dev file: no skipping
    # the original's check is lower-cased and collapses whitespace: such an answer keeps its answer_start
    document = json.loads(path.read_text())
    for text, qa in zip(("Brown Fox", "brown  fox"), document["data"][0]["paragraphs"][0]["qas"]):
        qa["answers"][0]["text"] = text
    path.write_text(json.dumps(document))
    kept = squad.read_examples(path, v2=False, training=True, log=log.append)
    assert [(e.answer_start, e.start_word, e.end_word) for e in kept[:2]] == [(10, 2, 3)] * 2
    # 3 of 30 wrong (10 %): the wrong file
    with pytest.raises(InputError, match=r"the answer of 3 of 30 answerable questions \(10%\) is not where its "
                                         r"answer_start points, more than the 5% a sound training file has"):
        squad.read_examples(squad_file(tmp_path / "bad.json", [10] * 27 + [40] * 3), v2=False, training=True)
