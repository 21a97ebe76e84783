"""Learn a BERT-format WordPiece vocab.txt from raw text, split into words exactly as ELECTRA's tokenizer does.

Output: [PAD] (id 0), [UNK] [CLS] [SEP] [MASK], optional [unused0].., then every character of the
corpus as `x`, then the learned subwords by decreasing count (`##x` for every character among them).
See pretrain_data/vocab_learning.py and docs/data.md.
"""

import argparse
import sys

from electra_tf.cli import add_casing_flags, exit_code, script_parser, start_tensorflow

EXAMPLE = "python build_vocab.py --corpus-dir corpus/ --output data/vocab.txt --vocab-size 30522"


def build_parser() -> argparse.ArgumentParser:
    parser = script_parser(__doc__, EXAMPLE)
    corpus = parser.add_mutually_exclusive_group(required=True)
    corpus.add_argument("--corpus-dir",
                        help="directory of raw text files, searched recursively (required unless --corpus)")
    corpus.add_argument("--corpus", nargs="+",
                        help="raw text files and/or directories (required unless --corpus-dir)")
    parser.add_argument("--output", required=True, help="vocab file to write, one token per line")
    parser.add_argument("--vocab-size", type=int, default=30522,
                        help="maximum number of tokens, reserved ones included (usually within 5%% below; "
                             "fewer on a small corpus)")
    parser.add_argument("--input-format", choices=("lines", "wikiextractor"), default="lines",
                        help="lines: plain text; wikiextractor: <doc> ... </doc> articles")
    add_casing_flags(parser)  # as the tokenizer that will use the vocab
    parser.add_argument("--num-unused", type=int, default=0, help="[unused0].. tokens reserved after [MASK]")
    parser.add_argument("--max-unique-chars", type=int, default=1000,
                        help="alphabet cap: rarer characters are left out and words holding them become [UNK]")
    parser.add_argument("--max-lines", type=int, default=None,
                        help="learn from the first N lines only (default: all)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    start_tensorflow()
    from pretrain_data.vocab_learning import VocabOptions, build_vocab
    options = vars(args)
    corpus_dir = options.pop("corpus_dir")
    options["corpus"] = [corpus_dir] if corpus_dir is not None else options["corpus"]

    def job():
        summary = build_vocab(VocabOptions(**options))
        print(f"wrote {summary['vocab_size']:,} tokens to {args.output} ({summary['alphabet_size']} of "
              f"{summary['characters_seen']} characters, subword count threshold {summary['threshold']:,}) from "
              f"{summary['words']:,} words ({summary['distinct_words']:,} distinct); [UNK] share of the corpus "
              f"words: {100 * summary['unk_rate']:.3f}%; {summary['seconds']:.1f}s")

    return exit_code(job)


if __name__ == "__main__":
    sys.exit(main())
