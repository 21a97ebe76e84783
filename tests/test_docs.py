"""The docs cannot drift from the code: every command shown in README.md, docs/*.md,
benchmarks/RESULTS.md and experiments/electra_vs_mlm/REPORT.md that runs one of the scripts parses
with that script's own parser, every `--hparams` JSON names only fields of the config it sets,
and the hparam and flag tables name only real hparams and flags (a flag table lists all of its
script's flags), and relative links lead to files."""

import argparse
import dataclasses
import io
import json
import re
import shlex
from contextlib import redirect_stderr
from pathlib import Path

from electra_tf.config import PretrainingConfig
from electra_tf.errors import InputError
from finetune.config import FinetuningConfig
from finetune.tasks import check_user_tasks
from script_helpers import REPO, load_script, script_call

DOCS = [REPO / "README.md", REPO / "benchmarks" / "RESULTS.md", REPO / "experiments" / "electra_vs_mlm" / "REPORT.md",
        *sorted((REPO / "docs").glob("*.md"))]
# Which config a script's --hparams (or a page's hparam tables) set.
HPARAMS_CONFIG = {"run_pretraining.py": PretrainingConfig, "convert_checkpoint.py": PretrainingConfig,
                  "run_finetuning.py": FinetuningConfig}
TABLE_CONFIG = {"pretraining.md": PretrainingConfig, "finetuning.md": FinetuningConfig}
SHELL_BLOCKS = {"", "sh", "bash", "shell", "console"}


def settable(config) -> set:
    """The keys `--hparams` accepts for `config`: its init fields but the fixed ones, and its aliases."""
    fields = {f.name for f in dataclasses.fields(config) if f.init}
    return (fields - set(config.FIXED)) | set(config.ALIASES)


def shell_commands(path: Path):
    """(line number, command) for each command in the page's shell code blocks, continuation
    lines joined and comment lines dropped."""
    language, pending, start = None, "", 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = re.match(r"\s*```(\w*)", line)
        if fence:
            language = fence.group(1) if language is None else None
            continue
        if language not in SHELL_BLOCKS or line.lstrip().startswith("#"):
            continue
        start = start if pending else number
        pending += line.strip().removesuffix("\\") + " "
        if not line.rstrip().endswith("\\"):
            yield start, pending.strip()
            pending = ""


def option_strings(parser) -> set:
    """Every option string of the parser and of its subcommands' parsers."""
    options = set()
    for action in parser._actions:
        options |= set(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            options = options.union(*(option_strings(sub) for sub in action.choices.values()))
    return options


def hparam_keys(script: str, value) -> list:
    """The problems of one --hparams value: unknown keys of its config (JSON or a repo .json file)."""
    config = HPARAMS_CONFIG.get(script)
    if config is None or value is None:
        return []
    if value.strip().endswith(".json"):
        file = REPO / value
        if not file.is_file():
            return []  # a user's own file, shown as a placeholder
        value = file.read_text(encoding="utf-8")
    try:
        keys = json.loads(value)
    except json.JSONDecodeError as error:
        return [f"--hparams is not valid JSON ({error})"]
    problems = [f"--hparams key {key!r} is not a field of {config.__name__}"
                for key in keys if key not in settable(config)]
    if config is FinetuningConfig and "tasks" in keys:  # a user task's spec: checked as a run checks it
        try:
            check_user_tasks(keys["tasks"])
        except InputError as error:
            problems.append(f"--hparams tasks: {error}")
    return problems


def test_every_documented_command_parses():
    parsers, problems, checked = {}, [], 0
    for page in DOCS:
        for number, command in shell_commands(page):
            call = script_call(shlex.split(command, comments=True))
            if call is None:
                continue
            script, arguments = call
            where = f"{page.relative_to(REPO)}:{number}: {script}"
            if script not in parsers:
                module = load_script(script)
                if not hasattr(module, "build_parser"):
                    problems.append(f"{where}: the script has no build_parser() to check commands with")
                    continue
                parsers[script] = module.build_parser()
            errors = io.StringIO()
            try:
                with redirect_stderr(errors):
                    args = parsers[script].parse_args(arguments)
            except SystemExit:
                problems.append(f"{where}: {errors.getvalue().strip().splitlines()[-1]}")
                continue
            checked += 1
            problems += [f"{where}: {word} is not an option of the script (argparse took it as an abbreviation)"
                         for word in arguments if word.startswith("--")
                         and word.split("=")[0] not in option_strings(parsers[script])]
            problems += [f"{where}: {problem}" for problem in hparam_keys(script, getattr(args, "hparams", None))]
    assert not problems, "documented commands that do not match the code:\n" + "\n".join(problems)
    assert checked >= 20, f"only {checked} documented commands found: is the extraction broken?"


def tables(path: Path):
    """(line number, header cells, first cells of the rows, nearest heading) for each Markdown table."""
    heading, header, rows, start = "", None, [], 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines() + [""], 1):
        if line.startswith("#"):
            heading = line
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            if header is None:
                header, rows, start = cells, [], number
            elif not set(cells[0]) <= set("-: "):
                rows.append((number, cells[0]))
            continue
        if header is not None:
            yield start, header, rows, heading
            header = None


