"""Where units keep their results: one small JSON per finished unit, in two places.

`<output-dir>/units/<unit id>.json` beside the bulky outputs, and the same file under
`<results-dir>/units/`, which is committed: a unit counts as done when either copy exists, so a
machine that lost the output dir does not redo finished fine-tuning. Files are written whole or
not at all (`electra_tf.atomic_files`), so a killed run never leaves half a result.

Time that no unit file holds: a worker keeps `units/<unit id>.unrecorded/<worker>.json` up to date
with the seconds it has spent on the unit it is running (for pretraining, the segment it is
training), and deletes it once the unit file (which names the worker) holds them. A worker that is stopped first (a
session ends) leaves its file behind: the steps it checkpointed are not trained again and the
steps after its last checkpoint are, but either way the time was spent, so budgets and totals
add these files to the units' own.
"""

import json
import sys
import time
from pathlib import Path
from typing import List, Optional

from electra_tf import atomic_files


def write_json(path: Path, document) -> None:
    atomic_files.write_text(path, json.dumps(document, indent=1, sort_keys=True) + "\n")


def read_json(path: Path) -> Optional[dict]:
    """The file's JSON object; None if it is missing or damaged (said on stderr, naming the file:
    the unit's other copy is used, or the unit runs again)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:  # not OSError: a failing disk stops the run
        print(f"warning: {path} is damaged ({error}); ignoring it", file=sys.stderr)
        return None
    if not isinstance(document, dict):
        print(f"warning: {path} is damaged (not a JSON object); ignoring it", file=sys.stderr)
        return None
    return document


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
        """Writes the unit's result. A unit run again (a new machine lost the checkpoint or probe a
        pending unit needs) keeps its earlier run's time as that worker's unrecorded record: the
        time was spent, and budgets count it. A pretraining segment's earlier training log stays
        there too (git has the rest of the earlier record)."""
        earlier = self.read(unit_id)
        if earlier is not None and (earlier.get("worker") is None or earlier["worker"] != result.get("worker")):
            record = {key: earlier[key] for key in ("seconds", "machine_seconds", "cpu", "train_log") if key in earlier}
            name = earlier.get("worker") or f"earlier-{time.time_ns()}"
            self.write_unrecorded(unit_id, name, {**record, "superseded": True})
        for path in self._paths(unit_id):
            write_json(path, result)

    def _unrecorded_dirs(self, unit_id: str):
        return [path.with_name(path.name[:-len(".json")] + ".unrecorded") for path in self._paths(unit_id)]

    def write_unrecorded(self, unit_id: str, worker: str, record: dict) -> None:
        for directory in self._unrecorded_dirs(unit_id):
            write_json(directory / f"{worker}.json", record)

    def clear_unrecorded(self, unit_id: str, worker: str) -> None:
        for directory in self._unrecorded_dirs(unit_id):
            (directory / f"{worker}.json").unlink(missing_ok=True)
            if directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()

    def unrecorded(self, unit_id: str) -> List[dict]:
        """The unit's unrecorded-time records (each worker's once, from whichever copy has it), but
        the one of the worker its unit file names: a record committed while that worker ran, or
        left by a kill between the unit file and the clearing, is in the unit file already."""
        recorded_by = (self.read(unit_id) or {}).get("worker")
        found = {}
        for directory in self._unrecorded_dirs(unit_id):
            try:
                paths = sorted(directory.glob("*.json")) if directory.is_dir() else []
            except FileNotFoundError:  # its worker recorded the unit and cleared it just now (--quick's lanes)
                paths = []
            for path in paths:
                record = read_json(path)
                if record is not None and path.stem != recorded_by:
                    found.setdefault(path.name, record)
        return [found[name] for name in sorted(found)]
