"""Which pending units a worker takes next: a batch for one worker, or lanes for several at once.

A pretraining run's pending segments always go whole to one worker, which trains the run to its
end (`worker.do_pretrain`).
"""

from typing import List, Optional

from paper_replication.units import Unit

BATCH_UNITS = 40  # units per worker process (a fresh process now and then keeps memory flat)
# With Settings.workers > 1 (--quick), the pending units of these kinds whose needs are done run
# at once on that many workers: each needs only finished units' artifacts, never another's here
# (a pretraining run goes whole to one worker). Data builds and throughput runs stay alone.
LANE_KINDS = ("pretrain", "eval", "finetune", "export")


def run_length(pending: List[Unit], index: int) -> int:
    """How many units from `index` on are segments of one pretraining run (1 for another unit)."""
    unit, length = pending[index], 1
    while unit.kind == "pretrain" and index + length < len(pending) and pending[index + length].kind == "pretrain" \
            and pending[index + length].params["run"] == unit.params["run"]:
        length += 1
    return length


def batch(pending: List[Unit], budget: Optional[int] = None) -> List[Unit]:
    """The next units for one worker: up to BATCH_UNITS (a longer pretraining run still goes whole)
    and never more than `budget` (what --max-units leaves). A pretraining run's pending segments
    are never split: its worker trains the run to its end (`worker.do_pretrain`)."""
    taken: List[Unit] = []
    while len(taken) < len(pending):
        length = run_length(pending, len(taken))
        if (taken and len(taken) + length > BATCH_UNITS) or (budget is not None and len(taken) + length > budget):
            break
        taken += pending[len(taken):len(taken) + length]
    return taken


def lanes(pending: List[Unit], workers: int, seconds, budget: Optional[int] = None) -> List[List[Unit]]:
    """The pending units that can run now (LANE_KINDS, needs done), up to the first that cannot
    share the machine, at most BATCH_UNITS x workers and `budget` in all, dealt over `workers`
    lanes by their estimated `seconds(units)` (a run's segments, or one other unit), the longest
    first, each to the least loaded lane (the one with fewer units on a tie). No lanes when fewer
    than two groups (a pretraining run, or one other unit) are ready."""
    waiting, groups, count, index = {u.id for u in pending}, [], 0, 0
    limit = BATCH_UNITS * workers if budget is None else min(budget, BATCH_UNITS * workers)
    while index < len(pending) and pending[index].kind in LANE_KINDS:
        length = run_length(pending, index)
        group = pending[index:index + length]
        index += length
        if any(waiting.intersection(unit.needs) for unit in group):
            continue  # its run is not trained yet: a later round
        if count + length > limit:
            break
        groups.append(group)
        count += length
    if workers < 2 or len(groups) < 2:
        return []
    dealt, loads = [[] for _ in range(workers)], [0.0] * workers
    for group in sorted(groups, key=lambda g: -seconds(g)):
        lane = min(range(workers), key=lambda k: (loads[k], len(dealt[k])))
        dealt[lane] += group
        loads[lane] += seconds(group)
    return dealt