def test_hparam_and_flag_tables_name_real_hparams_and_flags():
    problems, checked = [], {"hparam": 0, "flag": 0}
    for page in DOCS:
        for start, header, rows, heading in tables(page):
            where = page.relative_to(REPO)
            checked[header[0]] = checked.get(header[0], 0) + 1
            if header[0] == "hparam":
                config = TABLE_CONFIG.get(page.name)
                if config is None:
                    problems.append(f"{where}:{start}: an hparam table on a page without a config to check it")
                    continue
                problems += [f"{where}:{number}: hparam {key!r} is not a field of {config.__name__}"
                             for number, cell in rows for key in re.findall(r"`([a-z_0-9]+)`", cell)
                             if key not in settable(config)]
            elif header[0] == "flag":
                script = re.search(r"([\w/]+\.py)", heading).group(1)
                parser = load_script(script).build_parser()
                real = {option for action in parser._actions for option in action.option_strings} - {"-h", "--help"}
                shown = {flag for _, cell in rows for flag in re.findall(r"--[a-z][a-z0-9-]*", cell)}
                problems += [f"{where}:{start}: {script} has no flag {flag}" for flag in sorted(shown - real)]
                problems += [f"{where}:{start}: the {script} table lacks {flag}" for flag in sorted(real - shown)]
    assert not problems, "doc tables that do not match the code:\n" + "\n".join(problems)
    # the docs' tables as written today (hparams: two in pretraining.md, one in finetuning.md; flags: data.md's two):
    # fewer means the table reader stopped seeing some
    assert checked["hparam"] >= 3 and checked["flag"] >= 2, checked


def test_relative_links_point_at_files():
    links = [(page, number, target)
             for page in DOCS
             for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
             for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", line)
             if not target.startswith("http")]
    broken = [f"{page.relative_to(REPO)}:{number}: {target}" for page, number, target in links
              if not (page.parent / target).exists()]
    assert not broken, "links to missing files:\n" + "\n".join(broken)
    # the docs held 39 relative links on 2026-11-27: far fewer means the link reader stopped seeing them
    assert len(links) >= 30, f"only {len(links)} relative links found: is the extraction broken?"


def heading_anchors(page: Path) -> set:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces as '-'."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("#")}


def test_fidelity_citations_name_a_section():
    """Code, tests and docs cite the original's behaviours as `docs/fidelity.md#<section>`."""
    anchors = heading_anchors(REPO / "docs" / "fidelity.md")
    files = [path for folder in ("electra_tf", "pretrain_data", "finetune", "tests", "benchmarks", "experiments", "docs")
             for path in (REPO / folder).rglob("*") if path.suffix in (".py", ".md")]
    cited = [(path, anchor) for path in files + [REPO / "README.md"]
             for anchor in re.findall(r"fidelity\.md#([\w-]+)", path.read_text(encoding="utf-8"))]
    broken = [f"{path.relative_to(REPO)}: #{anchor}" for path, anchor in cited if anchor not in anchors]
    assert cited and not broken, "citations of missing sections of docs/fidelity.md:\n" + "\n".join(broken)


def test_cited_tests_exist_where_the_docs_say():
    """A test a page names (`tests/test_x.py`, `test_name`, or `tests/test_x.py` (`test_name`, ...))
    exists, in the file named: a renamed or moved test otherwise sends the reader looking."""
    defined = {path.name: set(re.findall(r"^def (test_\w+)", path.read_text(encoding="utf-8"), flags=re.M))
               for path in (REPO / "tests").glob("test_*.py")}
    anywhere = set().union(*defined.values())
    wrong = []
    for page in DOCS:
        text = page.read_text(encoding="utf-8")
        where = f"{page.relative_to(REPO)}"
        wrong += [f"{where}: tests/{name} does not exist" for name in re.findall(r"tests/(test_\w+\.py)", text)
                  if name not in defined]
        wrong += [f"{where}: no test is named {name}" for name in re.findall(r"`(test_\w+)(?:\[[^\]`]*\])?`", text)
                  if name not in anywhere]
        for file, names in re.findall(r"`tests/(test_\w+\.py)`\s+\(([^)]*)\)", text):
            wrong += [f"{where}: {name} is not in tests/{file}" for name in re.findall(r"`(test_\w+)", names)
                      if file in defined and name in anywhere and name not in defined[file]]
    assert not wrong, "\n".join(wrong)


def test_serving_page_shows_each_task_types_predict_output():
    """docs/serving.md shows, for every task type, a predict.py command followed by the first JSON
    lines it writes, with the keys predict.py writes for that type; and every SavedModel signature."""
    page = (REPO / "docs" / "serving.md").read_text(encoding="utf-8")
    shown = []
    for command, output in re.findall(r"```sh\n(.*?)```\s*```json\n(.*?)```", page, re.S):
        if "predict.py" in command:
            rows = [json.loads(line) for line in output.splitlines() if line.strip()]
            assert rows, command
            shown.append({key for key in rows[0] if key != "id"})
    wanted = {"classification": {"label", "probabilities"}, "multi-label": {"labels", "probabilities"},
              "regression": {"score"}, "tagging": {"words", "tags", "entities"},
              "SQuAD 2.0": {"answer", "start", "end", "null_odds", "abstains"}}
    assert [kind for kind, keys in wanted.items() if keys not in shown] == [], shown
    for name in ("serving_default", "embed", "text_a", "text_b", "question", "context", "token_start", "token_end"):
        assert f"`{name}`" in page or f"{name}=" in page, name
