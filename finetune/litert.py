"""A fine-tuned sentence-level task (classification, multi-label, regression) as a LiteRT (TFLite)
model run by ai_edge_litert's interpreter.

What it is for: online serving, a few sentences per request. TensorFlow's executor runs a batch-1
request as some 340 small oneDNN GEMMs (M = the sentence's 10-40 tokens) plus a few hundred other
ops; the LiteRT interpreter (XNNPACK) runs the same graph with far less per-op cost (figures in
benchmarks/RESULTS.md). Optionally (`int8`) with dynamic-range quantization: int8 weights, the
activations quantized per call, about a quarter of the file; its accuracy cost is measured in
tests/test_litert.py and docs/finetuning.md.

`export(model_dir, output_dir, int8)` writes, from a trial's model dir,
    model.tflite     input_ids, input_mask, segment_ids int32 [B, L] -> what predicting fetches
                     (`Task.lite_outputs`: probabilities float32 [B, C] or [B, K], or score [B]):
                     the encoder on the real tokens alone (`Encoder.call_unpadded`, as the served
                     SavedModel), computing `[CLS]` alone in the last block, the task's head and
                     its softmax, sigmoids or scale; float32, or with `int8` dynamic-range quantized.
                     Two signatures (`convert`): any batch, and one sentence, which XNNPACK runs
                     nearly whole
    litert.json      the task's name and type and whether the weights are int8
    the run's finetuning_config.json, task_cards.json, vocab.txt and served_task, as a SavedModel's
                     assets.extra/ (`finetune.saved_model.copy_model_files`)
and `LiteServer(output_dir)` serves it: raw texts in, the SavedModel's `serving_default` outputs out
(a classifier's {"probabilities", "label"}, a multi-label task's {"probabilities", "labels"}, a
regression's {"score"}; the label names added in Python by `Task.lite_served`). It featurizes in
Python as `predict.py` does (the task's own featurizing, equal to the SavedModel's in-graph one): a
TensorFlow signature call for the tokenizer alone cost about 2 ms of a 10 ms batch-1 request. Tasks
whose head reads `[CLS]` alone: a tagger or a SQuAD model reads every token (export those as
SavedModels).
`predict.py --int8` runs the same conversion in memory (`convert`, `interpreter`) for any task whose
head reads `[CLS]` alone (`finetune.predicting`).
"""

import json
from pathlib import Path

import numpy as np
import tensorflow as tf

from electra_tf import cpu_kernels
from electra_tf.checkpoints.model_dir import VOCAB_FILE, check_output, staged_output
from electra_tf.errors import InputError
from electra_tf.modeling.layer_utils import converter_gelu
from electra_tf.tokenization import Tokenizer
from finetune.glue import Example
from finetune.saved_model import build_server, copy_model_files, read_served

MODEL_FILE, CARD_FILE = "model.tflite", "litert.json"
FEATURES = ("input_ids", "input_mask", "segment_ids")
BATCH_SIGNATURE, ONE_SIGNATURE = "serving_default", "one_sentence"


def convert(encoder, head, int8: bool, outputs=lambda output: {"output": output}) -> bytes:
    """A TFLite flatbuffer: (input_ids, input_mask, segment_ids) int32 [B, L] -> `outputs` of the
    head's output on the encoder's `[CLS]` vector (by default {"output": it}, float32 [B, units]).

    Two signatures of the same weights: `serving_default` for any batch, skipping the padding
    (`Encoder.call_unpadded`), and `one_sentence` for [1, L], which has no padding to skip: with the
    batch size static its reshapes are constant, so XNNPACK runs the blocks whole (3 delegate
    partitions against 39: it runs neither the gathers that skip padding nor reshapes to computed
    shapes), about 1 ms less of a 10 ms request. `interpreter` picks one per call.
    """
    def serving_default(input_ids, input_mask, segment_ids):
        cls = encoder.call_unpadded(input_ids, input_mask, segment_ids, cls_only=True)  # [B, H], padding skipped
        return outputs(head(cls[:, tf.newaxis], training=False))

    def one_sentence(input_ids, input_mask, segment_ids):
        cls = encoder(input_ids, input_mask, segment_ids, training=False, cls_only=True)  # [1, H]
        return outputs(head(cls[:, tf.newaxis], training=False))

    with cpu_kernels.disabled(), converter_gelu():  # TensorFlow's own ops, which the converter knows
        functions = [tf.function(served, input_signature=[tf.TensorSpec([batch, None], tf.int32, name=name)
                                                          for name in FEATURES], autograph=False).get_concrete_function()
                     for served, batch in ((serving_default, None), (one_sentence, 1))]
        holder = tf.Module()  # the converter reads the variables through it
        holder.encoder, holder.head = encoder, head
        converter = tf.lite.TFLiteConverter.from_concrete_functions(functions, holder)
        if int8:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]  # dynamic range: int8 weights
        return converter.convert()


