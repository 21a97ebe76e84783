"""CoNLL-2000 chunking (the original's `chunk` task): reading, BIOES labels, first-sub-token
featurization, the tagging head and the chunk-level F1.

Files: `<task dir>/{train,dev,test}.txt`, one `word POS tag` line per token (word: first field,
tag: last), a blank line between sentences, `-DOCSTART-` lines skipped. CoNLL-2000 ships no dev
set: without a `dev.txt` the last tenth of train.txt's sentences (the last int(n / 10); 893 of
8936) is held out as dev and removed from train -- a fixed, documented split. The original's README
scores on the test set instead (it puts test.txt in dev.txt); split "test" reads test.txt.

As the original: IOB2 tags become BIOES over the chunk spans; labels are the sorted BIOES tags of
every split present; each word is lower-cased and accent-stripped (whatever do_lower_case says)
and WordPiece-tokenized on its own, and only its first sub-token is labelled; the input is
`[CLS] words [SEP]` with every segment id 1; the loss of a sentence is summed over its words.
Long sentences are cut as the original does (no word is started once n_words + 2 + tokens so far
+ 1 exceeds max_seq_length; here also none that would not fit); `TaggingFeatures.words_cut`
counts the words lost.

Precision, recall and F1 (×100) count the chunks whose start, end and type all match. The
chunks are read as the original's scorer reads them (`original_chunks`: only B-, S- or O end a
chunk, so malformed predictions merge), or with `conlleval_chunks` by conlleval's boundary rules
(`chunks`; IOB2 and BIOES alike: a change of type, or I/E after O/E/S, starts a chunk). The two
agree on well-formed tags; the gold tags become BIOES by conlleval's rules.
"""

import dataclasses
import re
import unicodedata
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import tensorflow as tf
import tf_keras

from electra_tf.errors import InputError
from electra_tf.modeling.layer_utils import build_in_scope
from electra_tf.tokenization import Tokenizer
from finetune import scorers
from finetune.inputs import Features, _tokenize, pad_batch
from finetune.table_files import read_text

TASK_NAME = "chunk"
DEV_HOLDOUT = 10  # without dev.txt, the last 1/10 of train.txt is the dev split


@dataclasses.dataclass
class Sentence:
    eid: int
    words: Tuple[str, ...]
    tags: Optional[Tuple[str, ...]]  # as in the file (IOB2 for CoNLL-2000); None: to be predicted
    source: str = ""  # "<file>:<line of its first word>", what an error about it names


def valid_tag(tag, prefixes: str = "BIES") -> bool:
    """Whether `tag` is O or `<prefix>-<type>` for one of `prefixes`."""
    return isinstance(tag, str) and (tag == "O" or (len(tag) > 2 and tag[1] == "-" and tag[0] in prefixes))


def conll_fields(line: str) -> List[str]:
    """A CoNLL line's fields: split at runs of tabs if it has any (a word may then hold spaces:
    "New York"), else at spaces; never at other whitespace, so a no-break space inside a word stays
    there. A line of whitespace alone is blank (no fields)."""
    if not line.strip():
        return []
    line = line.strip(" \t\r")
    if "\t" in line:
        return [field.strip(" ") for field in re.split(r"\t+", line)]
    return [field for field in line.split(" ") if field]


