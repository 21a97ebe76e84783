"""What a fine-tuned model's SavedModel serves: tokenizer + encoder + one task's head on raw strings.

The sentence-level servers take `text_a` (tf.string [B]) and, for a pair task, `text_b`; the
examples are featurized as `finetune.inputs.featurize` does ([CLS] a [SEP] b [SEP], segment 0 up
to the first [SEP], BERT's longest-first truncation to max_seq_length) and they return
    classification: probabilities float32 [B, num_labels] (softmax, in the task's label order)
                    label         tf.string [B]  the most probable label's name
    multi-label:    probabilities float32 [B, K] (sigmoid), labels tf.string [B, K] (the name
                                                 where the probability reaches the threshold, else "")
    regression:     score         float32 [B]    the output times the task's scale (STS-B: 0-5),
                                                 not clipped as the GLUE server file is
and `embed` (the same inputs) the encoder's vectors with each token's characters in its text
(`electra_tf.checkpoints.saved_model`).
A task's `server` (finetune.task) picks its server.
"""

import tensorflow as tf

from electra_tf.checkpoints.saved_model import embedding_outputs, encode, encode_with_offsets, precision_record
from electra_tf.framing import framed_pair, mask_and_segments, pair_layout
from electra_tf.token_offsets import tokenize_with_offsets
from electra_tf.tokenization import Tokenizer


def encode_pair(tokenizer: Tokenizer, text_a: tf.Tensor, text_b: tf.Tensor, max_seq_length: int):
    """text_a, text_b tf.string [B] -> (input_ids, input_mask, segment_ids) int32 [B, L], padded, cut by
    `pair_layout`. A row whose text_b has no tokens is `[CLS] a [SEP]` alone, as `featurize`'s."""
    tokens_a, tokens_b = tokenizer.tokenize(text_a), tokenizer.tokenize(text_b)  # [B, (Ta)], [B, (Tb)]
    layout = pair_layout(tokens_a.row_lengths(), tokens_b.row_lengths(), max_seq_length)
    ids = framed_pair(tokens_a, tokens_b, layout, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
    return (tf.cast(ids, tf.int32), *mask_and_segments(layout))


def pair_with_offsets(tokenizer: Tokenizer, text_a, text_b, max_seq_length: int):
    """`encode_pair`'s inputs and each token's [start, end) characters in its text, int32 [B, L]
    (-1 on [CLS], [SEP] and padding)."""
    (ids_a, *offsets_a), (ids_b, *offsets_b) = tokenize_with_offsets(tokenizer, text_a), \
        tokenize_with_offsets(tokenizer, text_b)
    layout = pair_layout(ids_a.row_lengths(), ids_b.row_lengths(), max_seq_length)
    ids = framed_pair(ids_a, ids_b, layout, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
    start, end = (framed_pair(a, b, layout, -1, -1, -1) for a, b in zip(offsets_a, offsets_b))
    return (tf.cast(ids, tf.int32), *mask_and_segments(layout), start, end)


class SentenceServer(tf.Module):
    """Tokenizer + fine-tuned encoder + one sentence-level task's head, served on raw strings."""

    def __init__(self, tokenizer: Tokenizer, model, task, max_seq_length: int, precision: str = "float32"):
        super().__init__(name=f"electra_{task.name}")
        self.tokenizer, self.encoder = tokenizer, model.encoder
        self.head = model.head_of(task.name)
        self.task, self.max_seq_length = task, max_seq_length
        self.precision = precision_record(precision)
        texts = [tf.TensorSpec([None], tf.string, name="text_a")]
        if task.has_pair:
            texts.append(tf.TensorSpec([None], tf.string, name="text_b"))
        self.serve = tf.function(lambda *text: self._outputs(*self._inputs(*text)), input_signature=texts,
                                 autograph=False)
        self.embed = tf.function(lambda *text: embedding_outputs(self.encoder, *self._embed_inputs(*text)),
                                 input_signature=texts, autograph=False)

    def _inputs(self, text_a, text_b=None):
        """(input_ids, input_mask, segment_ids) int32 [B, L] of the raw texts, as training featurized them."""
        if text_b is not None:
            return encode_pair(self.tokenizer, text_a, text_b, self.max_seq_length)
        input_ids, input_mask = encode(self.tokenizer, text_a, self.max_seq_length)  # [B, L]
        return input_ids, input_mask, tf.zeros_like(input_ids)

    def _embed_inputs(self, text_a, text_b=None):
        """`_inputs` and each token's [start, end) characters in its text, int32 [B, L]."""
        if text_b is not None:
            return pair_with_offsets(self.tokenizer, text_a, text_b, self.max_seq_length)
        input_ids, input_mask, start, end = encode_with_offsets(self.tokenizer, text_a, self.max_seq_length)
        return input_ids, input_mask, tf.zeros_like(input_ids), start, end

    def _outputs(self, input_ids, input_mask, segment_ids):
        cls = self.encoder.call_unpadded(input_ids, input_mask, segment_ids, cls_only=True)  # [B, H]
        return self.head_outputs(self.head(cls[:, tf.newaxis], training=False))

    def head_outputs(self, output) -> dict:
        """The served outputs of the head's output."""
        raise NotImplementedError


class ClassifierServer(SentenceServer):
    def head_outputs(self, logits) -> dict:
        """logits [B, C] -> probabilities [B, C] and the label name [B]."""
        labels = tf.constant(list(self.task.labels))
        return {"probabilities": tf.nn.softmax(logits, axis=-1),
                "label": tf.gather(labels, tf.argmax(logits, axis=-1, output_type=tf.int32))}


class MultilabelServer(SentenceServer):
    def head_outputs(self, logits) -> dict:
        """logits [B, K] -> probabilities [B, K] and `labels` tf.string [B, K]: each label's name
        where its probability reaches the task's threshold, "" elsewhere."""
        probabilities = tf.sigmoid(logits)
        names = tf.broadcast_to(tf.constant(list(self.task.labels)), tf.shape(probabilities))
        return {"probabilities": probabilities,
                "labels": tf.where(probabilities >= self.task.threshold, names, tf.constant(""))}


class RegressorServer(SentenceServer):
    def head_outputs(self, output) -> dict:
        """output [B, 1] -> score [B] on the task's own scale."""
        return {"score": output[:, 0] * self.task.scale}
