"""Predict with a fine-tuned model on new text: a JSONL line per input row, in input order.

    python predict.py --model-dir DATA_DIR/models/NAME/finetuning_models/reviews_model_1 \
        --input new_reviews.csv --output predictions.jsonl

The model dir is a trial's (`keep_all_models` keeps them), or a SavedModel exported from one
(`convert_checkpoint.py saved-model`: the same predictions); the task's columns travel with it, so a
file in the task's own format needs no other flag: one named as the task's files are (a CoNLL
`.txt`), else by its extension (.csv, .tsv, .jsonl, .conll). Any other file, or `-` (standard
input), is plain text: a text a line (a pair task: the two texts
separated by a tab; a tagging task: a sentence, words split on whitespace). Each output object
holds the row's `id` (when the input has the task's id column) and the prediction:
classification `label` and `probabilities`; multi-label `labels` and `probabilities`;
regression `score`; tagging `words`, `tags` and `entities` (type, character start and end in the
line, text); SQuAD (JSONL with question and context) `answer`, its `start` and `end` in the
context and, for SQuAD 2.0, `null_odds` and `abstains`. `--embeddings` adds the `[CLS]` and
mean-pooled encoder vectors. docs/finetuning.md.
"""

import argparse
import sys

from electra_tf.cli import exit_code, script_parser, start_tensorflow
from finetune.predict_inputs import FORMATS


def build_parser() -> argparse.ArgumentParser:
    parser = script_parser(__doc__, "python predict.py --model-dir finetuning_models/reviews_model_1 "
                                    "--input new.csv --output predictions.jsonl")
    parser.add_argument("--model-dir", required=True, help="a fine-tuning trial's model dir, or a SavedModel exported from one")
    parser.add_argument("--input", required=True, help="the rows to predict: a file, or - for standard input")
    parser.add_argument("--output", required=True, help="the JSONL file to write")
    parser.add_argument("--task", default=None, help="the task to predict, for a multi-task model")
    parser.add_argument("--input-format", choices=FORMATS, default=None,
                        help="how the input is written (default: the task's own for a file named as its files "
                             "are, else by its extension; plain text otherwise)")
    parser.add_argument("--embeddings", action="store_true", help="also write the [CLS] and mean-pooled vectors")
    parser.add_argument("--int8", action="store_true",
                        help="run the model through LiteRT with int8 weights (converted at start; tasks reading "
                             "[CLS] alone): faster on small batches, a little accuracy lost (docs/finetuning.md)")
    parser.add_argument("--skip-empty", action="store_true",
                        help="leave empty lines or texts out (counted) instead of stopping at the first")
    parser.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    start_tensorflow(sigterm_unwinds=True)
    from finetune.predicting import predict
    return exit_code(lambda: predict(args.model_dir, args.input, args.output, args.task, args.input_format,
                                     args.skip_empty, args.overwrite, args.embeddings, int8=args.int8))


if __name__ == "__main__":
    sys.exit(main())
