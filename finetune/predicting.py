"""Predicting with a fine-tuned model on new inputs: the library side of `predict.py`.

The input is read lazily (`finetune.predict_inputs`) in groups of 8 batches; each group is sorted
by length so that a batch pads little (dynamic padding), run through the encoder and the served
task's head, and written back in input order as JSONL, one object per input row: the row's `id`
when it has one, then the task's prediction (`Task.prediction_rows`) and, with `embeddings`, the
`[CLS]` vector and the mean over real tokens of the encoder's output. The output is written
under a temporary name and renamed into place at the end, so an interrupted run (or a full disk,
reported as one line) leaves no truncated file under the final name. Progress goes to `stream` every few seconds (rows/s, and
with a file the share read and the ETA); a closing line gives the count and throughput.
"""

import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
import tensorflow as tf

from electra_tf import disk_full
from electra_tf.checkpoints.model_dir import VOCAB_FILE
from electra_tf.checkpoints.saved_model import pooled
from electra_tf.errors import InputError
from electra_tf.progress import format_duration
from electra_tf.tokenization import Tokenizer
from finetune.multitask import batch_spec, complete
from finetune.predict_inputs import InputSource
from finetune.saved_model import load_finetuned, model_files

GROUP_BATCHES = 8  # batches read, sorted by length and predicted together
REPORT_EVERY = 5.0  # seconds between progress lines


def check_output(path: str, overwrite: bool) -> Path:
    output = Path(path)
    if output.exists() and not overwrite:
        raise InputError(f"--output {output} exists; pass --overwrite to replace it")
    if not output.parent.is_dir():
        raise InputError(f"--output {output}: no directory {output.parent}")
    return output


class Predictor:
    """A fine-tuned model's encoder and one task's head, compiled for batches of any shape."""

    def __init__(self, model_dir, task: Optional[str] = None, embeddings: bool = False, int8: bool = False):
        model, self.config, self.task = load_finetuned(model_dir, task)
        self.tokenizer = Tokenizer.of_config(model_files(model_dir) / VOCAB_FILE, self.config)
        self.task_id = self.config.task_names.index(self.task.name)
        self.encoder, self.head = model.encoder, model.head_of(self.task.name)
        self.embeddings = embeddings
        self.spec = batch_spec([self.task])
        if int8:
            self.step = self._int8_step()
        else:
            self.encoder.freeze_qkv()  # Q/K/V as one matmul, as the SavedModels serve it
            self.step = tf.function(self._step, input_signature=[self.spec], autograph=False)

    def _int8_step(self):
        """The step through LiteRT with int8 weights (`finetune.litert`): the encoder and head converted
        here, their output turned into the task's outputs as `_step` does."""
        if not self.task.reads_cls_only or self.embeddings:
            raise InputError(f"--int8 predicts with tasks whose head reads [CLS] alone (classification, "
                             f"multi-label, regression) and without --embeddings; task {self.task.name} "
                             f"{'reads every token' if not self.task.reads_cls_only else 'with --embeddings'}")
        from finetune import litert
        run = litert.interpreter(litert.convert(self.encoder, self.head, int8=True))

        def step(batch):
            output = run(**{name: np.asarray(batch[name], np.int32) for name in litert.FEATURES})["output"]
            return self.task.predict_outputs(self.head, tf.constant(output))

        return step

    def _step(self, batch):
        cls_only = self.task.reads_cls_only and not self.embeddings  # the last block computes [CLS] alone
        sequence = self.encoder.infer(batch["input_ids"], batch["input_mask"], batch["segment_ids"],
                                      cls_only=cls_only)  # [B, L, H] (padding skipped), or [B, H]
        if cls_only:
            sequence = sequence[:, tf.newaxis]
        fetched = self.task.predict_outputs(self.head, self.head(sequence, batch, training=False))
        if self.embeddings:
            fetched.update({f"{key}_embedding": value for key, value in pooled(sequence, batch["input_mask"]).items()})
            fetched["token_vectors"] = tf.cast(sequence, tf.float32)  # [B, L, H]
        return fetched

    def rows(self, items) -> list:
        """The JSON objects of a group of (id, example) items, in their order."""
        ids, examples = zip(*items)
        features = self.task.featurize(list(examples), self.tokenizer, self.config, self.task_id, "predict")
        order = np.argsort(features.lengths, kind="stable")
        fetched = {}  # key -> each feature's row (rows of a batch are padded to its own width)
        size = self.config.predict_batch_size
        for start in range(0, len(order), size):
            indices = order[start:start + size]
            out = self.step(complete(self.task.make_batch(features, indices), self.spec))
            for key, value in out.items():
                column = fetched.setdefault(key, [None] * len(order))
                for index, row in zip(indices, value.numpy()):
                    column[index] = row
        rows = self.task.prediction_rows(self.config, fetched, list(examples), features)
        if self.embeddings:
            offsets = self.task.token_offsets(self.config, self.tokenizer, list(examples), features)
            for row, feature, spans in zip(rows, self.task.example_features(features), offsets):
                row["embedding"] = {"cls": fetched["cls_embedding"][feature].tolist(),
                                    "mean": fetched["mean_embedding"][feature].tolist(),
                                    "tokens": token_rows(self.tokenizer, features, feature, spans,
                                                         fetched["token_vectors"][feature])}
        return [({"id": row_id} if row_id is not None else {}) | row for row_id, row in zip(ids, rows)]


