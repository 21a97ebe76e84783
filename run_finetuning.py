"""Fine-tune a pretrained ELECTRA discriminator on GLUE, SQuAD or chunking, with trials and statistics.

    python run_finetuning.py --data-dir DATA_DIR --model-name NAME --hparams '{"task_names": ["mrpc"], ...}'

Task data: DATA_DIR/finetuning_data/<task>/{train,dev,test}.tsv (the original's task names or the
GLUE download's folder names), finetuning_data/{squad,squadv1}/{train,dev}.json (SQuAD 2.0 / 1.1) or
finetuning_data/chunk/train.txt (CoNLL-2000; test.txt optional; dev.txt optional, else the last tenth of train.txt);
the pretrained model: DATA_DIR/models/NAME. Fine-tuned models go to DATA_DIR/models/NAME/finetuning_models/,
scores to DATA_DIR/models/NAME/results/<tasks>_results.{json,txt}, SQuAD answers and official scores to
results/<tasks>_qa/<task>_{preds,null_odds,eval}.json and, with "write_test_outputs": true, GLUE-server
files to DATA_DIR/models/NAME/results/glue_test/. Every hparam: docs/finetuning.md.
"""

import argparse
import sys

from electra_tf.cli import exit_code, run_parser, start_tensorflow

EXAMPLE = ("python run_finetuning.py --data-dir data --model-name my_small "
           """--hparams '{"task_names": ["mrpc"], "num_trials": 3}'""")


def build_parser() -> argparse.ArgumentParser:
    return run_parser(__doc__, "holds finetuning_data/ and models/",
                      "the pretrained model: DATA_DIR/models/NAME", EXAMPLE)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    start_tensorflow(pooled_allocator=True)
    from finetune.config import FinetuningConfig
    from finetune.runner import run
    return exit_code(lambda: run(FinetuningConfig.from_hparams(args.model_name, args.data_dir, args.hparams)))


if __name__ == "__main__":
    sys.exit(main())
