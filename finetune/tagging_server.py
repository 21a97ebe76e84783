"""The SavedModel server of a tagging task: sentences in, a tag per word and the entities out.

`serving_default(text: tf.string [B])` splits each sentence on whitespace (Unicode's) and featurizes its words
as `finetune.chunking.featurize` does (lower-cased when the task is; the first sub-token of each
word tagged, one [UNK] spanning a word the tokenizer drops whole; the original's cut of long
sentences; segment ids 1), then returns
    tags          tf.string [B, W]  each word's BIOES tag, "" for a word past max_seq_length
                                    (W: the batch's most words; "" on padding)
    word_start    int32 [B, W]      each word's character span in its sentence (-1 on padding)
    word_end      int32 [B, W]
    entity_type   tf.string [B, E]  the entities by conlleval's rules, in order ("" on padding)
    entity_start  int32 [B, E]      their character spans in the sentence (-1 on padding)
    entity_end    int32 [B, E]
`embed(text)` gives the encoder's vectors of the same tokens, with each token's characters in the
sentence (`electra_tf.token_offsets` on its word, as the tokenizer normalises it; under `chunk`,
whose words are uncased first, a word whose uncasing changes its length, rare, has its tokens'
characters clipped to the word). Decoding the entities needs only
adjacent tags (conlleval's start and end of a chunk), so it runs as whole-tensor ops.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from electra_tf.checkpoints.saved_model import embedding_outputs, precision_record
from electra_tf.framing import framed, framed_ids
from electra_tf.token_offsets import tokenize_with_offsets
from electra_tf.tokenization import Tokenizer

# Between the words of a sentence to tag: Unicode's White_Space characters, as a regex class that
# Python's re and RE2 read alike. tf_text's WhitespaceTokenizer splits on the same ones but leaves
# all but the last byte of a multi-byte one (U+00A0, U+3000, ...) in the word before it
# (tensorflow-text 2.20: "Corp.\u00a0said" gives b"Corp.\xc2"), so RE2 splits here.
WHITE_SPACE = "[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+"


def tagging_inputs(tokenizer: Tokenizer, text, max_seq_length: int, uncased_words: bool):
    """text tf.string [B] -> ({input_ids, input_mask, segment_ids [B, L], labeled_positions
    [B, Wk], token_start and token_end [B, L]: each token's characters in the sentence, -1 on
    [CLS], [SEP] and padding}, kept bool [B, (W)], word spans in characters [B, (W)] x 2)."""
    words, starts, ends = tf_text.regex_split_with_offsets(text, WHITE_SPACE, "")  # [B, (W)], bytes
    flat = words.flat_values  # [NW]
    if uncased_words:  # the original's tagging words: lower-cased, accents stripped, before WordPiece
        flat = tf.strings.regex_replace(tf_text.normalize_utf8(tf.strings.lower(flat, encoding="utf-8"), "NFD"),
                                        r"\p{Mn}", "")
    pieces = tokenizer.tokenize(flat)  # [NW, (P)]
    dropped = tf.cast(pieces.row_lengths() == 0, tf.int64)  # [NW]: a word the tokenizer drops whole ...
    unk = tf.fill([tf.reduce_sum(dropped)], tf.cast(tokenizer.unk_id, pieces.dtype))
    pieces = tf.concat([pieces, tf.RaggedTensor.from_row_lengths(unk, dropped)], 1)  # ... is one [UNK], as in featurize
    counts = pieces.row_lengths()  # [NW]
    total = tf.math.cumsum(counts)  # [NW]: pieces up to and including each word, over the batch
    row_base = tf.gather(tf.concat([[0], total], 0), words.row_splits[:-1])  # [B]
    after = total - tf.repeat(row_base, words.row_lengths())  # [NW]: within the sentence
    before = after - counts
    n_words = tf.repeat(words.row_lengths(), words.row_lengths())  # [NW]
    # finetune.chunking.featurize: no word is started once n_words + 2 + len(ids) + 1 exceeds the
    # length (len(ids) = 1 + the pieces before it), nor one whose pieces would not fit
    kept = (n_words + 4 + before <= max_seq_length) & (after + 2 <= max_seq_length)  # [NW]
    kept_rows = words.with_flat_values(kept)  # [B, (W)]
    kept_words = tf.reduce_sum(tf.cast(kept_rows, tf.int64), 1)  # [B]
    only_kept = lambda values: tf.RaggedTensor.from_row_lengths(tf.ragged.boolean_mask(values, kept), kept_words)
    kept_pieces = only_kept(pieces)  # [B, (Wk), (P)]
    body = kept_pieces.merge_dims(1, 2)  # [B, (T)]
    input_ids, mask = framed_ids(tokenizer, tf.cast(body, tf.int32), max_seq_length)  # [B, L]: the body fits
    positions = tf.ragged.boolean_mask(words.with_flat_values(1 + before), kept_rows)  # [B, (Wk)]
    features = {"input_ids": input_ids, "input_mask": mask, "segment_ids": mask,
                "labeled_positions": tf.cast(positions.to_tensor(0), tf.int32)}
    sentence = tf.repeat(text, words.row_lengths())  # [NW]: each word's sentence
    in_chars = lambda offset: tf.strings.length(tf.strings.substr(sentence, tf.zeros_like(offset), offset),
                                                unit="UTF8_CHAR")  # a byte offset as characters
    spans = [words.with_flat_values(in_chars(offsets.flat_values)) for offsets in (starts, ends)]
    word_start, word_end = (tf.cast(span.flat_values, tf.int32) for span in spans)  # [NW]
    whole_word = (tf.zeros_like(word_start), word_end - word_start)  # a dropped word's [UNK] spans it
    for key, offsets, unk_offset in zip(("token_start", "token_end"), tokenize_with_offsets(tokenizer, flat)[1:],
                                        whole_word):  # [NW, (P)]
        unk_offset = tf.cast(tf.boolean_mask(unk_offset, dropped > 0), offsets.dtype)
        offsets = tf.concat([offsets, tf.RaggedTensor.from_row_lengths(unk_offset, dropped)], 1)
        word = offsets.value_rowids()  # [NP]
        length, shift = tf.gather(word_end - word_start, word), tf.gather(word_start, word)
        in_sentence = tf.minimum(offsets.flat_values, length) + shift
        body = only_kept(offsets.with_flat_values(in_sentence)).merge_dims(1, 2)  # [B, (T)]
        features[key] = framed(body, max_seq_length, -1, -1, -1)
    return features, kept_rows, spans


def conlleval_entities(tags):
    """tags tf.string [B, W] (BIOES or IOB; "" as O) -> (first, last) word index [B, (E)] x 2 and
    type [B, (E)]: conlleval's startOfChunk / endOfChunk, which read adjacent tags only."""
    tags = tf.where(tags == "", "O", tags)
    parts = lambda t: (tf.strings.substr(t, 0, 1), tf.strings.regex_replace(t, "^(O|.-)", ""))  # "O": type ""
    kind, kind_type = parts(tags)
    outside = tf.fill([tf.shape(tags)[0], 1], "O")
    previous = tf.concat([outside, tags[:, :-1]], 1)
    following = tf.concat([tags[:, 1:], outside], 1)
    (prev_kind, prev_type), (next_kind, next_type) = parts(previous), parts(following)
    is_in = lambda value, letters: tf.reduce_any(tf.stack([value == c for c in letters]), 0)
    starts = (is_in(kind, "BS") | (is_in(prev_kind, "ESO") & is_in(kind, "EI"))
              | ((kind != "O") & (prev_type != kind_type)))  # [B, W]
    ends = (is_in(kind, "ES") | (is_in(kind, "BI") & is_in(next_kind, "BSO"))
            | ((kind != "O") & (kind_type != next_type)))  # the chunk ends at this word
    positions = tf.broadcast_to(tf.range(tf.shape(tags)[1]), tf.shape(tags))
    first = tf.ragged.boolean_mask(positions, starts & (kind != "O"))
    last = tf.ragged.boolean_mask(positions, ends & (kind != "O"))
    return first, last, tf.ragged.boolean_mask(kind_type, starts & (kind != "O"))


