"""Graphs are traced without AutoGraph (docs/performance.md, "Start-up"): its rewrite of every model
function cost about 4 s at each fine-tuning start. Every `tf.function` in the packages says
`autograph=False`, and every `tf.data` map is given a function wrapped in `do_not_convert`; the
suite's other tests show that the graphs compute what they computed with it."""

import re
from pathlib import Path

PACKAGES = ("electra_tf", "finetune", "pretrain_data")
ROOT = Path(__file__).resolve().parent.parent


def sources():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT), path.read_text(encoding="utf-8")


def call_text(source: str, open_paren: int) -> str:
    """The call's arguments: from `open_paren` to its matching closing parenthesis."""
    depth = 0
    for end in range(open_paren, len(source)):
        depth += {"(": 1, ")": -1}.get(source[end], 0)
        if depth == 0:
            return source[open_paren:end + 1]
    raise AssertionError("unbalanced parentheses")


def test_every_tf_function_is_traced_without_autograph():
    uses, missing = 0, []
    for path, source in sources():
        # code, not prose: a call `tf.function(` or a decorator `@tf.function` (quoted ones are prose)
        for match in re.finditer(r"(?<![`\w.])(@)?tf\.function\b(\()?", source):
            if match.group(1) is None and match.group(2) is None:
                continue
            uses += 1
            line = source.count("\n", 0, match.start()) + 1
            if match.group(2) is None or "autograph=False" not in call_text(source, match.end() - 1):
                missing.append(f"{path}:{line}")
    assert uses >= 15, uses  # the scan does find them
    assert not missing, missing


def test_every_dataset_map_gets_a_function_autograph_does_not_convert():
    maps, missing = 0, []
    for path, source in sources():
        for match in re.finditer(r"\.map\(\s*(\w+)", source):
            maps += 1
            bound = re.search(rf"\b{match.group(1)} = tf\.autograph\.experimental\.do_not_convert\(", source)
            if bound is None:
                missing.append(f"{path}:{source.count(chr(10), 0, match.start()) + 1}")
    assert maps >= 1, maps
    assert not missing, missing
