"""The test suite's time: one commit against another, in one sitting on one machine.

The suite's figure moves with the machine (an AVX-512 EPYC ran it in 17-19 minutes, an AVX2 one in
26-28: benchmarks/RESULTS.md), so "no slower than commit X" is only measurable beside X. Each
commit is cloned fresh with `../shared` linked beside it, as CI lays it out, and its own
`.ci/run` (exactly `make test`) runs in the order ABBA (repeated over the rounds), so that a
drift of the machine's speed falls on both. pytest's time comes from the JUnit XML each run writes
(`PYTEST_ADDOPTS=--junitxml=...`); the whole run's wall time includes building the clone's
virtualenv on its first round only. Prints a table and the candidate's ratio to the baseline;
`--output F` writes the same as JSON.

    .venv/bin/python benchmarks/suite_time.py [--baseline 38d89bc] [--candidate HEAD] [--rounds 1]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE = "38d89bc"  # the 538-test suite issue #42 measures against (17 min 19 s of pytest on 2026-11-27)


def clone(repo: Path, revision: str, into: Path, shared: Path) -> Path:
    """A fresh clone of `repo` at `revision` in `into/p`, with `into/shared` linking `shared`."""
    into.mkdir(parents=True)
    checkout = into / "p"
    subprocess.run(["git", "clone", "-q", str(repo), str(checkout)], check=True)
    subprocess.run(["git", "-C", str(checkout), "checkout", "-q", revision], check=True)
    (into / "shared").symlink_to(shared.resolve())
    return checkout


def junit_totals(path: Path) -> dict:
    """tests, failures, errors, skipped and pytest's seconds from a JUnit XML file (all suites)."""
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = lambda name, kind: sum(kind(suite.get(name, 0)) for suite in suites)  # noqa: E731
    return {"tests": total("tests", int), "failures": total("failures", int), "errors": total("errors", int),
            "skipped": total("skipped", int), "pytest_seconds": total("time", float)}


def run_suite(checkout: Path, junit: Path) -> dict:
    """One `bash .ci/run` in `checkout`: its exit code, wall seconds and the JUnit totals."""
    env = {**os.environ, "PYTEST_ADDOPTS": f"--junitxml={junit}"}
    start = time.monotonic()
    with open(junit.with_suffix(".log"), "w") as log:
        code = subprocess.run(["bash", ".ci/run"], cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - start
    totals = junit_totals(junit) if junit.is_file() else {"tests": 0, "pytest_seconds": float("nan")}
    return {"exit_code": code, "wall_seconds": wall, **totals}


def order(rounds: int) -> list:
    """Which suite each of the 2 x `rounds` runs is: ABBA repeated (AB for one round)."""
    pattern = ["baseline", "candidate", "candidate", "baseline"]
    return [pattern[index % 4] for index in range(2 * rounds)]


def compare(repo: Path, baseline: str, candidate: str, rounds: int, shared: Path, workdir: Path) -> dict:
    """Runs both suites `rounds` times each, in `order`; the summary `main` prints."""
    revisions = {"baseline": baseline, "candidate": candidate}
    commits = {name: subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", rev], check=True,
                                    capture_output=True, text=True).stdout.strip() for name, rev in revisions.items()}
    checkouts = {name: clone(repo, commits[name], workdir / name, shared) for name in revisions}
    runs = {name: [] for name in revisions}
    for number, name in enumerate(order(rounds), start=1):
        print(f"run {number}/{2 * rounds}: {name} ({commits[name]})", flush=True)
        result = run_suite(checkouts[name], workdir / f"{name}-{len(runs[name]) + 1}.xml")
        runs[name].append(result)
        print(f"  exit {result['exit_code']}, {result['tests']} tests, pytest {result['pytest_seconds']:.0f} s, "
              f"whole run {result['wall_seconds']:.0f} s", flush=True)
    median = {name: statistics.median(run["pytest_seconds"] for run in results) for name, results in runs.items()}
    return {"commits": commits, "runs": runs, "median_pytest_seconds": median,
            "ratio": median["candidate"] / median["baseline"]}


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests/test_docs.py checks the documented commands against it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--baseline", default=BASELINE, help="the commit to measure against")
    parser.add_argument("--candidate", default="HEAD", help="the commit measured")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each commit")
    parser.add_argument("--repo", type=Path, default=REPO, help="the git repository to clone")
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared", help="linked beside each clone")
    parser.add_argument("--workdir", type=Path, help="keep the clones and JUnit files here (else in a temporary dir, removed)")
    parser.add_argument("--output", type=Path, help="also write the summary here as JSON")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="suite_time_") as temporary:
        workdir = args.workdir or Path(temporary)
        summary = compare(args.repo, args.baseline, args.candidate, args.rounds, args.shared, workdir)
    for name, results in summary["runs"].items():
        print(f"{name:9s} {summary['commits'][name]}: pytest median {summary['median_pytest_seconds'][name]:.0f} s "
              f"over {len(results)} run(s), {results[-1]['tests']} tests, "
              f"{sum(r['failures'] + r['errors'] for r in results)} failed")
    print(f"candidate / baseline (pytest time): {summary['ratio']:.3f}")
    if args.output:
        args.output.write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if all(r["exit_code"] == 0 for results in summary["runs"].values() for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