class TaggerServer(tf.Module):
    """Tokenizer + fine-tuned encoder + a tagging task's head, served on raw sentences."""

    def __init__(self, tokenizer: Tokenizer, model, task, max_seq_length: int, precision: str, uncased_words: bool):
        super().__init__(name=f"electra_{task.name}")
        self.tokenizer, self.encoder, self.task = tokenizer, model.encoder, task
        self.head = model.head_of(task.name)
        self.max_seq_length, self.uncased_words = max_seq_length, uncased_words
        self.tag_names = tf.constant(list(task.tags))
        self.precision = precision_record(precision)
        text = [tf.TensorSpec([None], tf.string, name="text")]
        self.serve = tf.function(self._serve, input_signature=text, autograph=False)
        self.embed = tf.function(self._embed, input_signature=text, autograph=False)

    def _serve(self, text):
        features, kept, (word_start, word_end) = tagging_inputs(self.tokenizer, text, self.max_seq_length,
                                                                self.uncased_words)
        sequence = self.encoder.infer(features["input_ids"], features["input_mask"],
                                      features["segment_ids"])  # [B, L, H], padding skipped
        logits = self.head(sequence, features, training=False)  # [B, Wk, tags]
        tagged = tf.gather(self.tag_names, tf.argmax(logits, -1, output_type=tf.int32))  # [B, Wk]
        lengths = tf.reduce_sum(tf.cast(kept, tf.int64), 1)  # [B]: words tagged
        tagged = tf.RaggedTensor.from_tensor(tagged, lengths)  # [B, (Wk)]
        padding = kept.row_lengths() - lengths  # words past max_seq_length
        tags = tf.concat([tagged, tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(padding)], ""), padding)],
                         axis=1)  # [B, (W)]
        first, last, kind = conlleval_entities(tags.to_tensor(""))
        found = tf.sequence_mask(first.row_lengths(), tf.reduce_max(first.row_lengths()))  # [B, E]
        span = lambda words, at: tf.where(found, tf.gather(words.to_tensor(-1), at.to_tensor(0), batch_dims=1), -1)
        return {"tags": tags.to_tensor(""), "word_start": tf.cast(word_start.to_tensor(-1), tf.int32),
                "word_end": tf.cast(word_end.to_tensor(-1), tf.int32), "entity_type": kind.to_tensor(""),
                "entity_start": tf.cast(span(word_start, first), tf.int32),
                "entity_end": tf.cast(span(word_end, last), tf.int32)}

    def _embed(self, text):
        features = tagging_inputs(self.tokenizer, text, self.max_seq_length, self.uncased_words)[0]
        return embedding_outputs(self.encoder, *(features[key] for key in ("input_ids", "input_mask", "segment_ids",
                                                                             "token_start", "token_end")))