def read_sentences(path, max_sentences: Optional[int] = None, tag_column: int = -1,
                   prefixes: str = "BIES") -> List[Sentence]:
    """The sentences of one CoNLL file (`conll_fields`), each word's tag taken from `tag_column`
    (an index; the last by default). A line with fewer than two fields or another number of them
    than the file's first word line (a tag left out would read the column before it), or a tag that
    is not O or `<prefix>-<type>` for one of `prefixes` (the scheme's: IOB1/IOB2 "BI", BIOES
    "BIES"), is an InputError."""
    path = Path(path)
    lines = read_text(path).split("\n")
    sentences, current, first, width = [], [], 0, None
    for number, line in enumerate(lines + [""], start=1):
        fields = conll_fields(line)
        if not fields:
            if current:
                words, tags = zip(*current)
                sentences.append(Sentence(len(sentences), words, tags, f"{path}:{first}"))
                current = []
                if max_sentences is not None and len(sentences) >= max_sentences:
                    break
            continue
        if fields[0] == "-DOCSTART-":
            continue
        if len(fields) < 2:
            raise InputError(f"{path}:{number}: expected `word ... tag`, found {line.strip()!r}")
        if width is None:
            width = (len(fields), number)
        if len(fields) != width[0]:
            raise InputError(f"{path}:{number}: {len(fields)} fields, but line {width[1]} has {width[0]}")
        if not -len(fields) <= tag_column < len(fields):
            raise InputError(f"{path}:{number}: {len(fields)} fields, no tag column {tag_column}")
        tag = fields[tag_column]
        if not valid_tag(tag, prefixes):
            raise InputError(f"{path}:{number}: tag {tag!r} is not O or "
                             f"{'/'.join(p + '-' for p in prefixes)}<type>")
        if not current:
            first = number  # the sentence's first word
        current.append((fields[0], tag))
    if not sentences:
        raise InputError(f"{path}: holds no sentences")
    return sentences


def read_split(task_dir, split: str, max_sentences: Optional[int] = None) -> List[Sentence]:
    """"train", "dev" or "test" (see the module docstring for the held-out dev split)."""
    task_dir = Path(task_dir)
    own = task_dir / f"{split}.txt"
    if split == "test" or (split == "dev" and own.is_file()):
        if not own.is_file():
            raise InputError(f"chunk: no {split} file {own}")
        return read_sentences(own, max_sentences)
    if split not in ("train", "dev"):
        raise InputError(f"chunk: unknown split {split!r} (train, dev or test)")
    train = read_sentences(task_dir / "train.txt")
    held_out = 0 if (task_dir / "dev.txt").is_file() else len(train) // DEV_HOLDOUT
    chosen = train[:len(train) - held_out] if split == "train" else train[len(train) - held_out:]
    chosen = chosen[:max_sentences]
    return [Sentence(i, s.words, s.tags, s.source) for i, s in enumerate(chosen)]


def _parts(tag: str) -> Tuple[str, str]:
    return ("O", "") if tag == "O" else (tag[0], tag[2:])


def chunks(tags: Sequence[str]) -> Set[Tuple[int, int, str]]:
    """(first word, last word, type) of every chunk, by conlleval's startOfChunk / endOfChunk."""
    found, start = set(), None
    previous, previous_type = "O", ""
    for i, tag in enumerate(list(tags) + ["O"]):
        kind, chunk_type = _parts(tag)
        ends = (previous in "ES" or (previous in "BI" and kind in "BSO")
                or (previous != "O" and previous_type != chunk_type))
        starts = (kind in "BS" or (previous in "ESO" and kind in "EI")
                  or (kind != "O" and previous_type != chunk_type))
        if ends and start is not None:
            found.add((start, i - 1, previous_type))
            start = None
        if starts:
            start = i
        previous, previous_type = kind, chunk_type
    return found


def original_chunks(tags: Sequence[str]) -> Set[Tuple[int, int, str]]:
    """(first word, last word, type) of every chunk as the original's scorer reads them (its
    `get_span_labels`): a chunk ends only where a B-, S- or O follows, so an E- does not end one
    and an I- after it, or of another type, continues it; the chunk takes its last tag's type."""
    found, start, last = set(), -1, "O"
    for i, tag in enumerate(tags):
        kind, _ = _parts(tag)
        if kind in "BSO" and last != "O":
            found.add((start, i - 1, _parts(last)[1]))
        if kind in "BS" or last == "O":
            start = i
        last = tag
    if tags and tags[-1] != "O":
        found.add((start, len(tags) - 1, _parts(tags[-1])[1]))
    return found


def to_bioes(tags: Sequence[str]) -> List[str]:
    """The chunks of a tag sequence written as BIOES (S- single word; B-, I-, E- longer chunks)."""
    bioes = ["O"] * len(tags)
    for first, last, chunk_type in chunks(tags):
        if first == last:
            bioes[first] = "S-" + chunk_type
        else:
            bioes[first:last + 1] = ["B-" + chunk_type] + ["I-" + chunk_type] * (last - first - 1) + ["E-" + chunk_type]
    return bioes


