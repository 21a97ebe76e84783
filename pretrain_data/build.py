"""Raw text -> sharded pretraining TFRecords (what `build_pretraining_dataset.py` runs).

Work is split by corpus file: job j (of `num_processes`) takes the files whose sorted index is
j modulo the job count and owns the output shards whose index is j modulo the job count, as the
original. Unlike the original, every corpus file gets its own random generator seeded from
(`seed`, file name), so the examples a file yields do not depend on which job packs it: one
process and several produce the same multiset of examples, and a given seed and job count give
byte-identical shards.

Everything is written into a temporary sibling directory that replaces `output_dir` only when
the whole build succeeded; a failed or interrupted build (an error, a full disk, SIGTERM / SIGINT)
leaves the previous output untouched and removes its temporary dir, and the next build removes
those that killed builds left.
"""

import dataclasses
import functools
import glob
import io
import json
import math
import multiprocessing
import os
import queue
import random
import re
import shutil
import time
from pathlib import Path

import numpy as np
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from electra_tf import disk_full
from electra_tf.dir_lock import DirLock
from electra_tf.errors import InputError, WorkerLost
from electra_tf.progress import Progress
from pretrain_data import corpus as corpus_lib
from pretrain_data.packing import ExampleBuilder, PackedExample, PackingStats, assemble
from pretrain_data.records import EVAL_SUBDIR, STATS_FILE, file_sha256, serialize_examples, shard_name
from pretrain_data.sentences import SENTENCE_RULES, split_sentences
from pretrain_data.stop_signals import end_with_parent, ignore_sigint, stopped_by_signals

MIN_SEQ_LENGTH, MAX_SEQ_LENGTH = 8, 512
BYTES_PER_SHARD = 4 << 20  # default sizing: about one output shard per 4 MiB of raw text
MAX_DEFAULT_SHARDS = 1000  # the original's fixed count, now only the ceiling
TOKENIZE_BATCH_LINES = 4096

# (flat token ids, row splits) for a batch of lines: row i is flat[splits[i]:splits[i + 1]].
TokenizeLines = Callable[[Sequence[str]], Tuple[Sequence[int], Sequence[int]]]


@dataclasses.dataclass
class BuildOptions:
    """Every setting of a build; the CLI flags map onto these fields one to one."""

    corpus_dir: str
    vocab_file: str
    output_dir: str
    max_seq_length: int = 128
    num_processes: int = 1
    blanks_separate_docs: bool = True
    do_lower_case: bool = True
    do_strip_accents: bool = True
    input_format: str = "lines"
    split_sentences: Optional[bool] = None  # None: on for wikiextractor, off for lines
    sentence_rules: str = "all"  # pretrain_data.sentences.SENTENCE_RULES: "english" as built before 2026-12-03
    num_out_files: Optional[int] = None  # None: sized to the corpus
    eval_fraction: float = 0.0
    seed: int = 12345
    overwrite: bool = False
    quiet: bool = False
    strict_utf8: bool = False  # invalid UTF-8 is an error instead of dropped bytes

    @property
    def sentence_splitting(self) -> bool:
        if self.split_sentences is None:
            return self.input_format == "wikiextractor"
        return self.split_sentences


@dataclasses.dataclass
class JobResult:
    """What one job built: packing counters for train and eval, and corpus counters."""

    train: PackingStats = dataclasses.field(default_factory=PackingStats)
    eval: PackingStats = dataclasses.field(default_factory=PackingStats)
    documents: int = 0
    eval_documents: int = 0
    lines: int = 0
    lines_replaced: int = 0
    invalid_utf8: Dict[str, int] = dataclasses.field(default_factory=dict)  # corpus file -> lines with bad bytes
    seconds: float = 0.0  # time spent building, after the job's start-up (imports, tokenizer)


def default_num_out_files(total_bytes: int, num_processes: int) -> int:
    """One shard per ~4 MiB of text, at least one per job, at most 1000."""
    return max(num_processes, min(MAX_DEFAULT_SHARDS, math.ceil(total_bytes / BYTES_PER_SHARD)))


