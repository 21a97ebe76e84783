"""Raw text -> sharded ELECTRA pretraining TFRecords (input_ids, input_mask, segment_ids).

Flags follow the original release's script; docs/data.md describes the record format and packing.
"""

import argparse
import sys

from electra_tf.cli import add_casing_flags, exit_code, script_parser, start_tensorflow
from pretrain_data.sentences import SENTENCE_RULES

EXAMPLE = ("python build_pretraining_dataset.py --corpus-dir corpus/ --vocab-file data/vocab.txt "
           "--output-dir data/pretrain_tfrecords --eval-fraction 0.01")


def build_parser() -> argparse.ArgumentParser:
    parser = script_parser(__doc__, EXAMPLE)
    parser.add_argument("--corpus-dir", required=True, help="directory of raw text files (searched recursively)")
    parser.add_argument("--vocab-file", required=True, help="WordPiece vocab, one token per line")
    parser.add_argument("--output-dir", required=True, help="where the TFRecords and stats.json go")
    parser.add_argument("--max-seq-length", type=int, default=128, help="tokens per example (8..512)")
    parser.add_argument("--num-processes", type=int, default=1, help="parallel jobs, one core each")
    parser.add_argument("--blanks-separate-docs", action=argparse.BooleanOptionalAction, default=True,
                        help="blank lines end a document (lines format)")
    add_casing_flags(parser)
    parser.add_argument("--input-format", choices=("lines", "wikiextractor"), default="lines",
                        help="lines: one sentence per line; wikiextractor: <doc> ... </doc> articles")
    parser.add_argument("--split-sentences", action=argparse.BooleanOptionalAction, default=None,
                        help="split lines into sentences (default: on for wikiextractor, off for lines)")
    parser.add_argument("--sentence-rules", choices=SENTENCE_RULES, default="all",
                        help="all: English, CJK, danda and caseless-script breaks; english: the English rule "
                             "alone, as builds before 2026-12-03 split (to rebuild such a dataset exactly)")
    parser.add_argument("--num-out-files", type=int, default=None,
                        help="training shards (default: one per ~4 MiB of text, at least --num-processes)")
    parser.add_argument("--eval-fraction", type=float, default=0.0,
                        help="share of documents held out into <output-dir>/eval/ for pretraining evaluation")
    parser.add_argument("--seed", type=int, default=12345, help="seed of the packing randomness")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty --output-dir")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--strict-utf8", action="store_true",
                        help="fail on invalid UTF-8, naming file and line (default: drop the bad bytes, as the "
                             "original did, and count them per file in the summary and stats.json)")
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    start_tensorflow()
    from pretrain_data.build import BuildOptions, build_pretraining_dataset, invalid_utf8_summary

    def job():
        stats = build_pretraining_dataset(BuildOptions(**vars(args)))
        train = stats["train"]
        print(f"wrote {train['examples']:,} examples ({train['tokens']:,} tokens) in {stats['num_out_files']} "
              f"shards to {args.output_dir}; eval examples: {stats['eval']['examples']:,}; "
              f"{stats['megabytes_per_second']:.2f} MB/s; statistics in stats.json")
        utf8 = invalid_utf8_summary(stats)
        if utf8:
            print(utf8)

    return exit_code(job)


if __name__ == "__main__":
    sys.exit(main())
