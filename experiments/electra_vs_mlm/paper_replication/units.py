"""Units of work (what one result file records), the pretraining runs they belong to, and scores.

A unit is a data build, a vocab, a throughput measurement, a pretraining segment (a run up to
probe step k, whose checkpoint is then copied aside), a held-out evaluation at k, a fine-tuning
trial (model, checkpoint, task, seed) or an HF export. Units are listed in dependency order; a
unit is pending when it has no result, or when its artifact (a file its consumers read) is gone
and a pending unit needs it. Planning is pure Python (no TensorFlow), so `--status` is instant.
"""

import dataclasses
import functools
import hashlib
import math
import platform
import re
import statistics
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from paper_replication.settings import Settings
from paper_replication.store import Store

# Each task's score from the fine-tuning metrics (x100): GLUE's, the mean where GLUE averages two;
# chunking's is the chunk F1 (a reading added beside GLUE on 2026-11-27, issue #42).
TASK_METRICS = {"cola": ("mcc",), "sst": ("accuracy",), "mrpc": ("accuracy", "f1"),
                "sts": ("pearson", "spearman"), "rte": ("accuracy",), "chunk": ("f1",)}
GLUE_FOLDERS = {"cola": "CoLA", "sst": "SST-2", "mrpc": "MRPC", "sts": "STS-B", "rte": "RTE"}
CHUNK_TASK = "chunk"  # CoNLL-2000: trained on train.txt, scored on the official test.txt (linked as dev.txt)
TASK_EPOCHS = {"rte": 10, "sts": 10}  # the recipe's single-task epochs; 3 for the others
DOUBLED = ("mrpc", "sts")  # trained on both text orders


@dataclasses.dataclass
class Unit:
    id: str
    kind: str  # vocab | build | throughput | pretrain | eval | finetune | export
    params: dict
    artifact: Optional[str] = None  # what consumers read; a unit whose artifact is gone may rerun
    needs: Tuple[str, ...] = ()  # units whose artifacts this one reads


@dataclasses.dataclass(frozen=True)
class Run:
    """One pretraining run: its objective, vocab, schedule and probe checkpoints."""

    name: str
    stage: int
    objective: str
    vocab: str
    learning_rate: float
    steps: int
    save_every: int
    probe_steps: Tuple[int, ...]
    hparams: Tuple[Tuple[str, object], ...] = ()  # PretrainingConfig values of its own (stage 4)


def cpu_description(cores: int) -> str:
    """The CPU a worker spends its time on, which every time record names: its model, the widest
    vector extension the kernels can use and the cores, e.g. "AMD EPYC (AVX2, 2 cores)". The report
    splits machine time by it, and the ETA prefers rates measured on the CPU it runs on."""
    try:
        with open("/proc/cpuinfo") as info:
            lines = info.read().splitlines()
    except OSError:  # not Linux
        return f"{platform.machine()} ({cores} cores)"
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                 platform.machine())
    flags = set(next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), []))
    isa = ("AVX-512 + AMX" if "amx_tile" in flags else "AVX-512" if "avx512f" in flags
           else "AVX2" if "avx2" in flags else "no AVX2")
    return f"{model} ({isa}, {cores} cores)"


def machine_time(record: dict) -> float:
    """A result's machine seconds (wall seconds where a result predates them)."""
    return record.get("machine_seconds", record.get("seconds", 0.0))