def label_mapping(*splits: Sequence[Sentence]) -> Dict[str, int]:
    """{BIOES tag: id}, tags sorted, over every sentence given (the original's mapping)."""
    tags = {tag for sentences in splits for s in sentences for tag in to_bioes(s.tags)}
    return {tag: i for i, tag in enumerate(sorted(tags))}


def chunk_f1(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]],
             conlleval: bool = True) -> Dict[str, float]:
    """Overall chunk precision, recall and F1 (×100) over sentences of tags, the chunks read by
    conlleval's rules or by the original's scorer (`original_chunks`)."""
    read = chunks if conlleval else original_chunks
    correct = found_gold = found_predicted = 0
    for gold_tags, predicted_tags in zip(gold, predicted):
        gold_chunks, predicted_chunks = read(gold_tags), read(predicted_tags)
        correct += len(gold_chunks & predicted_chunks)
        found_gold += len(gold_chunks)
        found_predicted += len(predicted_chunks)
    precision = 100.0 * correct / found_predicted if found_predicted else 0.0
    recall = 100.0 * correct / found_gold if found_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def typed_f1(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> Dict[str, float]:
    """Per chunk type, `<type>/precision`, `<type>/recall` and `<type>/f1` (×100) by conlleval's rules."""
    counts: Dict[str, List[int]] = {}  # type -> [correct, gold, predicted]
    for gold_tags, predicted_tags in zip(gold, predicted):
        gold_chunks, predicted_chunks = chunks(gold_tags), chunks(predicted_tags)
        for index, found in enumerate((gold_chunks & predicted_chunks, gold_chunks, predicted_chunks)):
            for _, _, chunk_type in found:
                counts.setdefault(chunk_type, [0, 0, 0])[index] += 1
    scores = {}
    for chunk_type in sorted(counts):
        correct, found_gold, found_predicted = counts[chunk_type]
        scores.update({f"{chunk_type}/{key}": value
                       for key, value in scorers.rates(correct, found_predicted, found_gold).items()})
    return scores


def uncased(word: str) -> str:
    """The original's tagging words: always lower-cased and accent-stripped."""
    word = word.lower()
    if word.isascii():
        return word
    return "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")


@dataclasses.dataclass
class TaggingFeatures(Features):
    """`Features` plus, per sentence, the first sub-token of each kept word and its label."""

    labeled_positions: List[np.ndarray]  # each int32 [kept words]
    labels: List[np.ndarray]  # each int32 [kept words] (zeros for a sentence without tags)
    words_cut: int  # words past max_seq_length, not labelled (and not scored)


def featurize(sentences: Sequence[Sentence], tokenizer: Tokenizer, max_seq_length: int,
              mapping: Dict[str, int], task_id: int = 0, uncased_words: bool = True) -> TaggingFeatures:
    """`uncased_words`: lower-case and strip accents from every word first (the original's, always);
    false leaves the words to the tokenizer, which normalises them as the model was trained."""
    words = [uncased(w) if uncased_words else w for s in sentences for w in s.words]
    pieces = _tokenize(tokenizer, words)
    token_ids, positions, labels, cursor, cut, sentences_cut = [], [], [], 0, 0, 0
    for sentence in sentences:
        n_words = len(sentence.words)
        ids, tagged = [tokenizer.cls_id], []
        for word_pieces in pieces[cursor:cursor + n_words]:
            # a word the tokenizer drops whole (only zero-width or control characters, such as U+200B)
            # stands as one [UNK], keeping a position and a tag of its own; the original gave it no
            # token, so its tag went to the next word's first piece (docs/fidelity.md#known-quirks)
            word_pieces = word_pieces if len(word_pieces) else [tokenizer.unk_id]
            if n_words + 2 + len(ids) + 1 > max_seq_length or len(ids) + len(word_pieces) + 1 > max_seq_length:
                break
            tagged.append(len(ids))
            ids += [int(p) for p in word_pieces]
        cursor += n_words
        cut += n_words - len(tagged)
        sentences_cut += len(tagged) < n_words
        token_ids.append(np.asarray(ids + [tokenizer.sep_id], np.int32))
        positions.append(np.asarray(tagged, np.int32))
        if sentence.tags is None:  # to be predicted: no gold tags to map (the labels only count the words)
            labels.append(np.zeros(len(tagged), np.int32))
            continue
        bioes = to_bioes(sentence.tags)[:len(tagged)]
        try:
            labels.append(np.asarray([mapping[tag] for tag in bioes], np.int32))
        except KeyError as error:
            raise InputError(f"{sentence.source}: tag {error.args[0]} (BIOES) is not in the label mapping "
                             f"({len(mapping)} tags)") from None
    n = len(sentences)
    segment_ids = [np.ones(len(ids), np.int32) for ids in token_ids]  # all 1, as the original
    return TaggingFeatures(token_ids, segment_ids, np.full(n, task_id, np.int32), np.zeros(n, np.int32),
                           np.zeros(n, np.float32), positions, labels, cut, cut=sentences_cut)