def pack_file(corpus_file: corpus_lib.CorpusFile, options: BuildOptions, tokenize_lines: TokenizeLines,
              result: JobResult) -> Tuple[np.ndarray, Dict[str, List[PackedExample]]]:
    """Reads, tokenizes and packs one corpus file.

    Returns the file's token ids (one flat array) and its examples per split ("train", "eval")
    as spans of that array; `assemble` turns them into padded id rows.
    """
    docs = corpus_lib.read_documents(
        corpus_file.path, options.input_format, options.blanks_separate_docs,
        functools.partial(split_sentences, rules=options.sentence_rules) if options.sentence_splitting else None,
        options.strict_utf8)
    result.lines_replaced += docs.lines_replaced
    if docs.lines_replaced:
        result.invalid_utf8[corpus_file.name] = docs.lines_replaced
    lines = [line for document in docs.documents for line in document]
    result.lines += len(lines)
    token_parts, splits = [], [0]
    for start in range(0, len(lines), TOKENIZE_BATCH_LINES):
        batch_flat, batch_splits = tokenize_lines(lines[start:start + TOKENIZE_BATCH_LINES])
        splits.extend((splits[-1] + np.asarray(batch_splits[1:], np.int64)).tolist())
        token_parts.append(np.asarray(batch_flat, np.int64))
    tokens = np.concatenate(token_parts) if token_parts else np.zeros([0], np.int64)

    seed = f"{options.seed}:{corpus_file.name}"
    builders = {"train": ExampleBuilder(options.max_seq_length, random.Random(seed)),
                "eval": ExampleBuilder(options.max_seq_length, random.Random(seed + ":eval"))}
    made: Dict[str, List[PackedExample]] = {"train": [], "eval": []}
    split_rng = random.Random(seed + ":split")
    line_index = 0
    for document in docs.documents:
        held_out = options.eval_fraction > 0 and split_rng.random() < options.eval_fraction
        split = "eval" if held_out else "train"
        result.documents += 1
        result.eval_documents += held_out
        builder, examples = builders[split], made[split]
        for sentence in range(line_index, line_index + len(document)):
            example = builder.add_sentence(splits[sentence], splits[sentence + 1])
            if example is not None:
                examples.append(example)
        line_index += len(document)
        example = builder.end_document()
        if example is not None:
            examples.append(example)
    result.train.merge(builders["train"].stats)
    result.eval.merge(builders["eval"].stats)
    return tokens, made


class _RoundRobinWriter:
    """Writes records round-robin across a job's shards, as the original's ExampleWriter."""

    def __init__(self, paths: List[Path]):
        import tensorflow as tf
        self._writers = [tf.io.TFRecordWriter(str(path)) for path in paths]
        self._next = 0

    def __call__(self, record: bytes) -> None:
        self._writers[self._next].write(record)
        self._next = (self._next + 1) % len(self._writers)

    def close(self) -> None:
        for writer in self._writers:
            writer.close()


_progress_queue = None


def _init_worker(reports) -> None:
    """Process-pool initializer: one TensorFlow thread per job, since jobs are the parallelism;
    Ctrl-C is left to the parent, which stops the workers, and they end with it if it is killed."""
    global _progress_queue
    _progress_queue = reports
    ignore_sigint()
    end_with_parent()
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def run_job(job: int, files: List[corpus_lib.CorpusFile], options: BuildOptions, staging: str,
            num_out_files: int, report: Optional[Callable[[int], None]] = None) -> JobResult:
    """Builds job `job`'s share of the corpus into its own shards under `staging`."""
    from electra_tf.tokenization import Tokenizer
    report = report or (lambda n: _progress_queue.put(n))
    tokenizer = Tokenizer(options.vocab_file, do_lower_case=options.do_lower_case,
                          strip_accents=options.do_strip_accents)
    tokenizer.tokenize_batch(["déjà traced"])  # not ASCII: TensorFlow's path, traced before the clock starts
    count = options.num_processes
    train = _RoundRobinWriter([Path(staging) / shard_name(i, num_out_files)
                               for i in range(job, num_out_files, count)])
    eval_writer = None
    if options.eval_fraction > 0:
        eval_writer = _RoundRobinWriter([Path(staging) / EVAL_SUBDIR / shard_name(job, count)])
    result = JobResult()
    start = time.monotonic()
    try:
        for corpus_file in files:
            tokens, examples = pack_file(corpus_file, options, tokenizer.tokenize_batch, result)
            for split, write in (("train", train), ("eval", eval_writer)):
                if examples[split]:
                    rows = assemble(examples[split], tokens, options.max_seq_length, tokenizer.cls_id,
                                    tokenizer.sep_id)
                    for record in serialize_examples(*rows):
                        write(record)
            report(corpus_file.size)
    finally:
        train.close()
        if eval_writer:
            eval_writer.close()
    result.seconds = time.monotonic() - start
    return result