class Context:
    """Paths and settings of one replication, and the unit results found so far."""

    def __init__(self, settings: Settings, output_dir, results_dir, repo, shared_data):
        self.settings = settings
        self.output_dir, self.results_dir = Path(output_dir), Path(results_dir)
        self.repo, self.shared_data = Path(repo), Path(shared_data)
        self.store = Store(self.output_dir, self.results_dir)
        self.clock = "machine"  # what "machine seconds" count (runner.settle_clock)
        self.records = True  # planning records budgets and schedules the first time (false: --status)

    def result(self, unit_id: str) -> Optional[dict]:
        return self.store.read(unit_id)

    def _time_records(self, units: Sequence[Unit]):
        """Every record of time the units took: their unit files and the time of stopped workers that
        no unit file holds (`Store.unrecorded`)."""
        for unit in units:
            yield self.result(unit.id) or {}
            yield from self.store.unrecorded(unit.id)

    def spent(self, units: Sequence[Unit], machine: bool = True) -> float:
        """Seconds the units took: machine seconds (CPU time / cores: the time on the machine alone;
        wall seconds where a result predates them) or, with `machine=False`, wall seconds."""
        seconds = machine_time if machine else (lambda record: record.get("seconds", 0.0))
        return sum(seconds(record) for record in self._time_records(units))

    def spent_by_cpu(self, units: Sequence[Unit]) -> Dict[str, float]:
        """The units' machine seconds by the CPU that spent them ("not recorded" for records written
        before workers named it, on 2026-11-26)."""
        by_cpu: Dict[str, float] = {}
        for record in self._time_records(units):
            if machine_time(record):
                cpu = record.get("cpu", "not recorded")
                by_cpu[cpu] = by_cpu.get(cpu, 0.0) + machine_time(record)
        return by_cpu

    def corpus_split(self) -> Tuple[List[Path], List[Path]]:
        """(training files, held-out files) of the corpus, in sorted order."""
        files = sorted(p for p in (self.shared_data / "corpus" / "enwiki_2015_wikiextractor" / "AA").iterdir()
                       if p.is_file())
        held = self.settings.held_out_files
        train = files[:-held]
        if self.settings.corpus_files is not None:
            train = train[:self.settings.corpus_files]
        return train, files[-held:]

    def vocab_file(self, vocab: str) -> Path:
        """BERT's vocab, or the learned one: committed in the results dir, with a copy in the output
        dir (so a checkout without the commit still finds the vocab its data was built with)."""
        if vocab == "bert":
            return self.shared_data / "vocab" / "vocab.txt"
        name = f"learned_{self.settings.learned_vocab_size}.txt"
        committed, copy = self.results_dir / "vocab" / name, self.output_dir / "data" / name
        return copy if copy.exists() and not committed.exists() else committed

    def vocab_size(self, vocab: str) -> Optional[int]:
        path = self.vocab_file(vocab)
        return sum(1 for _ in path.open(encoding="utf-8")) if path.exists() else None

    def data_dir(self, vocab: str) -> Path:
        return self.output_dir / "data" / f"{vocab}_seq{self.settings.seq}"

    @property
    def glue_dir(self) -> Path:
        return self.output_dir / "glue"

    def probe_prefix(self, run: Run, step: int) -> Path:
        return self.output_dir / "probes" / run.name / f"ckpt-{step}"

    def pending(self, units: Sequence[Unit]) -> List[Unit]:
        """The units to run, in order: no result, or an artifact that a pending unit needs is gone."""
        needed, pending = set(), []
        for unit in reversed(units):
            has_result = self.result(unit.id) is not None
            artifact_ok = unit.artifact is None or Path(unit.artifact).exists() or unit.id not in needed
            if not (has_result and artifact_ok):
                pending.append(unit)
                needed.update(unit.needs)
        return pending[::-1]


def schedule(settings: Settings, hours: float, tokens_per_second: Optional[float], name: str, stage: int,
             objective: str, vocab: str, learning_rate: float, fractions: Sequence[float],
             steps: Optional[int] = None, hparams: Tuple[Tuple[str, object], ...] = ()) -> Run:
    """A run of `steps`, or of `hours` at the measured speed, with a checkpoint about every
    1/checkpoints_per_hour hours and probes at `fractions` (multiples of 1/4) of its steps."""
    per_quarter = max(1, math.ceil(hours * settings.checkpoints_per_hour / 4))
    if steps is None:
        steps = settings.fixed_steps or hours * 3600 * tokens_per_second / (settings.batch * settings.seq)
    quantum = 4 * per_quarter
    steps = max(quantum, quantum * round(steps / quantum))
    return Run(name, stage, objective, vocab, learning_rate, steps, steps // quantum,
               tuple(int(round(f * steps)) for f in fractions), hparams)


def run_hparams(ctx: Context, run: Run) -> dict:
    """The PretrainingConfig hparams of a run."""
    s, data = ctx.settings, ctx.data_dir(run.vocab)
    return {**s.model_hparams, "objective": run.objective, "vocab_size": ctx.vocab_size(run.vocab),
            "vocab_file": str(ctx.vocab_file(run.vocab)), "learning_rate": run.learning_rate,
            "train_batch_size": s.batch, "eval_batch_size": s.batch, "max_seq_length": s.seq,
            "num_train_steps": run.steps, "num_warmup_steps": int(round(s.warmup_fraction * run.steps)),
            "save_checkpoints_steps": run.save_every, "keep_checkpoint_max": 3,
            "iterations_per_loop": min(run.save_every, 100), "log_every": min(run.save_every, 50),
            "pretrain_tfrecords": str(data / "train" / "pretrain_data.tfrecord*"),
            "eval_tfrecords": str(data / "eval" / "pretrain_data.tfrecord*"),
            "model_dir": str(ctx.output_dir / "models" / run.name), "do_eval": False,
            "mask_with_replacement": False,  # as every run has drawn since the plan was fixed
            **dict(run.hparams)}


