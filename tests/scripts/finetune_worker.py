"""Runs one fine-tuning job (`finetune.runner.run`, as run_finetuning.py does) in this process with
the heads' dropout off, from given starting weights, and saves each trial's weights once it has
trained (for multi-process tests).

    python finetune_worker.py DATA_DIR HPARAMS_JSON START.npz OUT_PREFIX

START.npz: the model's weights after the pretrained encoder is loaded; the first run writes them,
later runs start from them (the heads are drawn per process). Trial n's trained weights go to
OUT_PREFIX<n>.npz. TF_CONFIG, if set, makes this process one worker of a MultiWorkerMirroredStrategy
cluster ("strategy": "multi_worker")."""

import json
import os
import sys

import numpy as np

from electra_tf.cli import exit_code, use_tf_keras_only

use_tf_keras_only()  # as run_finetuning.py, before TensorFlow's import below
import finetune.heads  # noqa: E402
from finetune import runner  # noqa: E402
from finetune.config import FinetuningConfig  # noqa: E402


def main(data_dir, hparams, start_path, out_prefix) -> int:
    finetune.heads.HEAD_DROPOUT = 0.0  # the [CLS] heads' dropout (the encoder's is off through the hparams)
    initialise, train = runner.Trial.initialise, runner.Trial.train

    def initialise_from_start(trial):
        initialise(trial)
        if not os.path.exists(start_path):  # written whole, then renamed: a waiting test reads it complete
            np.savez(f"{start_path}.tmp.npz", *[v.numpy() for v in trial.model.variables])
            os.replace(f"{start_path}.tmp.npz", start_path)
        start = np.load(start_path)
        for index, variable in enumerate(trial.model.variables):
            variable.assign(start[f"arr_{index}"])

    def train_and_save(trial, stops):
        scores = train(trial, stops)
        np.savez(f"{out_prefix}{trial.trial}.npz", *[v.numpy() for v in trial.model.variables])
        return scores

    runner.Trial.initialise, runner.Trial.train = initialise_from_start, train_and_save
    return exit_code(lambda: runner.run(FinetuningConfig.from_hparams("tiny", data_dir, json.loads(hparams))))


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