def token_rows(tokenizer, features, feature: int, spans: np.ndarray, vectors: np.ndarray) -> list:
    """Each token of a feature: its WordPiece, segment, [start, end) characters in its text (null
    for [CLS] and [SEP]) and encoder vector."""
    return [{"token": tokenizer.vocab[int(token)], "segment": int(segment),
             "start": None if start < 0 else int(start), "end": None if end < 0 else int(end),
             "vector": vector.tolist()}
            for token, segment, (start, end), vector in zip(features.token_ids[feature], features.segment_ids[feature],
                                                            spans, vectors)]


def predict(model_dir, input_path: str, output_path: str, task: Optional[str] = None,
            input_format: Optional[str] = None, skip_empty: bool = False, overwrite: bool = False,
            embeddings: bool = False, stream=None, int8: bool = False) -> dict:
    """Writes the predictions of every input row to `output_path`; returns {"rows", "seconds", "skipped"}."""
    stream = stream or sys.stderr
    output = check_output(output_path, overwrite)
    if output.is_dir():
        raise InputError(f"--output {output} is a directory; name the file to write")
    InputSource.open(input_path, input_format)  # a bad path or format fails before the model loads
    predictor = Predictor(model_dir, task, embeddings, int8)
    source = InputSource.open(input_path, input_format, skip_empty, predictor.task)
    items = predictor.task.read_inputs(source)
    group = GROUP_BATCHES * predictor.config.predict_batch_size
    partial = output.with_name(f".{output.name}.partial-{os.getpid()}")
    start = last = time.monotonic()
    count = 0
    try:
        with disk_full.reported(lambda: f"nothing is written to {output}", output), \
                open(partial, "w", encoding="utf-8") as out:
            while True:
                chunk = list(itertools.islice(items, group))
                if not chunk:
                    break
                for row in predictor.rows(chunk):
                    out.write(json.dumps(row, ensure_ascii=False) + "\n")
                count += len(chunk)
                if time.monotonic() - last >= REPORT_EVERY:
                    last = time.monotonic()
                    print(progress_line(count, last - start, source), file=stream, flush=True)
        os.replace(partial, output)
    finally:
        source.close()
        partial.unlink(missing_ok=True)
    seconds = time.monotonic() - start
    skipped = f"; {source.skipped:,} empty line(s) skipped" if source.skipped else ""
    print(f"predicted {count:,} rows into {output} in {format_duration(seconds)} "
          f"({count / max(seconds, 1e-9):,.1f} rows/s){skipped}", file=stream, flush=True)
    return {"rows": count, "seconds": seconds, "skipped": source.skipped}


def progress_line(count: int, elapsed: float, source: InputSource) -> str:
    rate = count / max(elapsed, 1e-9)
    line = f"predict: {count:,} rows, {rate:,.1f} rows/s, elapsed {format_duration(elapsed)}"
    if source.size:
        share = min(source.position / source.size, 1.0)
        eta = elapsed * (1 - share) / share if share > 0 else float("inf")
        line += f", {100 * share:.0f}% of the input read, ETA {format_duration(eta) if eta != float('inf') else '?'}"
    return line
