"""The HF peers' model dirs: a fine-tuned trial's encoder and head written as an HF
`ElectraForSequenceClassification` or `ElectraForTokenClassification` dir (the tensor names of
`convert_checkpoint.py to-hf`), so benchmarks/serving.py's HF pipelines and the ONNX Runtime peer
serve exactly the weights ours serve.

HF's sequence head is dense(H, H) -> GELU -> dense(H, C), the original's one dense(H, C): the first
dense is written as the identity plus a shift of SHIFT, where GELU is the identity in float32, and
the shift is taken back out of the second's bias, so both compute the same logits
(tests/test_benchmark_helpers.py checks the float32 fact and the logits).
"""

from pathlib import Path

import numpy as np

SHIFT = 16.0  # GELU(x + SHIFT) == x + SHIFT in float32 for x > -10


def write_hf_classifier(trial_dir: Path, out: Path) -> None:
    """The trial's encoder and head as an HF ElectraForSequenceClassification dir (see the module doc)."""
    def head_tensors(kernel, bias):  # [H, C], [C]
        hidden = kernel.shape[0]
        return {"classifier.dense.weight": np.eye(hidden, dtype=np.float32),
                "classifier.dense.bias": np.full([hidden], SHIFT, np.float32),
                "classifier.out_proj.weight": kernel.T,
                "classifier.out_proj.bias": bias - SHIFT * kernel.sum(axis=0)}
    write_hf_model(trial_dir, out, "ElectraForSequenceClassification", head_tensors, lambda task: task.labels)


def write_hf_tagger(trial_dir: Path, out: Path) -> None:
    """The trial's encoder and tagging head as an HF ElectraForTokenClassification dir. Tagging
    inputs are segment 1 (the original's), HF's token type 0: its row 0 is our row 1."""
    write_hf_model(trial_dir, out, "ElectraForTokenClassification",
                   lambda kernel, bias: {"classifier.weight": kernel.T, "classifier.bias": bias}, lambda task: task.tags,
                   segment=1)


def write_hf_model(trial_dir: Path, out: Path, architecture: str, head_tensors, labels_of, segment: int = 0) -> None:
    """The trial's encoder and head (its dense layer's kernel and bias -> `head_tensors`) as an HF
    `architecture` dir, with the task's labels (`labels_of(task)`) as id2label; HF's token type 0
    is our `segment`."""
    from electra_tf.checkpoints import hf
    from electra_tf.checkpoints.report import variable_name
    from finetune.saved_model import load_finetuned
    model, config, task = load_finetuned(trial_dir)  # not frozen for serving: its Q/K/V layers are read here
    encoder = config.encoder_config()
    values = {variable_name(v): v.numpy() for v in model.encoder.variables}
    tensors = {key: values[tf1].T if transposed else values[tf1]
               for tf1, key, transposed in hf.encoder_pairs("electra", "electra/embeddings", encoder)}
    head = model.heads[[t.name for t in model.tasks].index(task.name)]
    tensors.update(head_tensors(head.dense.kernel.numpy(), head.dense.bias.numpy()))
    types = tensors["electra.embeddings.token_type_embeddings.weight"].copy()
    types[0] = types[segment]
    tensors["electra.embeddings.token_type_embeddings.weight"] = types
    labels = labels_of(task)
    document = dict(hf.hf_config(encoder, architecture),
                    id2label={i: str(label) for i, label in enumerate(labels)},
                    label2id={str(label): i for i, label in enumerate(labels)})
    hf.write_network_dir(out, {k: np.ascontiguousarray(v, np.float32) for k, v in tensors.items()}, document,
                         trial_dir / "vocab.txt", config)