def interpreter(flatbuffer: bytes, threads: int = 2, source: str = "the model"):
    """run(input_ids=, input_mask=, segment_ids=) -> {name: numpy array}: `flatbuffer` (from `convert`)
    in ai_edge_litert's interpreter, one sentence through its `one_sentence` signature."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        raise InputError("LiteRT's interpreter is not installed: pip install 'ai-edge-litert~=2.3' "
                         "(this package's [litert] extra)") from None
    loaded = Interpreter(model_content=flatbuffer, num_threads=threads)
    if set(loaded.get_signature_list()) != {BATCH_SIGNATURE, ONE_SIGNATURE}:
        raise InputError(f"{source} has signatures {sorted(loaded.get_signature_list())}, not "
                         f"{BATCH_SIGNATURE} and {ONE_SIGNATURE}: export it again with convert_checkpoint.py litert")
    batch, one = loaded.get_signature_runner(BATCH_SIGNATURE), loaded.get_signature_runner(ONE_SIGNATURE)

    def run(**features):
        return (one if len(features["input_ids"]) == 1 else batch)(**features)

    return run


def export(model_dir, output_dir, int8: bool = False, task=None, overwrite: bool = False) -> dict:
    """Writes a trial's fine-tuned task (`task`, or its only one) as a LiteRT model dir; returns its card."""
    check_output(output_dir, overwrite)
    server = build_server(model_dir, task)
    flatbuffer = convert(server.encoder, server.head, int8, server.task.lite_outputs())  # e.g. probabilities [B, C]
    card = {"task": server.task.name, "type": server.task.type_name, "int8": int8}
    with staged_output(output_dir, overwrite, source=model_dir) as staging:
        (Path(staging) / MODEL_FILE).write_bytes(flatbuffer)
        copy_model_files(model_dir, Path(staging), server.task.name)
        (Path(staging) / CARD_FILE).write_text(json.dumps(card, indent=2) + "\n")
    return card


class LiteServer:
    """A LiteRT export served in this process: `server(text_a[, text_b])` on lists of raw strings."""

    def __init__(self, export_dir, threads: int = 2):
        export_dir = Path(export_dir)
        if not (export_dir / CARD_FILE).is_file():
            raise InputError(f"{export_dir} is no LiteRT export ({CARD_FILE} is missing): write one with "
                             f"convert_checkpoint.py litert")
        self.config, self.task = read_served(export_dir)
        self.task_id = self.config.task_names.index(self.task.name)
        self.tokenizer = Tokenizer.of_config(export_dir / VOCAB_FILE, self.config)
        self.run = interpreter((export_dir / MODEL_FILE).read_bytes(), threads, str(export_dir / MODEL_FILE))

    def __call__(self, text_a, text_b=None) -> dict:
        if (text_b is not None) != self.task.has_pair:
            raise InputError(f"task {self.task.name} takes " + ("text pairs: give text_b" if self.task.has_pair
                                                                else "one text per example: no text_b"))
        if text_b is not None and len(text_b) != len(text_a):
            raise InputError(f"{len(text_a)} texts but {len(text_b)} second texts")
        examples = [Example(i, text, None if text_b is None else text_b[i], None) for i, text in enumerate(text_a)]
        features = self.task.featurize(examples, self.tokenizer, self.config, self.task_id, "predict")
        batch = self.task.make_batch(features, range(len(examples)))  # padded to the batch's longest
        return self.task.lite_served(self.run(**{name: np.asarray(batch[name], np.int32) for name in FEATURES}))
