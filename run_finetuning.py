"""Fine-tune a pretrained ELECTRA discriminator on GLUE, SQuAD or chunking, with trials and statistics.

    python run_finetuning.py --data-dir DATA_DIR --model-name NAME --hparams '{"task_names": ["mrpc"], ...}'

Task data: DATA_DIR/finetuning_data/<task>/{train,dev,test}.tsv (the original's task names or the
GLUE download's folder names), finetuning_data/{squad,squadv1}/{train,dev}.json (SQuAD 2.0 / 1.1) or
finetuning_data/chunk/{train,test}.txt (CoNLL-2000; dev.txt optional, else the last tenth of train.txt);
the pretrained model: DATA_DIR/models/NAME. Fine-tuned models go to DATA_DIR/models/NAME/finetuning_models/,
scores to DATA_DIR/models/NAME/results/<tasks>_results.{json,txt}, SQuAD answers and official scores to
results/<tasks>_qa/<task>_{preds,null_odds,eval}.json and, with "write_test_outputs": true, GLUE-server
files to DATA_DIR/models/NAME/results/glue_test/.
"""

import argparse
import sys

from electra_tf.errors import InputError


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, help="holds finetuning_data/ and models/")
    parser.add_argument("--model-name", required=True, help="the pretrained model: DATA_DIR/models/NAME")
    parser.add_argument("--hparams", default="{}", help="JSON object, or a path ending in .json")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from finetune.config import FinetuningConfig
    from finetune.runner import run
    try:
        run(FinetuningConfig.from_hparams(args.model_name, args.data_dir, args.hparams))
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except FloatingPointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
