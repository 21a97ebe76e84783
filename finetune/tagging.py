"""The `tagging` task type: a tag per word (named entities, chunks), the original's tagging head.

Files: CoNLL columns (a word a line, its tag in `tag_column`, the last unless given; columns split
at tabs, or at spaces in a line without one: `chunking.conll_fields`; a blank line between
sentences; `-DOCSTART-` skipped) or JSONL (`{"tokens": [...], "tags": [...]}`, the keys
named by `text` and `label`). Tags are IOB1, IOB2 or BIOES (`scheme`) of any entity types; they
become BIOES over the entities read by conlleval's rules, and the head predicts the BIOES tags of
every split file (as the original's chunking task; an entity type train lacks is an error).
Words are featurized as the original's chunking task does (`finetune.chunking`: the first
sub-token of each word is labelled), each word normalised by the model's tokenizer (lower-cased,
and accents stripped, as its `do_lower_case` and `do_strip_accents` say). Scores: entity
precision, recall and F1 by conlleval's rules, overall and per type (`<type>/f1`, ...). `chunk`
is its preset (`finetune.chunk_preset`).
"""

import dataclasses
import itertools
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from electra_tf.errors import InputError
from finetune import chunking
from finetune.chunking import Sentence, TaggingFeatures, TaggingHead
from finetune.predict_inputs import InputSource
from finetune.table_files import Layout, RowId, id_cell, iter_rows, read_rows
from finetune.tagging_server import WHITE_SPACE, TaggerServer
from finetune.task import EDGE, EvalSplit, Task, text_offsets
from finetune.task_files import write_test_predictions

SCHEMES = {"iob1": "BI", "iob2": "BI", "bioes": "BIES"}  # scheme -> the tag prefixes it allows
WORD_BREAK = re.compile(WHITE_SPACE)  # str.split() breaks at U+001C-U+001F too, which the SavedModel does not


def json_words(words, path, line: int, key: str) -> Tuple[str, ...]:
    """A JSONL sentence's words: a list of text, each word something to tag, or one error naming the line."""
    if not isinstance(words, list) or not all(isinstance(w, str) and w.strip() for w in words):
        raise InputError(f"{path}:{line}: {key!r} must be a JSON list of words (non-empty strings)")
    return tuple(words)


def line_words(text: str) -> List[str]:
    """A plain-text line's words, as the tagging SavedModel (`finetune.tagging_server`) splits them."""
    return [word for word in WORD_BREAK.split(text) if word]


@dataclasses.dataclass
class TextSentence(Sentence):
    """A sentence to tag: its words, and where each lies in its text (the input line, or the
    words joined by spaces for JSONL and CoNLL input), for the entities' character spans."""

    text: str = ""
    offsets: Tuple[Tuple[int, int], ...] = ()
    row_id: RowId = None  # a test file's `id` (JSONL), carried into its predictions

    @classmethod
    def of_words(cls, eid: int, words, text: Optional[str] = None) -> "TextSentence":
        """The words with their spans in `text` (whitespace-separated words), or joined by spaces."""
        text = " ".join(words) if text is None else text
        offsets, cursor = [], 0
        for word in words:
            start = text.index(word, cursor)
            offsets.append((start, start + len(word)))
            cursor = start + len(word)
        return cls(eid, tuple(words), None, text=text, offsets=tuple(offsets))


