"""Where units keep their results: one small JSON per finished unit, in two places.

`<output-dir>/units/<unit id>.json` beside the bulky outputs, and the same file under
`<results-dir>/units/`, which is committed: a unit counts as done when either copy exists, so a
machine that lost the output dir does not redo finished fine-tuning. Files are written
atomically (temporary file, then rename), so a killed run never leaves half a result.
"""

import json
import os
from pathlib import Path
from typing import Optional


def write_json(path: Path, document) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + f".tmp{os.getpid()}")
    temporary.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    temporary.replace(path)


def read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


class Store:
    """Unit results under `output_dir` and `results_dir`."""

    def __init__(self, output_dir, results_dir):
        self.output_dir = Path(output_dir)
        self.results_dir = Path(results_dir)

    def _paths(self, unit_id: str):
        return [root / "units" / f"{unit_id}.json" for root in (self.output_dir, self.results_dir)]

    def read(self, unit_id: str) -> Optional[dict]:
        for path in self._paths(unit_id):
            result = read_json(path)
            if result is not None:
                return result
        return None

    def write(self, unit_id: str, result: dict) -> None:
        for path in self._paths(unit_id):
            write_json(path, result)
