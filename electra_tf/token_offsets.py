"""Token ids with the characters each token came from, as TensorFlow ops (for SavedModels).

`tokenize_with_offsets(tokenizer, texts)` splits each text into words on SQuAD's whitespace
(space, tab, CR, LF, U+202F), tokenizes every word on its own with the `Tokenizer` (which gives
the same ids as tokenizing the whole text) and maps each sub-token back to its [start, end)
characters (Unicode code points) in the text by the rule of `finetune.squad_context.align_tokens`,
which the SQuAD featurizer uses: a word's characters are normalized one by one (control characters
dropped; lower-cased and accents stripped when the tokenizer lower-cases), each sub-token's text
(without "##") is matched at the current place in the normalized word, and its characters are
those it was made from. A sub-token that does not match ([UNK], ...) and the ones after it in the
word start where the matching stopped and end at the word's end.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from electra_tf.tokenization import _CLEAN, SUFFIX_INDICATOR, Tokenizer

SQUAD_WHITESPACE = r"[ \t\r\n\x{202F}]+"


def _in_rows(flat, row_lengths):
    """flat [N] values of rows of `row_lengths` [R] -> (inclusive, exclusive) cumulative sums within each row."""
    total = tf.math.cumsum(flat)  # [N]
    starts = tf.math.cumsum(row_lengths, exclusive=True)  # [R]: each row's first value
    base = tf.repeat(tf.gather(tf.concat([tf.zeros([1], flat.dtype), total], 0), starts), row_lengths)  # [N]
    inclusive = total - base
    return inclusive, inclusive - flat


def _normalized_chars(tokenizer: Tokenizer, chars, ascii_word):
    """chars tf.string [C] (one character each), ascii_word bool [C] (its word is ASCII) -> each
    character as WordPiece sees it ("" when dropped). As `align_tokens`, an ASCII word is only
    lower-cased (its control characters are kept, and then fail to match)."""
    plain = tf.strings.lower(chars) if tokenizer.do_lower_case else chars
    chars = tf.strings.regex_replace(chars, _CLEAN, "")
    if tokenizer.do_lower_case:
        chars = tf.strings.lower(chars, encoding="utf-8")
        if tokenizer.strip_accents:
            chars = tf.strings.regex_replace(tf_text.normalize_utf8(chars, "NFD"), r"\p{Mn}", "")
    return tf.where(ascii_word, plain, chars)


def tokenize_with_offsets(tokenizer: Tokenizer, texts):
    """texts tf.string [B] -> (ids int32, start int32, end int32), each [B, (T)]: the tokens of
    `tokenizer.tokenize(texts)` and each one's [start, end) characters in its text."""
    texts = tf.convert_to_tensor(texts, tf.string)
    # the splitter ends a word at a NUL; \x01 is a control character as well (dropped, or unmatched, alike)
    texts = tf.strings.regex_replace(texts, "\x00", "\x01")
    words, word_byte_start, _ = tf_text.regex_split_with_offsets(texts, SQUAD_WHITESPACE, "")  # [B, (W)]
    flat_words = words.flat_values  # [NW]
    pieces = tokenizer.tokenize(flat_words)  # [NW, (P)]
    piece_counts = pieces.row_lengths()  # [NW]

    # each word's characters, normalized one by one: byte ends of what each character became
    chars = tf.strings.unicode_split(flat_words, "UTF-8")  # [NW, (C)]
    ascii_word = tf.strings.length(flat_words) == tf.strings.length(flat_words, unit="UTF8_CHAR")  # [NW]
    normalized = _normalized_chars(tokenizer, chars.flat_values, tf.repeat(ascii_word, chars.row_lengths()))  # [NC]
    char_bytes = tf.strings.length(normalized)  # [NC]
    char_end_bytes, _ = _in_rows(tf.cast(char_bytes, tf.int64), chars.row_lengths())  # [NC]: within the word
    normalized_words = tf.strings.reduce_join(chars.with_flat_values(normalized), axis=1)  # [NW]

    # each sub-token's text matched at its place in the normalized word
    vocab = tf.constant(list(tokenizer.vocab))
    text = tf.gather(vocab, pieces.flat_values)  # [NP]
    text = tf.strings.regex_replace(text, f"^{SUFFIX_INDICATOR}", "")
    length = tf.cast(tf.strings.length(text), tf.int64)  # [NP] bytes
    _, place = _in_rows(length, piece_counts)  # [NP]: where it is, if every earlier one matched
    word_of = tf.repeat(tf.range(tf.size(flat_words, out_type=tf.int64)), piece_counts)  # [NP]
    own_word = tf.gather(normalized_words, word_of)
    matches = (length > 0) & (place + length <= tf.cast(tf.strings.length(own_word), tf.int64))
    matches &= tf.strings.substr(own_word, tf.minimum(place, tf.cast(tf.strings.length(own_word), tf.int64)),
                                 length) == text
    misses, _ = _in_rows(tf.cast(~matches, tf.int64), piece_counts)
    aligned = misses == 0  # [NP]: it and every earlier sub-token of its word matched
    _, stop = _in_rows(tf.where(aligned, length, 0), piece_counts)  # [NP]: place of a match; where matching stopped

    # normalized byte -> the word's character it came from (the first character whose end is past it)
    word_chars = chars.row_lengths()  # [NW]
    char_base = tf.gather(tf.math.cumsum(word_chars, exclusive=True), word_of)  # [NP]: the word's first char, flat
    word_bytes = tf.math.unsorted_segment_max(char_end_bytes, tf.repeat(tf.range(tf.size(word_chars, tf.int64)),
                                                                          word_chars), tf.size(word_chars))
    word_bytes = tf.maximum(word_bytes, 0)  # [NW] normalized bytes of each word
    offset = tf.math.cumsum(word_bytes, exclusive=True)  # [NW]: the word's first byte in all normalized words
    sorted_ends = char_end_bytes + tf.repeat(offset, word_chars)  # [NC]: non-decreasing over all words
    piece_offset = tf.gather(offset, word_of)  # [NP]

    def char_at(byte):  # [NP] normalized byte in its word -> its character in the word
        found = tf.searchsorted(sorted_ends[tf.newaxis], (byte + piece_offset)[tf.newaxis], side="right")[0]
        return tf.cast(found, tf.int64) - char_base

    word_length = tf.gather(word_chars, word_of)  # [NP] characters
    own_bytes = tf.gather(word_bytes, word_of)
    start = tf.where(stop < own_bytes, char_at(stop), 0)
    end = tf.where(aligned, char_at(stop + length - 1) + 1, word_length)

    # the word's first character in the text
    word_text = tf.repeat(texts, words.row_lengths())  # [NW]
    word_start = tf.strings.length(tf.strings.substr(word_text, tf.zeros_like(word_byte_start.flat_values),
                                                     word_byte_start.flat_values), unit="UTF8_CHAR")  # [NW]
    shift = tf.gather(tf.cast(word_start, tf.int64), word_of)
    rows = words.with_flat_values(pieces).merge_dims(1, 2)  # [B, (T)]: the pieces' order, merged once
    as_rows = lambda flat: rows.with_flat_values(tf.cast(flat, tf.int32))  # noqa: E731
    return as_rows(pieces.flat_values), as_rows(start + shift), as_rows(end + shift)