class TaggingTask(Task):
    type_name = "tagging"
    # alone, on the original's length for its one tagging task, chunk: longer sentences, whose words
    # past max_seq_length are neither trained nor scored, fit whole
    presets = {"max_seq_length": 256}
    batch_spec = {"labeled_positions": tf.TensorSpec([None, None], tf.int32),
                  "tag_ids": tf.TensorSpec([None, None], tf.int32),
                  "labels_mask": tf.TensorSpec([None, None], tf.float32)}

    def __init__(self, name: str, root: Optional[str], paths: Dict[str, Optional[str]], format: str = "conll",
                 scheme: str = "iob2", tag_column: int = -1, tokens_key: str = "tokens", tags_key: str = "tags",
                 tags: Optional[List[str]] = None):
        self.name, self.root, self.paths, self.format = name, root, paths, format
        self.scheme, self.tag_column, self.tokens_key, self.tags_key = scheme, tag_column, tokens_key, tags_key
        self._tags = list(tags) if tags else None

    @classmethod
    def from_spec(cls, name: str, spec: dict, root: Optional[str], card: dict) -> "TaggingTask":
        paths = {split: spec.get(split) for split in ("train", "dev", "test")}
        return cls(name, root, paths, spec["format"], spec.get("scheme", "iob2"), spec.get("tag_column", -1),
                   spec.get("text", "tokens"), spec.get("label", "tags"), card.get("tags"))

    def path(self, split: str) -> Path:
        return Path(self.root) / self.paths[split]

    def _sentences(self, path: Path, max_examples: Optional[int]) -> List[Sentence]:
        prefixes = SCHEMES[self.scheme]
        if self.format == "conll":
            return chunking.read_sentences(path, max_examples, self.tag_column, prefixes)
        sentences = []
        for line, cells in read_rows(path, Layout("jsonl"), {"tokens": self.tokens_key, "tags": self.tags_key},
                                     max_examples):
            words, tags = json_words(cells["tokens"], path, line, self.tokens_key), cells["tags"]
            if not isinstance(tags, list):
                raise InputError(f"{path}:{line}: {self.tags_key!r} must be a JSON list of tags")
            if not words:
                raise InputError(f"{path}:{line}: an empty sentence (no tokens)")
            if len(words) != len(tags):
                raise InputError(f"{path}:{line}: {len(words)} tokens but {len(tags)} tags")
            for tag in tags:
                if not chunking.valid_tag(tag, prefixes):
                    raise InputError(f"{path}:{line}: tag {tag!r} is not O or "
                                     f"{'/'.join(p + '-' for p in prefixes)}<type> ({self.scheme})")
            sentences.append(Sentence(len(sentences), words, tuple(tags), f"{path}:{line}"))
        return sentences

    def read(self, config, split: str, max_examples: Optional[int]) -> List[Sentence]:
        """Train and dev sentences with their tags; the test file's words alone (its tags, if any,
        are not read): they are to be predicted."""
        if self.paths.get(split) is None:
            raise InputError(f"task {self.name}: no {split} file in its spec")
        if split == "test":
            try:
                self.path(split).open("rb").close()
            except OSError as error:
                raise InputError(f"{self.path(split)}: cannot read it ({error.strerror})") from None
            # blank lines and empty sentences are left out, as train's and dev's blank lines are
            source = InputSource.open(str(self.path(split)), self.format, skip_empty=True)
            sentences = [dataclasses.replace(sentence, row_id=row_id)
                         for row_id, sentence in itertools.islice(self.read_inputs(source), max_examples)]
        else:
            sentences = self._sentences(self.path(split), max_examples)
        if not sentences:
            raise InputError(f"{self.path(split)}: holds no sentences")
        return sentences

    @property
    def tags(self) -> List[str]:
        """The head's classes: the BIOES tags of the train and dev files, sorted (the original's
        mapping); an entity type the train file never has is an error naming the file and line."""
        if self._tags is None:
            splits = {split: self._sentences(self.path(split), None) for split in ("train", "dev")}
            types = {tag[2:] for s in splits["train"] for tag in s.tags if tag != "O"}
            for split, sentences in splits.items():
                for sentence in sentences:
                    unknown = {tag[2:] for tag in sentence.tags if tag != "O"} - types
                    if unknown:
                        raise InputError(f"{sentence.source}: entity type {sorted(unknown)[0]!r}, which the "
                                         f"train file ({self.path('train')}) never has")
            self._tags = list(chunking.label_mapping(*splits.values()))
        return self._tags

    @property
    def mapping(self) -> Dict[str, int]:
        return {tag: i for i, tag in enumerate(self.tags)}

    # Whether every word is lower-cased and accent-stripped before WordPiece whatever the model's
    # casing (the original's chunking, `chunk`); else the tokenizer normalises it as the model was trained.
    uncased_words = False

    def featurize(self, examples, tokenizer, config, task_id: int, split: str) -> TaggingFeatures:
        return chunking.featurize(examples, tokenizer, config.max_seq_length, self.mapping, task_id,
                                  self.uncased_words)

    def make_batch(self, features, indices, pad_to=None) -> dict:
        return chunking.tagging_batch(features, indices, pad_to)

    def make_head(self, config, hidden_size: int) -> TaggingHead:
        return TaggingHead(self.name, len(self.tags), hidden_size)

    def gather(self, columns):
        return columns[None]  # [array of tag ids (one per kept word)] per sentence

    def score(self, config, split: EvalSplit, predictions, loss: float) -> Dict[str, float]:
        gold, guessed = chunking.tag_names(split.features, predictions, self.mapping)
        overall = chunking.chunk_f1(gold, guessed, conlleval=True)
        return {"f1": overall["f1"], **overall, **chunking.typed_f1(gold, guessed), "loss": float(loss)}  # main first

    def own_format(self, suffix: str) -> Optional[str]:
        return self.format if Path(self.paths.get("train") or "").suffix.lower() == suffix else None

    def read_inputs(self, source) -> Iterator[Tuple[RowId, TextSentence]]:
        """Plain text (a sentence a line, words split on whitespace), JSONL (the `tokens` key, an
        `id` key if present) or CoNLL (the first column; blank lines between sentences)."""
        if source.format == "jsonl":
            for line, cells in iter_rows(source.name, Layout("jsonl"), {"tokens": self.tokens_key, "id": "id"},
                                         optional=("id",), source=source.stream(), on_blank=source.empty):
                words = json_words(cells["tokens"], source.name, line, self.tokens_key)
                if not words and source.empty(line, "sentence"):
                    continue
                yield id_cell(cells.get("id"), source.name, line), TextSentence.of_words(line, words)
            return
        if source.format not in ("text", "conll"):
            raise InputError(f"{source.name}: a tagging task reads text, jsonl or conll, not {source.format}")
        words, first = [], None
        for line, text in itertools.chain(source.lines(), [(None, "")]):  # the end closes the last sentence
            if source.format == "text":
                if not text.strip() and line is not None and source.empty(line):
                    continue
                if line is not None:
                    yield None, TextSentence.of_words(line, line_words(text), text)
                continue
            fields = chunking.conll_fields(text)
            if fields and fields[0] != "-DOCSTART-":
                words, first = words + [fields[0]], first or line
            elif not fields and words:
                yield None, TextSentence.of_words(first, words)
                words, first = [], None

    def test_splits(self, config):
        return (("test", "test"),) if self.paths.get("test") is not None else ()

    def write_test(self, config, split: EvalSplit, predictions, results_dir) -> Path:
        """`results/test_predictions/<task>.jsonl`: each test sentence's words, tags and entities."""
        rows = self.prediction_rows(config, {"tag_ids": predictions}, split.examples, split.features)
        return write_test_predictions(results_dir, self.name, [s.row_id for s in split.examples], rows)

    def token_offsets(self, config, tokenizer, examples, features) -> List[np.ndarray]:
        """Each kept word's tokens, their characters in the sentence's text (clipped to the word's;
        the [UNK] of a word the tokenizer drops whole, `chunking.featurize`, spans the word)."""
        words = [chunking.uncased(w) if self.uncased_words else w for sentence in examples for w in sentence.words]
        pieces, cursor, rows = text_offsets(tokenizer, words), 0, []
        for sentence, kept in zip(examples, features.labeled_positions):
            spans = [pieces[cursor + w] if len(pieces[cursor + w]) else np.array([[0, end - start]], np.int32)
                     for w, (start, end) in enumerate(sentence.offsets[:len(kept)])]
            body = [np.minimum(span, end - start) + start for span, (start, end) in zip(spans, sentence.offsets)]
            cursor += len(sentence.words)
            rows.append(np.concatenate([EDGE, *body, EDGE]))
        return rows

    def predict_outputs(self, head, logits) -> Dict[str, tf.Tensor]:
        return {"tag_ids": tf.argmax(logits, axis=-1, output_type=tf.int32)}  # [B, W]

    def prediction_rows(self, config, fetched, examples, features) -> List[dict]:
        """The words with their tags (null past max_seq_length, where words are not tagged) and the
        entities (conlleval's rules) as type, character start and end in the text, and text."""
        rows = []
        for sentence, ids, positions in zip(examples, fetched["tag_ids"], features.labeled_positions):
            tags = [self.tags[int(i)] for i in ids[:len(positions)]]
            entities = [{"type": kind, "start": sentence.offsets[first][0], "end": sentence.offsets[last][1],
                         "text": sentence.text[sentence.offsets[first][0]:sentence.offsets[last][1]]}
                        for first, last, kind in sorted(chunking.chunks(tags))]
            rows.append({"words": list(sentence.words), "tags": tags + [None] * (len(sentence.words) - len(tags)),
                         "entities": entities})
        return rows

    def server(self, tokenizer, model, config, precision: str) -> TaggerServer:
        return TaggerServer(tokenizer, model, self, config.max_seq_length, precision,
                            self.uncased_words)

    def card(self) -> dict:
        return {"type": self.type_name, "tags": self.tags, "scheme": self.scheme, "format": self.format,
                "tag_column": self.tag_column, "tokens_key": self.tokens_key, "tags_key": self.tags_key}

