"""Every script's `--help`: it runs without TensorFlow (so it is instant and silent), lists every
option with its default (or "required") and ends with an example that its own parser accepts."""

import argparse
import json
import os
import shlex
import subprocess
import sys

import pytest

from script_helpers import REPO, SCRIPTS, load_script, script_call

# Runs a script as __main__ with --help and reports its exit code, its help text and whether
# TensorFlow got imported; the script's own stderr is left to the caller.
_RUN_HELP = """
import contextlib, io, json, runpy, sys
path, *arguments = sys.argv[1:]
sys.argv = [path, *arguments, "--help"]
out, code = io.StringIO(), None
with contextlib.redirect_stdout(out):
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exit:
        code = exit.code
print(json.dumps({"code": code, "help": out.getvalue(), "tensorflow": "tensorflow" in sys.modules}))
"""


def _parsers(script: str):
    """(subcommand words, parser) for the script's parser and each of its subcommands."""
    parser = load_script(script).build_parser()
    yield [], parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield [name], sub


def _option_blocks(help_text: str) -> dict:
    """First option string -> the text of its entry in the help (wrapped lines included)."""
    blocks, current = {}, None
    for line in help_text.splitlines():
        stripped = line.strip()
        if line.startswith("  -") and not line.startswith("   "):
            current = stripped.split()[0].rstrip(",")
            blocks[current] = stripped
        elif current and line.startswith("    ") and stripped:
            blocks[current] += " " + stripped
        else:
            current = None
    return blocks


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_is_silent_complete_and_has_an_example(script):
    parsers = list(_parsers(script))
    for words, parser in parsers:
        run = subprocess.run([sys.executable, "-c", _RUN_HELP, script, *words], cwd=REPO, capture_output=True,
                             text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
        where = f"{script} {' '.join(words)} --help"
        assert run.stderr == "", f"{where} wrote to stderr:\n{run.stderr}"
        report = json.loads(run.stdout.splitlines()[-1])
        assert report["code"] == 0, f"{where} exited with {report['code']}"
        assert not report["tensorflow"], f"{where} imported TensorFlow"
        blocks = _option_blocks(report["help"])
        for action in parser._actions:
            if not action.option_strings or action.help == "==SUPPRESS==" or action.dest == "help":
                continue
            entry = blocks.get(action.option_strings[0])
            assert entry is not None, f"{where} does not list {action.option_strings[0]}"
            assert "default" in entry or "(required)" in entry, f"{where}: {entry!r} names no default"
        assert "\nexample:\n" in report["help"], f"{where} shows no example"
        example = report["help"].rsplit("\nexample:\n", 1)[1].strip().splitlines()[0]
        called, arguments = script_call(shlex.split(example))
        assert called == script and arguments[:len(words)] == words, f"{where}: its example runs {example}"
        parsers[0][1].parse_args(arguments)  # exits (failing the test) if the example does not parse
