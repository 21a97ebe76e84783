"""A SavedModel of the discriminator that reads raw text: tokenization runs inside the graph.

Signature `serving_default(text: tf.string [B])` returns
    input_ids             int32 [B, L]   [CLS] tokens [SEP], zero-padded to the batch's longest
    input_mask            int32 [B, L]   1 on tokens, 0 on padding
    replaced_probability  float32 [B, L] sigmoid of the replaced-token logit; 0 on padding
and `embed(text)` the encoder's vectors with each token's characters in the text
(`embedding_outputs`; every fine-tuned model's SavedModel has it too), with L ≤ max_seq_length (longer texts are cut to max_seq_length - 2 tokens, as the original's
fine-tuning featurizer). A model with a trained generator adds `fill_mask(text, top_k)`: the
generator's top_k tokens at each literal [MASK] of a text (`electra_tf.fill_mask.FillMaskGraph`,
the graph `fill_mask.py` runs), sharing the stored embedding tables with the discriminator.
Loading it needs `import tensorflow_text` first (its WordPiece op).

`precision` "mixed_bfloat16" builds the served layers under tf_keras's mixed_bfloat16 policy: the
graph's matmuls run in bfloat16 on float32 variables, its outputs stay float32. The loaded object's
`precision` variable (tf.string) says which one a SavedModel was exported with.
"""

from pathlib import Path
from typing import Optional

import tensorflow as tf

from electra_tf.config import UNSCALED_PRECISIONS, has_rtd_loss
from electra_tf.errors import InputError
from electra_tf.fill_mask import SIGNATURE as FILL_MASK, FillMaskGraph, untrained_generator
from electra_tf.framing import framed_ids, framed_pair, mask_and_segments, single_layout
from electra_tf.modeling import unpadded_rows
from electra_tf.pretraining import build_network
from electra_tf.token_offsets import tokenize_with_offsets
from electra_tf.tokenization import Tokenizer
from electra_tf.training.distribution import precision_scope
from electra_tf.checkpoints.model_dir import (VOCAB_FILE, check_output, checkpoint_at, initialised_variables,
                                             read_model_dir, staged_output)
from electra_tf.checkpoints.report import LoadReport, assign_weights

SIGNATURE = "serving_default"
EMBED = "embed"  # the encoder's vectors, in every SavedModel


def check_precision(precision: str) -> None:
    """InputError unless `precision` is one an export offers (the policies needing no loss scaling)."""
    if precision not in UNSCALED_PRECISIONS:
        raise InputError(f"precision {precision!r} is not one of: {', '.join(UNSCALED_PRECISIONS)}")


def precision_record(precision: str) -> tf.Variable:
    """The export's precision as a variable of the server, saved with it (`loaded.precision`)."""
    return tf.Variable(precision, trainable=False, name="precision")


def encode(tokenizer: Tokenizer, text: tf.Tensor, max_seq_length: int):
    """text tf.string [B] → (input_ids, input_mask) int32 [B, L]: [CLS] t1 .. tn [SEP], padded."""
    return framed_ids(tokenizer, tokenizer.tokenize(text), max_seq_length)  # tokens [B, (T)]


def encode_with_offsets(tokenizer: Tokenizer, text: tf.Tensor, max_seq_length: int):
    """`encode`'s (input_ids, input_mask) and each token's [start, end) characters in its text
    (token_start, token_end int32 [B, L]; -1 on [CLS], [SEP] and padding)."""
    ids, start, end = tokenize_with_offsets(tokenizer, text)  # [B, (T)]: tokenize's ids
    layout = single_layout(ids.row_lengths(), max_seq_length)  # once for the ids and both offsets
    input_ids = framed_pair(ids, None, layout, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)  # [B, L]
    start, end = (framed_pair(offsets, None, layout, -1, -1, -1) for offsets in (start, end))
    return input_ids, mask_and_segments(layout)[0], start, end


def pooled(sequence, input_mask) -> dict:
    """sequence [B, L, H], input_mask [B, L] -> the `[CLS]` vector and the mean over real tokens, [B, H]."""
    mask = tf.cast(input_mask, sequence.dtype)[:, :, tf.newaxis]  # [B, L, 1]
    return {"cls": sequence[:, 0], "mean": tf.reduce_sum(sequence * mask, 1) / tf.reduce_sum(mask, 1)}


