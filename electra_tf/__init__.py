"""electra_tf: ELECTRA for TensorFlow 2 / tf_keras.

The core library: configuration, tokenization, modeling, objectives, optimization,
training and checkpoints. It imports neither `pretrain_data` nor `finetune`.
"""

__version__ = "0.1.0"
