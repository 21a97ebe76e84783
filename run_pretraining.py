"""Pretrain ELECTRA: joint training of a small MLM generator and the replaced-token discriminator.

    python run_pretraining.py --data-dir DATA_DIR --model-name NAME [--hparams '{...}' | file.json]

DATA_DIR holds vocab.txt and pretrain_tfrecords/ (from build_pretraining_dataset.py); the model,
its checkpoints, TensorBoard logs and results go to DATA_DIR/models/NAME. Re-running the same
command resumes from the latest checkpoint. Every hparam: docs/pretraining.md.
"""

import argparse
import sys

from electra_tf.cli import exit_code, run_parser, start_tensorflow

EXAMPLE = """python run_pretraining.py --data-dir data --model-name my_small --hparams '{"model_size": "small"}'"""


def build_parser() -> argparse.ArgumentParser:
    return run_parser(__doc__, "holds vocab.txt, pretrain_tfrecords/ and models/",
                      "the run's name: DATA_DIR/models/NAME", EXAMPLE)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    start_tensorflow(pooled_allocator=True)
    from electra_tf.config import PretrainingConfig
    from electra_tf.training import pretraining_runner
    from pretrain_data.input_pipeline import (check_pretraining_data, locate_damaged_training_data,
                                              pretraining_dataset_fns)

    def job():
        config = PretrainingConfig.from_hparams(args.model_name, args.data_dir, args.hparams)
        train_fn, eval_fn = pretraining_dataset_fns(config)
        results = pretraining_runner.run(config, train_fn, eval_fn, pretraining_runner.special_ids(config),
                                         check_data=lambda: check_pretraining_data(config),
                                         locate_damage=lambda: locate_damaged_training_data(config)).results
        print("results: " + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                      for k, v in sorted(results.items())))

    return exit_code(job)


if __name__ == "__main__":
    sys.exit(main())
