"""Fill-mask with a pretrained generator: a JSONL line per input text, in input order.

    python fill_mask.py --model DATA_DIR/models/NAME --input texts.txt --output fills.jsonl --top-k 5

A text a line (`-`: standard input); the literal [MASK] marks each token to fill. The model is a
pretraining model dir (its generator; the latest checkpoint, or a `ckpt-N` prefix), an original
TF1 checkpoint, or an HF generator dir (`ElectraForMaskedLM`, as `convert_checkpoint.py to-hf`
writes). Each line holds the `text` and its `masks`, in order: each mask's token `position` in
[CLS] tokens [SEP] and its `candidates` (`token_id`, `token`, `probability`), most probable first.
docs/pretraining.md.
"""

import argparse
import sys

from electra_tf.cli import exit_code, script_parser, start_tensorflow


def build_parser() -> argparse.ArgumentParser:
    parser = script_parser(__doc__, "python fill_mask.py --model models/my_model --input texts.txt --output fills.jsonl")
    parser.add_argument("--model", required=True, help="a model dir, ckpt-N prefix, original checkpoint or HF generator dir")
    parser.add_argument("--input", required=True, help="a text a line, each with [MASK]; - for standard input")
    parser.add_argument("--output", required=True, help="the JSONL file to write")
    parser.add_argument("--top-k", type=int, default=5, help="candidates per mask")
    parser.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    start_tensorflow(sigterm_unwinds=True)
    from electra_tf.fill_mask import fill_file
    return exit_code(lambda: print(f"{fill_file(args.model, args.input, args.output, args.top_k, args.overwrite)} "
                                   f"lines filled: {args.output}"))


if __name__ == "__main__":
    sys.exit(main())