def embedding_outputs(encoder, input_ids, input_mask, segment_ids, token_start, token_end) -> dict:
    """The `embed` signature's outputs: `cls` and `mean` float32 [B, H], `tokens` float32 [B, L, H]
    (each token's vector, 0 on padding), with the `input_ids`, `input_mask` and `segment_ids` they
    belong to and each token's [start, end) characters in its text, `token_start` and `token_end`
    int32 [B, L] (-1 on [CLS], [SEP] and padding; a pair's segment 1 indexes its second text)."""
    sequence = tf.cast(encoder.infer(input_ids, input_mask, segment_ids), tf.float32)  # [B, L, H], 0 on padding
    return {**pooled(sequence, input_mask), "tokens": sequence, "input_ids": input_ids, "input_mask": input_mask,
            "segment_ids": segment_ids, "token_start": token_start, "token_end": token_end}


class DiscriminatorServer(tf.Module):
    """Tokenizer + discriminator encoder + replaced-token head, served on raw strings."""

    def __init__(self, tokenizer: Tokenizer, encoder, head, max_seq_length: int, precision: str = "float32",
                 fill_mask: Optional[FillMaskGraph] = None):
        super().__init__(name="electra_discriminator")
        self.tokenizer, self.encoder, self.head = tokenizer, encoder, head
        self.max_seq_length = max_seq_length
        self.precision = precision_record(precision)
        self.fill_mask = fill_mask  # the generator's graph, when the model has a trained one

    def signatures(self) -> dict:
        """The SavedModel's signatures by name."""
        served = {SIGNATURE: self.serve, EMBED: self.embed}
        return served if self.fill_mask is None else {**served, FILL_MASK: self.fill_mask.fill}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")], autograph=False)
    def serve(self, text):
        input_ids, input_mask = encode(self.tokenizer, text, self.max_seq_length)  # [B, L]
        tokens = self.encoder.call_unpadded(input_ids, input_mask, tf.zeros_like(input_ids))  # [N, H]
        rows = unpadded_rows(input_mask)[:, tf.newaxis]  # [N, 1]: each token's place in [B*L]
        probability = tf.scatter_nd(rows, tf.sigmoid(self.head(tokens)), [tf.size(input_ids)])  # [B*L], 0 on padding
        probability = tf.reshape(probability, tf.shape(input_ids))  # [B, L]
        return {"input_ids": input_ids, "input_mask": input_mask, "replaced_probability": probability}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")], autograph=False)
    def embed(self, text):
        input_ids, input_mask, start, end = encode_with_offsets(self.tokenizer, text, self.max_seq_length)  # [B, L]
        return embedding_outputs(self.encoder, input_ids, input_mask, tf.zeros_like(input_ids), start, end)


def build_server(config, values, vocab_file, precision: str = "float32", initialised=frozenset()) -> tuple:
    """(DiscriminatorServer, LoadReport) with the discriminator's weights assigned, computing in
    `precision`; with the generator too (its `fill_mask`) when `values` hold a trained one
    (`initialised`: the names in `values` holding initial values)."""
    check_precision(precision)
    if not has_rtd_loss(config.objective):  # replace_mlm's head is untrained, all_tokens_mlm's a copy gate
        raise InputError(f"objective {config.objective!r} trains no replaced-token head to serve; export it "
                         "with to-hf (the MLM model), or fine-tune it and export that")
    with precision_scope(precision):  # the layers keep it; their variables are float32 either way
        network = build_network(config)  # [generator +] discriminator, the generator on the shared tables
    served = untrained_generator(config, values, initialised) is None
    variables = network.variables if served else network.discriminator.variables + network.discriminator_head.variables
    report = assign_weights(variables, values, required_prefix="")
    for encoder in (network.discriminator, network.generator):  # one object when the generator is untied=False
        encoder.freeze_qkv()
    tokenizer = Tokenizer.of_config(vocab_file, config)
    fill_mask = FillMaskGraph(tokenizer, network, config.max_seq_length) if served else None
    return DiscriminatorServer(tokenizer, network.discriminator, network.discriminator_head, config.max_seq_length,
                               precision, fill_mask), report


def export_saved_model(model_dir, output_dir, overwrite: bool = False, precision: str = "float32",
                       step: Optional[int] = None) -> LoadReport:
    """Writes the discriminator of a model dir's latest checkpoint (or `ckpt-<step>`) as a
    SavedModel computing in `precision` (float32 or mixed_bfloat16)."""
    check_precision(precision)  # before reading the checkpoint
    check_output(output_dir, overwrite)
    prefix = checkpoint_at(model_dir, step)
    config, values = read_model_dir(model_dir, prefix)
    server, report = build_server(config, values, Path(model_dir) / VOCAB_FILE, precision,
                                  initialised_variables(model_dir, prefix))
    with staged_output(output_dir, overwrite, source=model_dir) as staging:
        tf.saved_model.save(server, str(staging), signatures=server.signatures())
    return report
