"""ELECTRA networks in tf_keras: shared embeddings, post-LN transformer encoders, pre-training heads.

Variable names follow the original TF1 checkpoints (`electra/encoder/layer_0/attention/self/query/kernel`,
`generator_predictions/output_bias`, ...; docs/fidelity.md#checkpoint-names) so checkpoints map by a simple rule.
"""

from electra_tf.modeling.bert_config import BertConfig, generator_config, sized_encoder
from electra_tf.modeling.electra import NETWORK_LAYOUTS, ElectraModel
from electra_tf.modeling.embeddings import Embeddings
from electra_tf.modeling.heads import DiscriminatorHead, MaskedLMHead
from electra_tf.modeling.layer_utils import gelu, get_activation
from electra_tf.modeling.transformer import (Encoder, SelfAttention, TransformerBlock, attention_bias, build_encoder,
                                             unpadded_rows)

__all__ = [
    "BertConfig", "generator_config", "sized_encoder",
    "ElectraModel", "NETWORK_LAYOUTS",
    "Embeddings", "Encoder", "SelfAttention", "TransformerBlock", "attention_bias", "build_encoder",
    "unpadded_rows",
    "MaskedLMHead", "DiscriminatorHead",
    "gelu", "get_activation",
]
