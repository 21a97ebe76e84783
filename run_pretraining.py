"""Pretrain ELECTRA: joint training of a small MLM generator and the replaced-token discriminator.

    python run_pretraining.py --data-dir DATA_DIR --model-name NAME [--hparams '{...}' | file.json]

DATA_DIR holds vocab.txt and pretrain_tfrecords/ (from build_pretraining_dataset.py); the model,
its checkpoints, TensorBoard logs and results go to DATA_DIR/models/NAME. Re-running the same
command resumes from the latest checkpoint.
"""

import argparse
import sys

from electra_tf.errors import InputError


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, help="holds vocab.txt, pretrain_tfrecords/ and models/")
    parser.add_argument("--model-name", required=True, help="the run's name: DATA_DIR/models/NAME")
    parser.add_argument("--hparams", default="{}", help="JSON object, or a path ending in .json")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from electra_tf.config import PretrainingConfig
    from electra_tf.training import pretraining_runner
    from pretrain_data.input_pipeline import check_pretraining_data, pretraining_dataset_fns
    try:
        config = PretrainingConfig.from_hparams(args.model_name, args.data_dir, args.hparams)
        check_pretraining_data(config)
        train_fn, eval_fn = pretraining_dataset_fns(config)
        results = pretraining_runner.run(config, train_fn, eval_fn, pretraining_runner.special_ids(config)).results
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except FloatingPointError as error:  # the loss diverged; the last good checkpoint is kept
        print(f"error: {error}", file=sys.stderr)
        return 1
    print("results: " + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                  for k, v in sorted(results.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
