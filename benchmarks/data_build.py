"""Data-build throughput: this project vs. the original algorithm driven by FullTokenizer.

Both sides read the same corpus slice, pack with the original's ExampleBuilder rules and write
the same TFRecord schema; the baseline tokenizes each line with the original's pure-Python
FullTokenizer (Model Garden's copy) and serializes one `tf.train.Example` per record, as the
original does, where this project tokenizes in batches in-graph and assembles records vectorized. Each is run
with 1 and 2 processes, one TensorFlow thread per process, in the same run on the same machine;
the script prints MB of raw text per second and the ratios.

    .venv/bin/python benchmarks/data_build.py [--files 16] [--corpus-dir DIR] [--vocab-file FILE]
"""

import argparse
import concurrent.futures
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SHARED = REPO.parent / "shared" / "data"

from electra_tf.cli import script_parser  # noqa: E402


def _one_thread():
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def _baseline_job(job, files, options, out_dir):
    """The original's per-job loop: FullTokenizer on each line, ExampleBuilder packing, round-robin write."""
    import tensorflow as tf
    from official.nlp.tools.tokenization import FullTokenizer
    from pretrain_data.build import JobResult, pack_file
    from pretrain_data.packing import assemble
    from pretrain_data.records import shard_name

    tokenizer = FullTokenizer(options.vocab_file, do_lower_case=True)

    def tokenize_lines(lines):
        flat, splits = [], [0]
        for line in lines:
            flat.extend(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)))
            splits.append(len(flat))
        return flat, splits

    vocab = tokenizer.vocab
    writer = tf.io.TFRecordWriter(str(Path(out_dir) / shard_name(job, options.num_processes)))
    result = JobResult()
    start = time.monotonic()
    for corpus_file in files:
        tokens, examples = pack_file(corpus_file, options, tokenize_lines, result)
        ids, segments, lengths = assemble(examples["train"], tokens, options.max_seq_length, vocab["[CLS]"],
                                          vocab["[SEP]"])
        for row, length in enumerate(lengths):  # one tf.train.Example per record, as the original
            features = {"input_ids": ids[row].tolist(), "input_mask": [1] * length + [0] * (len(ids[row]) - length),
                        "segment_ids": segments[row].tolist()}
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                name: tf.train.Feature(int64_list=tf.train.Int64List(value=values))
                for name, values in features.items()})).SerializeToString())
    writer.close()
    return result.train.examples, time.monotonic() - start


def run_baseline(options, files, out_dir):
    """Returns (examples, slowest job's building seconds without start-up)."""
    jobs = [files[j::options.num_processes] for j in range(options.num_processes)]
    if options.num_processes == 1:
        return _baseline_job(0, jobs[0], options, out_dir)
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(len(jobs), mp_context=context, initializer=_one_thread) as pool:
        results = list(pool.map(_baseline_job, range(len(jobs)), jobs, [options] * len(jobs),
                                [out_dir] * len(jobs)))
    return sum(r[0] for r in results), max(r[1] for r in results)


def build_parser() -> argparse.ArgumentParser:
    parser = script_parser(__doc__, ".venv/bin/python benchmarks/data_build.py --files 16")
    parser.add_argument("--corpus-dir", default=str(SHARED / "corpus" / "enwiki_2015_wikiextractor" / "AA"),
                        help="WikiExtractor files to take the slice from")
    parser.add_argument("--vocab-file", default=str(SHARED / "vocab" / "vocab.txt"), help="WordPiece vocab")
    parser.add_argument("--files", type=int, default=16, help="corpus files in the slice (about 1 MB each)")
    return parser


def main():
    args = build_parser().parse_args()
    _one_thread()
    from pretrain_data.build import BuildOptions, build_pretraining_dataset
    from pretrain_data.corpus import list_corpus_files

    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        corpus.mkdir()
        for path in sorted(Path(args.corpus_dir).iterdir())[:args.files]:
            (corpus / path.name).symlink_to(path)
        files = list_corpus_files(corpus)
        megabytes = sum(f.size for f in files) / 1e6
        print(f"corpus slice: {len(files)} files, {megabytes:.2f} MB (WikiExtractor format)")
        wall, steady = {}, {}
        for processes in (1, 2):
            options = BuildOptions(corpus_dir=str(corpus), vocab_file=args.vocab_file,
                                   output_dir=str(Path(tmp) / f"ours{processes}"), num_processes=processes,
                                   input_format="wikiextractor", quiet=True)
            start = time.perf_counter()
            stats = build_pretraining_dataset(options)
            wall["ours", processes] = megabytes / (time.perf_counter() - start)
            steady["ours", processes] = megabytes / stats["job_seconds"]
            baseline_dir = Path(tmp) / f"baseline{processes}"
            baseline_dir.mkdir()
            start = time.perf_counter()
            examples, job_seconds = run_baseline(options, files, baseline_dir)
            wall["baseline", processes] = megabytes / (time.perf_counter() - start)
            steady["baseline", processes] = megabytes / job_seconds
            print(f"{processes} process(es), MB/s [wall clock incl. start-up | building only]: "
                  f"this project {wall['ours', processes]:.2f} | {steady['ours', processes]:.2f}; "
                  f"original algorithm + FullTokenizer {wall['baseline', processes]:.2f} | "
                  f"{steady['baseline', processes]:.2f}; ratio {wall['ours', processes] / wall['baseline', processes]:.1f}x | "
                  f"{steady['ours', processes] / steady['baseline', processes]:.1f}x "
                  f"({stats['train']['examples']} vs {examples} examples)")
        for side in ("ours", "baseline"):
            print(f"scaling 1 -> 2 processes, {side}: wall {wall[side, 2] / wall[side, 1]:.2f}x, "
                  f"building only {steady[side, 2] / steady[side, 1]:.2f}x")


if __name__ == "__main__":
    main()
