"""Shared by the checkpoint-interop tests: spec-named original checkpoints, random weights, GLUE text,
and what a served SavedModel computes in."""

import csv
import inspect
import textwrap
from pathlib import Path

import numpy as np
import tensorflow as tf


def encoder_shapes(scope, hidden, ffn, layers, emb_width, vocab, own_embeddings, positions=512):
    """The original's variable names and shapes of one encoder (docs/fidelity.md#checkpoint-names), written out."""
    shapes = {}
    if own_embeddings:
        shapes.update({f"{scope}/embeddings/word_embeddings": (vocab, emb_width),
                       f"{scope}/embeddings/token_type_embeddings": (2, emb_width),
                       f"{scope}/embeddings/position_embeddings": (positions, emb_width),
                       f"{scope}/embeddings/LayerNorm/gamma": (emb_width,),
                       f"{scope}/embeddings/LayerNorm/beta": (emb_width,)})
    if emb_width != hidden:
        shapes.update({f"{scope}/embeddings_project/kernel": (emb_width, hidden),
                       f"{scope}/embeddings_project/bias": (hidden,)})
    for i in range(layers):
        layer = f"{scope}/encoder/layer_{i}"
        for part, (n_in, n_out) in {"attention/self/query": (hidden, hidden), "attention/self/key": (hidden, hidden),
                                    "attention/self/value": (hidden, hidden),
                                    "attention/output/dense": (hidden, hidden),
                                    "intermediate/dense": (hidden, ffn), "output/dense": (ffn, hidden)}.items():
            shapes.update({f"{layer}/{part}/kernel": (n_in, n_out), f"{layer}/{part}/bias": (n_out,)})
        for norm in ("attention/output/LayerNorm", "output/LayerNorm"):
            shapes.update({f"{layer}/{norm}/gamma": (hidden,), f"{layer}/{norm}/beta": (hidden,)})
    return shapes


def electra_shapes(vocab, emb, hidden, layers, gen_hidden, gen_layers):
    """Discriminator, generator (sharing electra/embeddings) and both heads, as the original names them."""
    shapes = encoder_shapes("electra", hidden, 4 * hidden, layers, emb, vocab, True)
    shapes.update(encoder_shapes("generator", gen_hidden, 4 * gen_hidden, gen_layers, emb, vocab, False))
    shapes.update({"discriminator_predictions/dense/kernel": (hidden, hidden),
                   "discriminator_predictions/dense/bias": (hidden,),
                   "discriminator_predictions/dense_1/kernel": (hidden, 1),
                   "discriminator_predictions/dense_1/bias": (1,),
                   "generator_predictions/dense/kernel": (gen_hidden, emb),
                   "generator_predictions/dense/bias": (emb,),
                   "generator_predictions/LayerNorm/gamma": (emb,),
                   "generator_predictions/LayerNorm/beta": (emb,),
                   "generator_predictions/output_bias": (vocab,)})
    return shapes


def original_values(shapes, seed, step=1234, slots=True):
    """Random values for every variable, its adam_m / adam_v slots and global_step."""
    rng = np.random.default_rng(seed)
    values = {}
    for name, shape in shapes.items():
        base = 1.0 if name.endswith("gamma") else 0.0
        values[name] = (base + 0.05 * rng.standard_normal(shape)).astype(np.float32)
        if slots:
            values[f"{name}/adam_m"] = (1e-3 * rng.standard_normal(shape)).astype(np.float32)
            values[f"{name}/adam_v"] = (1e-6 * rng.random(shape)).astype(np.float32)
    values["global_step"] = np.asarray(step, np.int64)
    return values


def save_tf1(values, directory, step):
    """Writes a TF1 checkpoint as the original's Saver would: raw SaveV2 + the `checkpoint` file."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    names = sorted(values)
    tf.raw_ops.SaveV2(prefix=str(directory / f"model.ckpt-{step}"), tensor_names=names,
                      shape_and_slices=[""] * len(names), tensors=[tf.constant(values[n]) for n in names])
    (directory / "checkpoint").write_text(f'model_checkpoint_path: "model.ckpt-{step}"\n')
    return str(directory / f"model.ckpt-{step}")


def randomize(variables, seed):
    """Every variable random (LayerNorm gammas around 1), so no weight can pass unnoticed as a default."""
    rng = np.random.default_rng(seed)
    for variable in variables:
        shape = variable.shape.as_list()
        base = 1.0 if variable.name.split(":")[0].endswith("gamma") else 0.0
        variable.assign((base + 0.05 * rng.standard_normal(shape)).astype(np.float32))


def mrpc_pairs(shared_data, count):
    """The first `count` sentence pairs of MRPC dev."""
    with open(Path(shared_data) / "glue" / "MRPC" / "dev.tsv", encoding="utf-8-sig") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:count + 1]
    return [(row[3], row[4]) for row in rows]


def encode_pairs(tokenizer, pairs, max_length=64):
    """[CLS] a [SEP] b [SEP] ids, input mask and segment ids, int32 [B, L], zero-padded."""
    flat, splits = tokenizer.tokenize_batch([text for pair in pairs for text in pair])
    pieces = [[int(t) for t in flat[splits[i]:splits[i + 1]]] for i in range(len(splits) - 1)]
    half = (max_length - 3) // 2
    rows = []
    for ids_a, ids_b in zip(pieces[0::2], pieces[1::2]):
        ids_a, ids_b = ids_a[:half], ids_b[:half]
        ids = [tokenizer.cls_id] + ids_a + [tokenizer.sep_id] + ids_b + [tokenizer.sep_id]
        rows.append((ids, [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)))
    length = max(len(ids) for ids, _ in rows)
    input_ids = np.zeros([len(rows), length], np.int32)
    segment_ids, input_mask = np.zeros_like(input_ids), np.zeros_like(input_ids)
    for i, (ids, segments) in enumerate(rows):
        input_ids[i, :len(ids)], segment_ids[i, :len(ids)], input_mask[i, :len(ids)] = ids, segments, 1
    return input_ids, input_mask, segment_ids


def graph_nodes(graph_def) -> list:
    """The nodes of a GraphDef and of every function in its library."""
    return list(graph_def.node) + [node for function in graph_def.library.function for node in function.node_def]


def matmul_dtypes(graph_def) -> dict:
    """{node name: dtype name} of every (batch) matmul of a GraphDef and the functions it calls."""
    return {node.name: tf.dtypes.as_dtype(node.attr["T"].type).name for node in graph_nodes(graph_def)
            if node.op in ("MatMul", "BatchMatMulV2")}


# Pasted into the fresh-process scripts of the SavedModel tests (which import tensorflow as tf).
SERVED_PRECISION = "\n" + "\n\n".join(inspect.getsource(f) for f in (graph_nodes, matmul_dtypes)) + textwrap.dedent('''

    def served_precision(loaded, serving):
        """{"precision": the export's record, "matmuls": matmul_dtypes of its serving graph}."""
        return {"precision": loaded.precision.numpy().decode(), "matmuls": matmul_dtypes(serving.graph.as_graph_def())}
''')


def assert_computes_in(facts: dict, precision: str) -> None:
    """`served_precision`'s facts of an export in `precision`: its record, and every matmul in bfloat16
    under mixed_bfloat16 but the embeddings' token-type one (their sum stays float32 by design)."""
    assert facts["precision"] == precision
    compute = "bfloat16" if precision == "mixed_bfloat16" else "float32"
    expected = {name: "float32" if name.startswith("embeddings/") else compute for name in facts["matmuls"]}
    assert len(expected) > 8 and facts["matmuls"] == expected, facts["matmuls"]
