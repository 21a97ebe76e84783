"""benchmarks/suite_time.py on a small repository of its own: each commit cloned fresh with
shared/ linked beside it, its `.ci/run` run in ABBA order, pytest's counts and time read from the
JUnit XML, the ratio of the medians."""

import json
import subprocess
import sys
from pathlib import Path

from benchmarks import suite_time

# The repository's CI entry point, as ours: its own suite, with shared/ beside the checkout.
CI_RUN = f"""#!/usr/bin/env bash
set -euo pipefail
cd "$(dirname "$0")/.."
test -f ../shared/marker
{sys.executable} -m pytest -q -p no:cacheprovider tests
"""


def _commit(repo: Path, tests: dict, message: str) -> str:
    for name, text in tests.items():
        (repo / "tests" / name).write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message],
                   check=True)
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def _repository(tmp_path: Path):
    """(an empty git repository with CI_RUN as its .ci/run, the shared dir its CI checks for)."""
    repo, shared = tmp_path / "repo", tmp_path / "shared"
    (repo / ".ci").mkdir(parents=True)
    (repo / "tests").mkdir()
    shared.mkdir()
    (shared / "marker").write_text("")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".ci" / "run").write_text(CI_RUN)
    return repo, shared


def test_two_commits_are_timed_in_turn_from_their_junit_files(tmp_path):
    repo, shared = _repository(tmp_path)
    old = _commit(repo, {"test_a.py": "def test_a():\n    pass\n"}, "one test")
    new = _commit(repo, {"test_b.py": "import time\n\ndef test_b():\n    time.sleep(0.3)\n\n"
                                      "def test_c():\n    assert 1 + 1 == 2\n"}, "two more, one slow")
    output = tmp_path / "summary.json"
    code = suite_time.main(["--repo", str(repo), "--baseline", old, "--candidate", new, "--rounds", "2",
                            "--shared", str(shared), "--workdir", str(tmp_path / "work"), "--output", str(output)])
    assert code == 0
    summary = json.loads(output.read_text())
    assert summary["commits"] == {"baseline": old, "candidate": new}
    assert [run["tests"] for run in summary["runs"]["baseline"]] == [1, 1]
    assert [run["tests"] for run in summary["runs"]["candidate"]] == [3, 3]
    assert all(run["exit_code"] == 0 and run["failures"] == 0 for runs in summary["runs"].values() for run in runs)
    base, cand = (summary["median_pytest_seconds"][name] for name in ("baseline", "candidate"))
    assert cand > base + 0.25 and summary["ratio"] == cand / base  # the slow test is in the candidate alone
    # ABBA: the junit files were written in that order
    files = sorted((tmp_path / "work").glob("*.xml"), key=lambda path: path.stat().st_mtime_ns)
    assert [path.stem for path in files] == ["baseline-1", "candidate-1", "candidate-2", "baseline-2"]


def test_run_order_is_abba_repeated():
    assert suite_time.order(1) == ["baseline", "candidate"]
    assert suite_time.order(3) == ["baseline", "candidate", "candidate", "baseline", "baseline", "candidate"]


def test_a_failing_suite_is_reported_and_exits_1(tmp_path):
    repo, shared = _repository(tmp_path)
    good = _commit(repo, {"test_a.py": "def test_a():\n    pass\n"}, "passes")
    bad = _commit(repo, {"test_a.py": "def test_a():\n    assert False\n"}, "fails")
    assert suite_time.main(["--repo", str(repo), "--baseline", good, "--candidate", bad,
                            "--shared", str(shared), "--workdir", str(tmp_path / "work")]) == 1
    assert suite_time.junit_totals(tmp_path / "work" / "candidate-1.xml")["failures"] == 1
