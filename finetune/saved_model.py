"""A SavedModel of a fine-tuned GLUE model that reads raw text: tokenization runs inside the graph.

Its `serving_default` takes `text_a` (tf.string [B]) and, for a pair task, `text_b` (tf.string
[B]); the examples are featurized as `finetune.inputs.featurize` does ([CLS] a [SEP] b [SEP],
segment 0 up to the first [SEP], BERT's longest-first truncation to max_seq_length) and it returns
    classification: probabilities float32 [B, num_labels] (softmax, in the task's label order)
                    label         tf.string [B]  the most probable label as the GLUE server writes it
    STS-B:          score         float32 [B]    5 x the normalised output (the 0-5 scale), not
                                                 clipped to it as the GLUE server file is
Loading it needs `import tensorflow_text` first (its WordPiece op). As the discriminator's, it
computes in float32 or, exported with `precision` "mixed_bfloat16", in bfloat16 with float32
outputs, and says which in its `precision` variable (`electra_tf.checkpoints.saved_model`).

The source is a trial's model dir, `finetuning_models/<tasks>_model_<trial>`: its `finetuned`
checkpoint, the run's `finetuning_config.json` and `vocab.txt` (all written by the runner). A
multi-task run holds a head per task; one of them is exported (`task`).
"""

from pathlib import Path
from typing import Optional

import tensorflow as tf
import tensorflow_text as tf_text

from electra_tf.checkpoints.model_dir import VOCAB_FILE, check_output, check_vocab, staged_output
from electra_tf.checkpoints.saved_model import SIGNATURE, check_precision, encode, precision_record
from electra_tf.errors import InputError
from electra_tf.tokenization import Tokenizer
from electra_tf.training.distribution import precision_scope
from finetune.config import FinetuningConfig
from finetune.glue import STS_MAX, TASKS, GlueTask, canonical_task_name, get_task
from finetune.model import FinetuningModel
from finetune.runner import FINETUNED, RUN_CONFIG


def is_finetuned_dir(path) -> bool:
    """Whether `path` holds a fine-tuned model (a trial's model dir) rather than a pretrained one."""
    return (Path(path) / f"{FINETUNED}.index").is_file()


def encode_pair(tokenizer: Tokenizer, text_a: tf.Tensor, text_b: tf.Tensor, max_seq_length: int):
    """text_a, text_b tf.string [B] -> (input_ids, input_mask, segment_ids) int32 [B, L], padded.

    `truncate_pair`'s rule, in the graph: the longer text loses its last token until both fit. tf_text's
    ShrinkLongestTrimmer cuts the *first* of two equally long segments, BERT's the second, so the
    trimmer sees (b, a). A row whose text_b has no tokens is `[CLS] a [SEP]` alone, as `featurize`'s.
    """
    tokens_a, tokens_b = tokenizer.tokenize(text_a), tokenizer.tokenize(text_b)  # [B, (Ta)], [B, (Tb)]
    pair_b, pair_a = tf_text.ShrinkLongestTrimmer(max_seq_length - 3).trim([tokens_b, tokens_a])
    pair_ids, pair_segments = tf_text.combine_segments([pair_a, pair_b], tokenizer.cls_id, tokenizer.sep_id)
    single_ids, single_segments = tf_text.combine_segments([tokens_a[:, :max_seq_length - 2]], tokenizer.cls_id,
                                                           tokenizer.sep_id)
    rows = tf.range(tokens_a.nrows())
    pick = tf.where(tokens_b.row_lengths() > 0, rows, rows + tokens_a.nrows())  # [B]: pair row, else single row
    ids = tf.cast(tf.gather(tf.concat([pair_ids, single_ids], axis=0), pick), tf.int32)  # [B, (L)]
    segments = tf.gather(tf.concat([pair_segments, single_segments], axis=0), pick)
    return ids.to_tensor(tokenizer.pad_id), tf.ones_like(ids).to_tensor(0), tf.cast(segments, tf.int32).to_tensor(0)


