"""Runs one pretraining job in this process and saves the final weights (for multi-process tests).

    python pretrain_worker.py DATA_DIR MODEL_NAME HPARAMS_JSON OUT.npz
TF_CONFIG, if set, makes this process one worker of a MultiWorkerMirroredStrategy cluster.
"""

import sys

import numpy as np

from electra_tf.cli import use_tf_keras_only

use_tf_keras_only()  # as run_pretraining.py, before TensorFlow's import below
from electra_tf.config import PretrainingConfig  # noqa: E402
from electra_tf.training import pretraining_runner  # noqa: E402
from pretrain_data.input_pipeline import pretraining_dataset_fns  # noqa: E402


def main(data_dir, model_name, hparams, out_path):
    config = PretrainingConfig.from_hparams(model_name, data_dir, hparams)
    train_fn, eval_fn = pretraining_dataset_fns(config)
    output = pretraining_runner.run(config, train_fn, eval_fn, pretraining_runner.special_ids(config))
    np.savez(out_path, *[v.numpy() for v in output.model.variables])


if __name__ == "__main__":
    main(*sys.argv[1:5])