def checkpoint_fingerprint(prefix) -> Optional[str]:
    """The sha256 of a checkpoint's .index file (its tensors' offsets and checksums), None if it is
    not there: a checkpoint trained again, on another CPU, is another model with another one."""
    index = Path(str(prefix) + ".index")
    return hashlib.sha256(index.read_bytes()).hexdigest() if index.is_file() else None


def latest_checkpoint_step(model_dir: Path) -> int:
    """The step of the run's newest checkpoint (0 before the first): where a resumed run starts."""
    state = model_dir / "checkpoint"
    text = state.read_text(errors="replace") if state.exists() else ""  # garbled: no step, not a crash
    found = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', text, re.M)
    return int(found.group(1)) if found else 0


def export_unit(ctx: Context, run: Run, unit_id: str, output: Path) -> Unit:
    """The run's final discriminator (for `bert`, its MLM model) exported to `output` in float16
    (committed when under 20 MB) as soon as the run is trained: a new machine then never trains it
    again for the export, nor for the trials of its final checkpoint (`finetune_units`). An export
    kept out of git (too large) has no artifact: the trials then need the checkpoint itself."""
    committed = (ctx.result(unit_id) or {}).get("committed", True)  # before it runs: as it will be
    return Unit(unit_id, "export", {"probe": str(ctx.probe_prefix(run, run.steps)), "run": run.name,
                                    "output": str(output)},
                artifact=str(output / "config.json") if committed else None,
                needs=(f"s{run.stage}/{run.name}/pretrain/{run.steps}",))


def data_unit_ids(vocab: str) -> Tuple[str, ...]:
    return ("s1/data/vocab_learned", f"s1/data/build_{vocab}") if vocab == "learned" else (f"s1/data/build_{vocab}",)


def pretraining_units(ctx: Context, run: Run, flops_per_step: float) -> List[Unit]:
    """The run's segments (one per probe step) and the held-out evaluation at each probe."""
    hparams = run_hparams(ctx, run)
    prefix = f"s{run.stage}/{run.name}"
    units, previous = [], 0
    for step in run.probe_steps:
        probe = ctx.probe_prefix(run, step)
        units.append(Unit(f"{prefix}/pretrain/{step}", "pretrain",
                          {"run": run.name, "hparams": hparams, "step": step, "from_step": previous,
                           "probe": str(probe), "flops_per_step": flops_per_step,
                           "tokens_per_step": ctx.settings.batch * ctx.settings.seq},
                          artifact=str(probe) + ".index", needs=data_unit_ids(run.vocab)))
        previous = step
    for step in run.probe_steps:
        eval_dir = ctx.output_dir / "evals" / run.name / f"step_{step}"
        units.append(Unit(f"{prefix}/eval/{step}", "eval",
                          {"hparams": {**hparams, "do_train": False, "do_eval": True,
                                       "num_eval_steps": ctx.settings.eval_batches,
                                       "model_dir": str(eval_dir), "init_checkpoint": str(ctx.probe_prefix(run, step)),
                                       "results_json": str(eval_dir / "unsup_results.json"),
                                       "results_txt": str(eval_dir / "unsup_results.txt")},
                           "step": step, "flops": flops_per_step * step},
                          needs=(f"{prefix}/pretrain/{step}",) + data_unit_ids(run.vocab)))
    return units


