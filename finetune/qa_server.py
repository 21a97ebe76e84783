"""The SavedModel server of a SQuAD task: question and context in, the answer and its span out.

`serving_default(question, context: tf.string [B])` featurizes as `finetune.squad.featurize` does
(question cut to max_query_length tokens; the context's sub-tokens, each with the characters it
came from (`electra_tf.token_offsets`, the rule of `finetune.squad_context.align_tokens`), in
windows of max_seq_length - len(question) - 3 tokens every min(window, doc_stride) tokens; each
token's max-context window), runs every window through the encoder and the QA head, and picks the
answer as `finetune.squad_postprocess.predict_answers` (and so `predict.py`) does: of the beams'
spans that lie in the window's context, start in their max-context window, end at or after the
start and are at most max_answer_length tokens, the best-scoring one (start + end
log-probability, the first on ties) whose text is not empty. It returns
    answer     tf.string [B]  the context's substring the span covers ("empty" when no span survives)
    start, end int32 [B]      the answer's [start, end) characters in the context (-1: none)
    score      float32 [B]    its start + end log-probability
and for SQuAD 2.0
    null_odds  float32 [B]    the minimum over the windows of the null score (without the
                              answerability classifier: minus the answer's score)
    abstains   bool [B]       null_odds above qa_na_threshold: the answer is "" (the original's rule)
`embed(question, context)` gives the encoder's vectors of each question's first window, with each
token's characters in the question (segment 0) or the context (segment 1).
"""

import tensorflow as tf

from electra_tf.checkpoints.saved_model import embedding_outputs, precision_record
from electra_tf.token_offsets import tokenize_with_offsets
from finetune.squad_postprocess import NO_PREDICTION

FIRST_ON_TIES = 2 ** 62  # larger than any candidate's position


def _in_rows(values: tf.RaggedTensor, rows, positions):
    """values [R, (T)], rows [M], positions [M] (within the row) -> values[rows, positions] [M]."""
    return tf.gather(values.flat_values, tf.gather(values.row_splits, rows) + positions)


def _segment_first(keys, eligible, segments, count):
    """The position of each segment's eligible value with the largest key (the first on ties); -1
    where none is eligible. keys float64 [M], eligible bool [M], segments [M] -> int64 [count]."""
    keys = tf.where(eligible, keys, -float("inf"))
    best = tf.math.unsorted_segment_max(keys, segments, count)  # [count]
    positions = tf.range(tf.size(keys, out_type=tf.int64))
    chosen = tf.where(eligible & (keys == tf.gather(best, segments)), positions, FIRST_ON_TIES)
    first = tf.math.unsorted_segment_min(chosen, segments, count)
    return tf.where(first == FIRST_ON_TIES, tf.constant(-1, tf.int64), first)