class GlueServer(tf.Module):
    """Tokenizer + fine-tuned encoder + one task's head, served on raw strings."""

    def __init__(self, tokenizer: Tokenizer, model: FinetuningModel, task: GlueTask, max_seq_length: int,
                 precision: str = "float32"):
        super().__init__(name=f"electra_{task.name}")
        self.tokenizer, self.encoder = tokenizer, model.encoder
        self.head = model.heads[[t.name for t in model.tasks].index(task.name)]
        self.task, self.max_seq_length = task, max_seq_length
        self.precision = precision_record(precision)
        text = tf.TensorSpec([None], tf.string, name="text_a")
        if task.train.text_b is not None:  # a pair task
            self.serve = tf.function(self._serve_pair, input_signature=[
                text, tf.TensorSpec([None], tf.string, name="text_b")])
        else:
            self.serve = tf.function(self._serve_single, input_signature=[text])

    def _serve_single(self, text_a):
        input_ids, input_mask = encode(self.tokenizer, text_a, self.max_seq_length)  # [B, L]
        return self._outputs(input_ids, input_mask, tf.zeros_like(input_ids))

    def _serve_pair(self, text_a, text_b):
        return self._outputs(*encode_pair(self.tokenizer, text_a, text_b, self.max_seq_length))

    def _outputs(self, input_ids, input_mask, segment_ids):
        cls = self.encoder.call_unpadded(input_ids, input_mask, segment_ids, cls_only=True)  # [B, H]
        output = self.head(cls[:, tf.newaxis], training=False)  # [B, C]; [B, 1] for regression
        if self.task.is_regression:
            return {"score": output[:, 0] * STS_MAX}
        labels = tf.constant(self.task.labels)
        return {"probabilities": tf.nn.softmax(output, axis=-1),
                "label": tf.gather(labels, tf.argmax(output, axis=-1, output_type=tf.int32))}


def read_run_config(model_dir: Path) -> FinetuningConfig:
    path = model_dir / RUN_CONFIG
    if not path.is_file():
        raise InputError(f"{path} is missing: export a trial dir written by run_finetuning.py with "
                         f"keep_all_models true (finetuning_models/<tasks>_model_<trial>)")
    return FinetuningConfig.from_json_file(path)


def choose_task(config: FinetuningConfig, task: Optional[str], model_dir: Path) -> GlueTask:
    """The task to serve: `task`, which the run must have trained, or the run's only task."""
    if task is None:
        if len(config.task_names) > 1:
            raise InputError(f"{model_dir} holds the tasks {', '.join(config.task_names)}: pass --task to "
                             f"choose the one to export")
        task = config.task_names[0]
    name = canonical_task_name(task)
    if name not in config.task_names:
        raise InputError(f"--task {task}: {model_dir} was fine-tuned on {', '.join(config.task_names)} only")
    if name not in TASKS:
        raise InputError(f"--task {task}: only GLUE tasks can be exported as a SavedModel")
    return get_task(name)


def load_finetuned(model_dir, task: Optional[str] = None, precision: str = "float32"):
    """(FinetuningModel with a trial's fine-tuned weights, its run's FinetuningConfig, the GlueTask
    to serve), the model's layers computing in `precision`."""
    check_precision(precision)
    model_dir = Path(model_dir)
    if not is_finetuned_dir(model_dir):
        raise InputError(f"{model_dir} holds no fine-tuned model ({FINETUNED}.index); a trial's model dir "
                         f"is finetuning_models/<tasks>_model_<trial>, kept when keep_all_models is true")
    config = read_run_config(model_dir)
    served = choose_task(config, task, model_dir)
    check_vocab(model_dir / VOCAB_FILE, config.vocab_size)
    with precision_scope(precision):  # the layers keep it; their variables are float32 either way
        model = FinetuningModel(config.encoder_config(), [get_task(name) for name in config.task_names], config)
    model({"input_ids": tf.ones([1, 3], tf.int32), "input_mask": tf.ones([1, 3], tf.int32),
           "segment_ids": tf.zeros([1, 3], tf.int32)})  # creates the variables the checkpoint restores
    try:
        tf.train.Checkpoint(finetuning_model=model).read(str(model_dir / FINETUNED)).assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as error:
        raise InputError(f"checkpoint {model_dir / FINETUNED} does not match {model_dir / RUN_CONFIG}: "
                         f"{str(error).splitlines()[0]}") from None
    return model, config, served


def build_server(model_dir, task: Optional[str] = None, precision: str = "float32") -> GlueServer:
    """The GlueServer of a trial's model dir, its fine-tuned weights restored, computing in `precision`."""
    model, config, served = load_finetuned(model_dir, task, precision)
    model.encoder.freeze_qkv()
    tokenizer = Tokenizer(Path(model_dir) / VOCAB_FILE, do_lower_case=config.do_lower_case)
    return GlueServer(tokenizer, model, served, config.max_seq_length, precision)


def export_finetuned(model_dir, output_dir, task: Optional[str] = None, overwrite: bool = False,
                     precision: str = "float32") -> GlueServer:
    """Writes a trial's fine-tuned model (for `task`) as a SavedModel computing in `precision`; returns
    the server it saved."""
    check_precision(precision)  # before reading the checkpoint
    check_output(output_dir, overwrite)
    server = build_server(model_dir, task, precision)
    with staged_output(output_dir, overwrite) as staging:
        tf.saved_model.save(server, str(staging), signatures={SIGNATURE: server.serve})
    return server
