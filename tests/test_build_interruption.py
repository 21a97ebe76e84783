"""The data build and vocab learning stopped or contended, with real files and processes: SIGTERM
mid-way stops the build's workers, removes the temporary output and ends with one line and 143; a
later build removes the temporary dirs that killed builds left; a build into an output dir that
another build holds is refused with one line naming the holder; Ctrl-C stops vocab learning with
one line, 130 and nothing written."""

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from electra_tf.dir_lock import DirLock
from process_helpers import REPO
from script_helpers import load_script

build_script = load_script("build_pretraining_dataset.py")


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def descendants(pid: int) -> list:
    """The pids of `pid`'s children, grandchildren, ..."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        for child in (task / "children").read_text().split():
            found += [int(child), *descendants(int(child))]
    return found


def build_with_two_workers_writing(corpus_dir, vocab_file, tmp_path):
    """A build process of 8 corpus files on 2 workers, once its workers write shards: (it, their pids)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for path in sorted(corpus_dir.iterdir())[:8]:
        (corpus / path.name).symlink_to(path)
    command = [sys.executable, str(REPO / "build_pretraining_dataset.py"), "--corpus-dir", str(corpus),
               "--vocab-file", str(vocab_file), "--output-dir", str(tmp_path / "out"), "--input-format",
               "wikiextractor", "--num-processes", "2", "--quiet"]
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    build = subprocess.Popen(command, env=dict(env, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        staging = tmp_path / f".out.tmp-{build.pid}"
        deadline = time.monotonic() + 300
        while not any(p.stat().st_size > 0 for p in staging.glob("pretrain_data.tfrecord-*")):  # the workers write
            assert build.poll() is None and time.monotonic() < deadline, build.communicate()
            time.sleep(0.05)
        workers = descendants(build.pid)
        assert len([pid for pid in workers if alive(pid)]) >= 2
    except BaseException:
        build.kill()
        raise
    return build, workers


def assert_ended_soon(pids, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while [pid for pid in pids if alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in pids if alive(pid)]


def test_sigterm_stops_the_build_its_workers_and_removes_the_temporary_output(corpus_dir, vocab_file, tmp_path):
    build, workers = build_with_two_workers_writing(corpus_dir, vocab_file, tmp_path)
    try:
        build.send_signal(15)
        out, err = build.communicate(timeout=120)
    finally:
        build.kill()
    output = tmp_path / "out"
    assert build.returncode == 143, err
    assert err == f"stopped: building {output} stopped by SIGTERM; nothing was written to {output} and the " \
                  "temporary files are removed\n"
    assert out == ""
    assert_ended_soon(workers)  # they got SIGTERM from the build as it stopped
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]  # no output, temporary dir or lock


KILLED_BUILD = """
import multiprocessing, os
from pretrain_data import build
import process_helpers
if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    reports = context.Queue()
    pool = context.Pool(2, initializer=build._init_worker, initargs=(reports,))
    jobs = [pool.apply_async(process_helpers.report_then_sleep, (120,)) for _ in range(2)]
    print(reports.get(timeout=240), reports.get(timeout=240), flush=True)  # both workers are in their jobs
    os.kill(os.getpid(), 9)  # a build killed mid-job: no chance to stop its workers
"""


def test_a_killed_worker_stops_the_build_with_one_line(corpus_dir, vocab_file, tmp_path):
    """A worker killed mid-job (the OOM killer's SIGKILL): the pool would wait for its job forever;
    the build stops the other worker, removes the temporary output and ends with one line and 1."""
    build, workers = build_with_two_workers_writing(corpus_dir, vocab_file, tmp_path)
    try:  # a pool worker, not multiprocessing's resource tracker (a child too)
        os.kill(next(pid for pid in workers if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()),
                signal.SIGKILL)
        out, err = build.communicate(timeout=120)
    finally:
        build.kill()
    assert build.returncode == 1, err
    assert re.fullmatch(r"error: a build worker \(pid \d+\) ended before its job did \(killed\? out of memory\?\); "
                        r"nothing was written: run the build again\n", err), err
    assert_ended_soon(workers)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_the_workers_of_a_killed_build_end_with_it(tmp_path):
    """A build killed with SIGKILL cannot stop its workers: the kernel sends them SIGTERM as their
    parent dies (left alone they would finish their jobs, here two minutes of sleep, first). Its
    temporary dir stays, for the next build to remove (the test below)."""
    printed = tmp_path / "workers.txt"  # a file, not a pipe: workers that outlived the build would hold a pipe open
    with open(printed, "w") as out:
        killed = subprocess.run([sys.executable, "-c", KILLED_BUILD], stdout=out, timeout=300,
                                env=dict(os.environ, PYTHONPATH=f"{REPO}:{REPO / 'tests'}"))
    assert killed.returncode == -9
    workers = [int(pid) for pid in printed.read_text().split()]
    assert len(workers) == 2, printed.read_text()
    try:
        assert_ended_soon(workers, seconds=3)
    finally:
        for pid in workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def small_corpus(tmp_path) -> Path:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("The first sentence is here.\nAnd a second one follows it.\n\n"
                                  "A new document starts.\nIt has two lines.\n" * 20)
    return corpus


def test_a_build_removes_the_temporary_dirs_of_killed_builds(vocab_file, tmp_path, capsys):
    corpus = small_corpus(tmp_path)
    for stale in (".out.tmp-4000001", ".out.old-4000002"):
        (tmp_path / stale).mkdir()
        (tmp_path / stale / "pretrain_data.tfrecord-0-of-1").write_bytes(b"\0" * 1000)
    (tmp_path / ".outer.tmp-4000003").mkdir()  # another output's: not this build's to remove
    command = ["--corpus-dir", str(corpus), "--vocab-file", str(vocab_file), "--output-dir", str(tmp_path / "out"),
               "--max-seq-length", "16", "--quiet"]
    assert build_script.main(command) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [".outer.tmp-4000003", "corpus", "out"]
    assert (tmp_path / "out" / "pretrain_data.tfrecord-0-of-1").stat().st_size > 0


def test_a_second_build_into_the_same_output_dir_is_refused(vocab_file, tmp_path, capsys):
    corpus = small_corpus(tmp_path)
    output = tmp_path / "out"
    command = ["--corpus-dir", str(corpus), "--vocab-file", str(vocab_file), "--output-dir", str(output),
               "--max-seq-length", "16", "--quiet"]
    with DirLock(output, tmp_path / ".out.lock", "--output-dir"):  # as a build running in this process holds it
        started = (tmp_path / ".out.lock").read_text()
        assert build_script.main(command) == 1
        assert not output.exists()
    err = capsys.readouterr().err
    assert err.startswith(f"error: --output-dir {output} is in use by another process (pid {os.getpid()} on "
                          f"{socket.gethostname()}, started ")
    assert started.split('"started": "')[1].split('"')[0] in err and err.count("\n") == 1
    assert build_script.main(command) == 0 and output.is_dir()


def test_ctrl_c_stops_vocab_learning_with_nothing_written(corpus_dir, tmp_path):
    output = tmp_path / "vocab.txt"
    command = [sys.executable, str(REPO / "build_vocab.py"), "--corpus", *map(str, sorted(corpus_dir.iterdir())[:8]),
               "--input-format", "wikiextractor", "--output", str(output)]
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    learning = subprocess.Popen(command, env=dict(env, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        progress = learning.stderr.readline()  # the first progress line: it is counting words
        assert progress.startswith("counting words"), progress + learning.stderr.read()
        learning.send_signal(signal.SIGINT)
        out, err = learning.communicate(timeout=120)
    finally:
        learning.kill()
    assert learning.returncode == 130, err
    assert err.splitlines()[-1] == f"stopped: learning the vocab {output} stopped by SIGINT; nothing was written " \
                                   f"to {output}"
    assert "Traceback" not in err and out == ""
    assert list(tmp_path.iterdir()) == []
