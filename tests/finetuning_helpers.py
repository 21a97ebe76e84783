"""What the fine-tuning tests share: a DATA_DIR with real GLUE folders and a tiny pretrained model
(the `data_dir` fixture, imported by the test modules that use it), the tiny hparams, and a call of
run_finetuning.py's main that returns its exit code and output."""

import json
import shutil

import pytest
import tensorflow as tf
import tf_keras

import run_finetuning
from electra_tf.config import PretrainingConfig
from electra_tf.pretraining import PretrainingModel
from finetune.config import FinetuningConfig

TASK_FOLDERS = ("MRPC", "CoLA", "STS-B")
BASE = dict(model_size="tiny", max_seq_length=32, train_batch_size=16, eval_batch_size=64, max_examples=48,
            num_train_epochs=1.0, iterations_per_loop=2, learning_rate=1e-3)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, shared_data, vocab_file):
    """DATA_DIR with finetuning_data/{MRPC,CoLA,STS-B} (links to the real GLUE folders) and a tiny
    pretrained model dir models/tiny as run_pretraining.py writes it (config.json, vocab, ckpt)."""
    root = tmp_path_factory.mktemp("finetune_data")
    for folder in TASK_FOLDERS:
        (root / "finetuning_data").mkdir(exist_ok=True)
        (root / "finetuning_data" / folder).symlink_to(shared_data / "glue" / folder)
    model_dir = root / "models" / "tiny"
    config = PretrainingConfig.from_hparams("tiny", str(root), {"model_size": "tiny"})
    tf_keras.utils.set_random_seed(0)
    model = PretrainingModel(config, cls_id=101, sep_id=102, mask_id=103)
    config.save(model_dir / "config.json")
    shutil.copyfile(vocab_file, model_dir / "vocab.txt")
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(model_dir), 2).save(checkpoint_number=7)
    return root


def finetuning_config(data_dir, **values):
    return FinetuningConfig.from_hparams("tiny", str(data_dir), {**BASE, **values})


def run_cli(data_dir, capsys, **values):
    code = run_finetuning.main(["--data-dir", str(data_dir), "--model-name", "tiny",
                                "--hparams", json.dumps({**BASE, **values})])
    captured = capsys.readouterr()
    return code, captured.out, captured.err
