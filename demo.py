"""`make demo`: from nothing downloaded to ELECTRA pretraining data, on any machine.

Writes an English corpus from Python's own documentation, learns a WordPiece vocab from it,
builds pretraining TFRecords with a held-out evaluation set, and prints the statistics and one
packed example. The output directory is laid out as a `--data-dir` (vocab.txt,
pretrain_tfrecords/), ready for pretraining.
"""

import argparse
import sys
from pathlib import Path

from electra_tf.errors import InputError


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output-dir", default="demo_output", help="the demo's data directory")
    parser.add_argument("--vocab-size", type=int, default=4000, help="size of the learned vocab")
    parser.add_argument("--max-seq-length", type=int, default=128)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from pretrain_data import demo_report
    from pretrain_data.build import BuildOptions, build_pretraining_dataset
    from pretrain_data.default_corpus import write_default_corpus
    from pretrain_data.vocab_learning import VocabOptions, build_vocab

    data_dir = Path(args.output_dir)
    try:
        corpus = write_default_corpus(data_dir / "corpus")
        print(f"[1/3] corpus: {corpus} ({corpus.stat().st_size / 1e6:.2f} MB of Python documentation)")
        vocab = build_vocab(VocabOptions(corpus=[str(corpus.parent)], output=str(data_dir / "vocab.txt"),
                                         vocab_size=args.vocab_size, overwrite=True, quiet=True))
        print(f"[2/3] vocab: {data_dir / 'vocab.txt'} ({vocab['vocab_size']:,} WordPiece tokens, learned in {vocab['seconds']:.0f} s)")
        stats = build_pretraining_dataset(BuildOptions(
            corpus_dir=str(corpus.parent), vocab_file=str(data_dir / "vocab.txt"),
            output_dir=str(data_dir / "pretrain_tfrecords"), max_seq_length=args.max_seq_length,
            eval_fraction=0.05, overwrite=True, quiet=True))
        print(f"[3/3] pretraining data: {data_dir / 'pretrain_tfrecords'}")
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(demo_report.data_report(stats, data_dir / "pretrain_tfrecords", data_dir / "vocab.txt"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