class QAServer(tf.Module):
    """Tokenizer + fine-tuned encoder + a SQuAD task's QA head, served on raw questions and contexts."""

    def __init__(self, tokenizer, model, task, config, precision: str):
        super().__init__(name=f"electra_{task.name}")
        self.tokenizer, self.encoder, self.task = tokenizer, model.encoder, task
        self.head = model.head_of(task.name)
        self.max_seq_length, self.doc_stride = config.max_seq_length, config.doc_stride
        self.max_query_length, self.max_answer_length = config.max_query_length, config.max_answer_length
        self.answerable_classifier, self.threshold = config.answerable_classifier, config.qa_na_threshold
        self.precision = precision_record(precision)
        texts = [tf.TensorSpec([None], tf.string, name="question"), tf.TensorSpec([None], tf.string, name="context")]
        self.serve = tf.function(self._serve, input_signature=texts, autograph=False)
        self.embed = tf.function(self._embed, input_signature=texts, autograph=False)

    def _windows(self, question, context) -> dict:
        """Every window of every question: the model's inputs [N, L] and where each window lies."""
        tok = self.tokenizer
        query, query_start, query_end = (t[:, :self.max_query_length] for t in tokenize_with_offsets(tok, question))
        doc, doc_char_start, doc_char_end = tokenize_with_offsets(tok, context)  # [B, (T)]
        query_length, doc_tokens = query.row_lengths(), doc.row_lengths()  # [B]
        window = self.max_seq_length - query_length - 3  # [B]
        checks = [tf.debugging.assert_positive(window, message=f"max_seq_length {self.max_seq_length} leaves no room "
                                               f"for the context after a question of max_query_length tokens")]
        with tf.control_dependencies(checks):
            step = tf.minimum(window, self.doc_stride)
        count = tf.where(doc_tokens > window, (doc_tokens - window + step - 1) // step + 1,
                         tf.minimum(doc_tokens, 1))  # [B]: windows (none for a context without tokens)
        example = tf.repeat(tf.range(tf.size(count, out_type=tf.int64)), count)  # [N]
        start = tf.ragged.range(count).flat_values * tf.gather(step, example)  # [N]: first doc token
        length = tf.minimum(tf.gather(doc_tokens, example) - start, tf.gather(window, example))  # [N]
        positions = tf.ragged.range(start, start + length)  # [N, (len)]: doc tokens of each window
        rows = tf.repeat(example, length)
        in_window = lambda values: positions.with_flat_values(_in_rows(values, rows, positions.flat_values))
        n = tf.size(example)
        edge = lambda value: tf.fill([n, 1], tf.constant(value, tf.int32))
        cls_sep = lambda cls, sep, a, b: tf.concat([edge(cls), tf.gather(a, example), edge(sep), b, edge(sep)], 1)
        ids = cls_sep(tok.cls_id, tok.sep_id, query, in_window(doc))  # [N, (L)]
        token_start = cls_sep(-1, -1, query_start, in_window(doc_char_start))
        token_end = cls_sep(-1, -1, query_end, in_window(doc_char_end))
        offset = tf.gather(query_length, example) + 2  # [N]: the window's first doc token in the input
        segments = tf.ones_like(ids) - tf.cast(tf.ragged.range(ids.row_lengths()) < offset[:, None], tf.int32)
        return {"input_ids": ids.to_tensor(tok.pad_id), "input_mask": tf.ones_like(ids).to_tensor(0),
                "segment_ids": segments.to_tensor(0), "token_start": token_start.to_tensor(-1),
                "token_end": token_end.to_tensor(-1), "example": example, "start": start, "length": length,
                "offset": offset, "count": count, "positions": positions, "doc_char_start": doc_char_start,
                "doc_char_end": doc_char_end}

    def _max_context(self, w: dict):
        """bool [N, max len]: whether the window is each of its tokens' max-context window (the
        highest min(left, right) + 0.01 * length, the first window on ties; `squad.max_context`)."""
        positions, length = w["positions"], tf.cast(w["length"], tf.float64)
        rows = tf.repeat(tf.range(tf.size(length, out_type=tf.int64)), positions.row_lengths())  # [M]
        inside = tf.cast(tf.ragged.range(positions.row_lengths()).flat_values, tf.float64)  # [M]
        row_length = tf.gather(length, rows)
        score = tf.minimum(inside, row_length - 1 - inside) + 0.01 * row_length  # [M]
        token = tf.gather(tf.gather(w["doc_char_start"].row_splits, w["example"]), rows) + positions.flat_values
        tokens = tf.size(w["doc_char_start"].flat_values, out_type=tf.int64)
        best = tf.math.unsorted_segment_max(score, token, tokens)
        chosen = tf.where(score == tf.gather(best, token), rows, FIRST_ON_TIES)
        first = tf.math.unsorted_segment_min(chosen, token, tokens)
        return positions.with_flat_values(tf.gather(first, token) == rows).to_tensor(False)

    def _serve(self, question, context):
        w = self._windows(question, context)
        sequence = self.encoder.infer(w["input_ids"], w["input_mask"], w["segment_ids"])  # [N, L, H], padding skipped
        beams = self.head(sequence, {"input_mask": w["input_mask"], "segment_ids": w["segment_ids"]}, training=False)
        start_index = tf.cast(beams["start_top_index"], tf.int64)  # [N, k]
        end_index = tf.cast(beams["end_top_index"], tf.int64)  # [N, k, k]
        start_index = tf.broadcast_to(start_index[:, :, None], tf.shape(end_index))
        offset, length = w["offset"][:, None, None], w["length"][:, None, None]
        in_context = lambda index: (offset <= index) & (index < offset + length)
        best_context = self._max_context(w)  # [N, W]
        last = tf.maximum(tf.cast(tf.shape(best_context)[1], tf.int64) - 1, 0)  # (a start outside is not valid)
        in_best = tf.gather(best_context, tf.clip_by_value(start_index - offset, 0, last), batch_dims=1)  # [N, k, k]
        valid = ((start_index != 0) & in_context(start_index) & in_context(end_index) & in_best
                 & (end_index >= start_index) & (end_index - start_index + 1 <= self.max_answer_length))  # [N, k, k]
        score = (tf.cast(beams["start_top_log_probs"], tf.float64)[:, :, None]
                 + tf.cast(beams["end_top_log_probs"], tf.float64))  # [N, k, k]
        # the candidates in the order predict_answers ranks ties: window, start beam, end beam
        flat = lambda t: tf.reshape(t, [-1])
        example = flat(tf.broadcast_to(w["example"][:, None, None], tf.shape(end_index)))
        first = flat(w["start"][:, None, None] + start_index - offset)  # doc tokens
        last = flat(w["start"][:, None, None] + end_index - offset)
        valid, score = flat(valid), flat(score)
        safe = lambda index: tf.where(valid, index, 0)
        char_start = tf.cast(_in_rows(w["doc_char_start"], example, safe(first)), tf.int64)
        char_end = tf.cast(_in_rows(w["doc_char_end"], example, safe(last)), tf.int64)
        tier = tf.where(valid, tf.where(char_end > char_start, 2.0, 1.0), 0.0)  # a non-empty text first
        batch = tf.size(question, out_type=tf.int64)
        best_tier = tf.gather(tf.math.unsorted_segment_max(tier, example, batch), example)
        chosen = _segment_first(score, valid & (tier == best_tier), example, batch)  # [B]: the answer
        found = chosen >= 0
        pick = lambda values, missing: tf.where(found, tf.gather(values, tf.maximum(chosen, 0)), missing)
        start, end = pick(char_start, -1), pick(char_end, -1)
        answer_score = pick(score, 0.0)
        text = tf.strings.substr(context, tf.maximum(start, 0), end - start, unit="UTF8_CHAR")
        outputs = {"answer": tf.where(found, text, NO_PREDICTION), "start": tf.cast(start, tf.int32),
                   "end": tf.cast(end, tf.int32), "score": tf.cast(answer_score, tf.float32)}
        if self.task.v2:
            null_score = tf.math.unsorted_segment_min(tf.cast(beams["null_score"], tf.float64), w["example"], batch)
            null_score = tf.where(w["count"] > 0, null_score, float("inf"))
            null_odds = null_score if self.answerable_classifier else null_score - answer_score
            outputs.update(null_odds=tf.cast(null_odds, tf.float32), abstains=null_odds > self.threshold)
        return outputs

    def _embed(self, question, context):
        w = self._windows(question, context)
        first = tf.math.cumsum(w["count"], exclusive=True)  # [B]: each question's first window
        take = lambda key: tf.gather(w[key], first)
        return embedding_outputs(self.encoder, *(take(key) for key in ("input_ids", "input_mask", "segment_ids",
                                                                        "token_start", "token_end")))