def validate(options: BuildOptions) -> List[corpus_lib.CorpusFile]:
    """Checks every option before any work starts; returns the corpus files."""
    if not MIN_SEQ_LENGTH <= options.max_seq_length <= MAX_SEQ_LENGTH:
        raise InputError(f"--max-seq-length {options.max_seq_length}: must be in "
                         f"[{MIN_SEQ_LENGTH}, {MAX_SEQ_LENGTH}]")
    if options.num_processes < 1:
        raise InputError(f"--num-processes {options.num_processes}: must be at least 1")
    if not 0.0 <= options.eval_fraction < 1.0:
        raise InputError(f"--eval-fraction {options.eval_fraction}: must be in [0, 1)")
    if options.num_out_files is not None and options.num_out_files < options.num_processes:
        raise InputError(f"--num-out-files {options.num_out_files}: must be at least --num-processes "
                         f"({options.num_processes}), since each process writes its own shards")
    if options.input_format not in corpus_lib.INPUT_FORMATS:
        raise InputError(f"--input-format {options.input_format!r}: expected one of "
                         f"{', '.join(corpus_lib.INPUT_FORMATS)}")
    if options.sentence_rules not in SENTENCE_RULES:
        raise InputError(f"--sentence-rules {options.sentence_rules!r}: expected one of {', '.join(SENTENCE_RULES)}")
    from electra_tf.tokenization import load_vocab
    load_vocab(options.vocab_file)
    output = Path(options.output_dir)
    if output.exists() and not output.is_dir():
        raise InputError(f"--output-dir {output}: exists and is not a directory")
    corpus, written = Path(options.corpus_dir).resolve(), output.resolve()
    if written == corpus or written in corpus.parents or corpus in written.parents:
        raise InputError(f"--output-dir {output} and --corpus-dir {options.corpus_dir} overlap: the build would "
                         f"read its own records as text, or replace its corpus; write elsewhere")
    vocab = Path(options.vocab_file)
    if written in (*Path(os.path.abspath(vocab)).parents, *vocab.resolve().parents):  # the path or its target
        raise InputError(f"--output-dir {output} holds --vocab-file {options.vocab_file}: replacing the output "
                         f"would delete it; write elsewhere")
    if output.is_dir() and any(output.iterdir()) and not options.overwrite:
        raise InputError(f"--output-dir {output}: exists and is not empty (pass --overwrite to replace it)")
    return corpus_lib.list_corpus_files(options.corpus_dir)


def _stats(options: BuildOptions, files, results: List[JobResult], num_out_files: int,
           seconds: float) -> Dict:
    train, evaluation, total = PackingStats(), PackingStats(), JobResult()
    for result in results:
        train.merge(result.train)
        evaluation.merge(result.eval)
        total.invalid_utf8.update(result.invalid_utf8)
        for name in ("documents", "eval_documents", "lines", "lines_replaced"):
            setattr(total, name, getattr(total, name) + getattr(result, name))
    megabytes = sum(f.size for f in files) / 1e6

    def summary(stats: PackingStats) -> Dict:
        return {"examples": stats.examples, "tokens": stats.tokens,
                "single_segment_share": stats.single_segment / max(stats.examples, 1),
                "single_segment_draw_share": stats.single_segment_draw / max(stats.examples, 1),
                "short_example_share": stats.short_target / max(stats.examples, 1),
                "discarded_tokens": stats.discarded_tokens}

    return {
        "max_seq_length": options.max_seq_length,
        "vocab_file": str(options.vocab_file), "vocab_sha256": file_sha256(options.vocab_file),
        "do_lower_case": options.do_lower_case, "do_strip_accents": options.do_strip_accents,
        "input_format": options.input_format, "sentence_splitting": options.sentence_splitting,
        "sentence_rules": options.sentence_rules,
        "seed": options.seed, "num_processes": options.num_processes,
        "files": len(files), "megabytes": round(megabytes, 3), "lines": total.lines,
        "invalid_utf8_lines_replaced": total.lines_replaced,
        "invalid_utf8_lines_per_file": dict(sorted(total.invalid_utf8.items())),
        "documents": total.documents, "eval_documents": total.eval_documents,
        "num_out_files": num_out_files,
        "eval_num_out_files": options.num_processes if options.eval_fraction > 0 else 0,
        "train": summary(train), "eval": summary(evaluation),
        "seconds": round(seconds, 2), "megabytes_per_second": round(megabytes / max(seconds, 1e-9), 3),
        # the slowest job's building time, without process start-up: the steady-state rate
        "job_seconds": round(max(r.seconds for r in results), 2),
    }


def invalid_utf8_summary(stats: Dict, most: int = 5) -> Optional[str]:
    """A line naming the corpus files with invalid UTF-8 and their line counts, or None."""
    per_file = stats["invalid_utf8_lines_per_file"]
    if not per_file:
        return None
    worst = sorted(per_file.items(), key=lambda item: -item[1])[:most]
    listed = ", ".join(f"{name} ({count:,} line{'s' * (count != 1)})" for name, count in worst)
    more = f" and {len(per_file) - most} more" if len(per_file) > most else ""
    return (f"invalid UTF-8 in {len(per_file)} file(s), {stats['invalid_utf8_lines_replaced']:,} line(s); the bad "
            f"bytes were dropped (--strict-utf8 makes this an error): {listed}{more}")