def finetune_units(ctx: Context, stage: int, vocab: str, tasks: Sequence[str], run: Optional[Run] = None,
                   step: Optional[int] = None, export: Optional[Unit] = None) -> List[Unit]:
    """Fine-tuning trials of a run's checkpoint at `step`, or of random init (run None), per task and seed.
    With the `export` unit of that checkpoint (its committed float16 HF copy), a trial needs the
    export, not the checkpoint: on a machine without the checkpoint (the output dir is not in git),
    or with the checkpoint trained again, it starts from the export (`worker.do_finetune`) instead
    of another model than the one the earlier trials fine-tuned (a run trained again on another
    CPU is one)."""
    s = ctx.settings
    base = {**s.model_hparams, "vocab_size": ctx.vocab_size(vocab), "vocab_file": str(ctx.vocab_file(vocab)),
            "recipe": "paper", "num_trials": 1, "raw_data_dir": str(ctx.glue_dir), "keep_all_models": False,
            "iterations_per_loop": 10 ** 6, "evaluate_every_epoch": False,  # scores: the final epoch's either way
            # every trial since stage 1 has trained on full batches alone (the package's way until
            # 2026-11-27, one step an epoch fewer than the original): kept, so all trials are alike
            "drop_last_partial_batch": True}
    if s.max_examples is not None:
        base["max_examples"] = s.max_examples
    if run is None:
        prefix, source, needs = f"s{stage}/random_{vocab}/ft", {"random_init": True}, ()
    else:
        prefix = f"s{stage}/{run.name}/ft/{step}"
        source = {"init_checkpoint": str(ctx.probe_prefix(run, step))}
        if export is not None and export.artifact is None:
            export = None  # not committed: no fallback
        needs = (f"s{run.stage}/{run.name}/pretrain/{step}",) if export is None else (export.id,)
    fallback = {} if export is None else {  # and the checkpoint the export was made from
        "export": export.params["output"], "exported": (ctx.result(export.id) or {}).get("probe_sha256")}
    units = []
    for task in tasks:
        for seed in s.seeds:
            scratch = ctx.output_dir / "finetuning" / prefix / task / f"seed{seed}"
            hparams = {**base, **source, "task_names": [task], "seed": seed,
                       "finetuning_models_dir": str(scratch / "models"), "results_dir": str(scratch / "results")}
            units.append(Unit(f"{prefix}/{task}/seed{seed}", "finetune",
                              {"hparams": hparams, "task": task, "seed": seed, **fallback}, needs=needs))
    return units


def task_score(task: str, metrics: Dict[str, float]) -> float:
    """A task's score (x100): MCC, accuracy, the mean of accuracy/F1 or Pearson/Spearman, chunk F1."""
    return float(statistics.fmean(metrics[name] for name in TASK_METRICS[task]))


def seed_scores(ctx: Context, prefix: str, task: str) -> List[float]:
    """The task score of every finished seed of `prefix` (e.g. "s1/pilot_a/ft/850")."""
    scores = []
    for seed in ctx.settings.seeds:
        result = ctx.result(f"{prefix}/{task}/seed{seed}")
        if result is not None:
            scores.append(task_score(task, result["scores"][task]))
    return scores


def median_scores(ctx: Context, prefix: str, tasks: Sequence[str]) -> Optional[Dict[str, float]]:
    """{task: median over seeds}, or None until every seed of every task has finished."""
    medians = {}
    for task in tasks:
        scores = seed_scores(ctx, prefix, task)
        if len(scores) < len(ctx.settings.seeds):
            return None
        medians[task] = float(statistics.median(scores))
    return medians


@functools.lru_cache(maxsize=None)
def _lines(path: Path) -> int:
    return sum(1 for _ in path.open(encoding="utf-8"))


@functools.lru_cache(maxsize=None)
def _sentences(path: Path) -> int:
    """Sentences of a CoNLL column file: its runs of non-blank lines."""
    count, inside = 0, False
    for line in path.open(encoding="utf-8"):
        count, inside = count + (bool(line.strip()) and not inside), bool(line.strip())
    return count


def train_passes(ctx: Context, task: str) -> int:
    """Training examples seen by one fine-tuning trial of `task` (rows x orders x epochs)."""
    if task == CHUNK_TASK:
        rows = _sentences(ctx.shared_data / "conll2000" / "train.txt")
    else:
        path = ctx.glue_dir / GLUE_FOLDERS[task] / "train.tsv"
        if not path.exists():
            path = ctx.shared_data / "glue" / GLUE_FOLDERS[task] / "train.tsv"
        rows = _lines(path) - (task != "cola")
    if task == "sst":  # the shared file when <output>/glue is not prepared yet (--status on a new machine)
        rows = min(rows, ctx.settings.sst_subsample)
    if ctx.settings.max_examples is not None:
        rows = min(rows, ctx.settings.max_examples)
    return rows * (2 if task in DOUBLED else 1) * TASK_EPOCHS.get(task, 3)
