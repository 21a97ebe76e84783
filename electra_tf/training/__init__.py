"""Training: the one training step shared by pretraining and fine-tuning."""

from electra_tf.training.train_step import make_train_step

__all__ = ["make_train_step"]