def build_pretraining_dataset(options: BuildOptions) -> Dict:
    """Runs a whole build (see the module docstring); returns the statistics written to stats.json.

    The build holds its output dir's lock (`electra_tf.dir_lock`, the lock file beside the dir,
    which is replaced as a whole): a second build into it is refused, and the temporary dirs that
    interrupted builds left there are removed. A full disk or SIGTERM / SIGINT end it with one line,
    its worker processes stopped and its temporary output removed."""
    output = Path(options.output_dir).resolve()
    lock = DirLock(output, output.parent / f".{output.name}.lock", "--output-dir")
    kept = f"nothing was written to {output}" + (" (its previous content is untouched)" if output.exists() else "")
    with lock, stopped_by_signals(f"building {output}", f"{kept} and the temporary files are removed"):
        files = validate(options)
        total_bytes = sum(f.size for f in files)
        num_out_files = options.num_out_files or default_num_out_files(total_bytes, options.num_processes)
        _remove_stale_builds(output)
        staging = output.parent / f".{output.name}.tmp-{os.getpid()}"
        jobs = [files[j::options.num_processes] for j in range(options.num_processes)]
        for j, job_files in enumerate(jobs):  # each job packs its files in shuffled order, as the original
            random.Random(f"{options.seed}:job{j}").shuffle(job_files)  # (seeded here; the original's is not)
        progress = Progress(total_bytes / 1e6, "building pretraining data", unit=" MB",
                            stream=io.StringIO() if options.quiet else None)
        start = time.monotonic()
        try:
            with disk_full.reported(lambda: f"{kept}: free space and run the same command again"):
                (staging / EVAL_SUBDIR if options.eval_fraction > 0 else staging).mkdir(parents=True)
                results = _run_jobs(jobs, options, str(staging), num_out_files, progress)
                stats = _stats(options, files, results, num_out_files, time.monotonic() - start)
                if stats["train"]["examples"] == 0:
                    raise InputError(f"--corpus-dir {options.corpus_dir}: no usable text (0 examples built)")
                (staging / STATS_FILE).write_text(json.dumps(stats, indent=2) + "\n")
                _replace_directory(staging, output)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    progress.finish()
    return stats


def _remove_stale_builds(output: Path) -> None:
    """Removes the temporary dirs (`.<name>.tmp-<pid>`, `.<name>.old-<pid>`) that builds of `output`
    killed before they could clean up left beside it; the caller holds the output's lock, so no
    build that is still running owns one."""
    for stale in output.parent.glob(f".{glob.escape(output.name)}.*-*"):
        if re.fullmatch(rf"\.{re.escape(output.name)}\.(tmp|old)-\d+", stale.name) and stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)


def _run_jobs(jobs, options: BuildOptions, staging: str, num_out_files: int,
              progress: Progress) -> List[JobResult]:
    """Runs the jobs (in worker processes when there are several); the first error, or a signal,
    stops every worker at once."""
    done = 0

    def advance(num_bytes: int) -> None:
        nonlocal done
        done += num_bytes
        progress.update(done / 1e6)

    if options.num_processes == 1:
        return [run_job(0, jobs[0], options, staging, num_out_files, report=advance)]
    context = multiprocessing.get_context("spawn")  # TensorFlow is not fork-safe
    reports = context.Queue()
    others = {child.pid for child in multiprocessing.active_children()}
    pool = context.Pool(len(jobs), initializer=_init_worker, initargs=(reports,))
    workers = {child.pid for child in multiprocessing.active_children()} - others  # they live until pool.close()
    try:
        pending = [pool.apply_async(run_job, (j, files, options, staging, num_out_files))
                   for j, files in enumerate(jobs)]
        while not all(job.ready() for job in pending):
            for job in pending:
                if job.ready() and not job.successful():
                    job.get()  # raises the job's error
            lost = workers - {child.pid for child in multiprocessing.active_children()}
            if lost:  # the pool would wait for its job forever
                raise WorkerLost(f"a build worker (pid {min(lost)}) ended before its job did (killed? out of "
                                 f"memory?); nothing was written: run the build again")
            try:
                advance(reports.get(timeout=0.5))
            except queue.Empty:
                pass
        results = [job.get() for job in pending]
    except BaseException:
        pool.terminate()  # a failed job, a full disk or a signal: no worker goes on writing
        pool.join()
        raise
    pool.close()
    pool.join()
    while not reports.empty():
        advance(reports.get())
    return results


def _replace_directory(staging: Path, output: Path) -> None:
    """Moves the finished build into place; an old output is removed only after the swap."""
    retired = output.parent / f".{output.name}.old-{os.getpid()}"
    if output.exists():
        output.rename(retired)
    staging.rename(output)
    shutil.rmtree(retired, ignore_errors=True)