def tagging_batch(features: TaggingFeatures, indices: Sequence[int], pad_to: Optional[int] = None) -> dict:
    """`finetune.inputs.pad_batch` plus labeled_positions, tag_ids (int32 [B, W]) and labels_mask
    (float32 [B, W]), W the most kept words in the batch."""
    batch = pad_batch(features, indices, pad_to)
    width = max(1, max(len(features.labels[i]) for i in indices))
    positions = np.zeros([len(indices), width], np.int32)
    tag_ids = np.zeros([len(indices), width], np.int32)
    mask = np.zeros([len(indices), width], np.float32)
    for row, i in enumerate(indices):
        n = len(features.labels[i])
        positions[row, :n], tag_ids[row, :n], mask[row, :n] = features.labeled_positions[i], features.labels[i], 1.0
    batch.update(labeled_positions=positions, tag_ids=tag_ids, labels_mask=mask)
    return batch


class TaggingHead(tf_keras.layers.Layer):
    """dense(n_tags) on the first sub-token of each word; variables task_specific/<task>/dense
    (no dropout, as the original's tagging head)."""

    def __init__(self, task_name: str, num_tags: int, hidden_size: int, **kwargs):
        super().__init__(name=task_name, **kwargs)
        self.hidden_size = hidden_size
        self.dense = tf_keras.layers.Dense(num_tags, name="dense")

    def build(self, input_shape=None):
        build_in_scope(self.dense, [None, self.hidden_size])
        super().build(input_shape)

    def call(self, sequence_output, batch, training=False):
        """sequence_output [B, L, H] -> logits float32 [B, W, n_tags]."""
        words = tf.gather(sequence_output, batch["labeled_positions"], batch_dims=1)  # [B, W, H]
        return tf.cast(self.dense(words), tf.float32)

    def per_example_loss(self, logits, batch):
        """-> [B]: cross-entropy summed over the sentence's labelled words (tag ids of another
        tagging task's rows are clipped into range; the model masks their loss out)."""
        tag_ids = tf.clip_by_value(batch["tag_ids"], 0, tf.shape(logits)[-1] - 1)
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tag_ids, logits=logits)  # [B, W]
        return tf.reduce_sum(losses * batch["labels_mask"], axis=-1)

    def predictions(self, logits):
        return tf.argmax(logits, axis=-1, output_type=tf.int32)  # [B, W]


def tag_names(features: TaggingFeatures, predicted: Sequence[np.ndarray], mapping: Dict[str, int]):
    """(gold, predicted) tags per sentence, one per kept word, from the gold labels and predicted ids."""
    names = {i: tag for tag, i in mapping.items()}
    gold = [[names[int(i)] for i in labels] for labels in features.labels]
    guessed = [[names[int(i)] for i in np.asarray(p)[:len(labels)]] for p, labels in zip(predicted, features.labels)]
    return gold, guessed


def score(features: TaggingFeatures, predicted: Sequence[np.ndarray], mapping: Dict[str, int],
          conlleval: bool = False) -> Dict[str, float]:
    """Chunk P/R/F1 of predicted tag ids (per sentence, one per kept word) against the gold labels,
    by the original's scorer, or by conlleval's rules."""
    return chunk_f1(*tag_names(features, predicted, mapping), conlleval)
