"""Fill-mask with a pretrained generator (or an MLM-only model): for each [MASK] in a text, the
tokens its MLM head ranks highest, with their probabilities.

The source is anything `read_pretrained` reads: a model dir of ours (or one of its `ckpt-N`), an
original TF1 checkpoint, or an HF dir holding a generator (`ElectraForMaskedLM`). The literal
`[MASK]` in a text is the mask token (as in HF's fill-mask pipeline); the text around it is
tokenized as in pretraining, and the row is `[CLS] tokens [SEP]`, one segment. The scores are the
softmax of the head's logits over the whole vocab, in float32: what HF's fill-mask pipeline gives
for the same weights (tests/test_fill_mask.py).
"""

import json
from pathlib import Path
from typing import Callable, List, Optional, Sequence

import tensorflow as tf

from electra_tf import atomic_files
from electra_tf.checkpoints import read_pretrained
from electra_tf.checkpoints.report import assign_weights
from electra_tf.errors import InputError
from electra_tf.framing import framed_ids
from electra_tf.pretraining import build_network
from electra_tf.tokenization import Tokenizer

MASK = "[MASK]"
GENERATOR_HEAD = "generator_predictions/output_bias"  # present wherever a generator's MLM head is
SIGNATURE = "fill_mask"  # the signature's name in a SavedModel (electra_tf.checkpoints.saved_model)


def untrained_generator(config, values, initialised=frozenset()) -> Optional[str]:
    """Why the weights `values` of a run with `config` have no trained generator to fill masks
    with, or None when they have one. `initialised`: the names in `values` holding initial values
    (`PretrainedWeights.initialised`)."""
    if GENERATOR_HEAD not in values:
        return "no generator (MLM head) to fill masks with; a discriminator alone ranks no tokens"
    if GENERATOR_HEAD in initialised:
        return ("its generator was never trained: it was imported from weights without one (a discriminator "
                "alone), and has not been pretrained since")
    if config.uniform_generator:
        return ("trained with uniform_generator, so its generator's weights were never trained: there is "
                "nothing to rank tokens with")
    return None


class FillMaskGraph(tf.Module):
    """The generator on raw text, in one graph: `fill(text, top_k)` splits each text at the literal
    [MASK], tokenizes the pieces, joins them with the mask id as `[CLS] tokens [SEP]` (cut to
    max_seq_length) and ranks the vocab at each mask. Served as a SavedModel's `fill_mask`
    signature, and what `FillMask` runs."""

    def __init__(self, tokenizer: Tokenizer, network, max_seq_length: int):
        super().__init__(name="fill_mask")
        self.tokenizer, self.generator, self.generator_head = tokenizer, network.generator, network.generator_head
        self.max_seq_length = max_seq_length
        self.vocab = tf.constant(tokenizer.vocab)  # [V] the tokens, by id

    def encode(self, text):
        """text tf.string [B] -> (input_ids, input_mask) int32 [B, L] and lengths int32 [B], the
        tokens with [CLS] and [SEP] before the cut to max_seq_length."""
        pieces = tf.strings.split(text, sep=MASK)  # [B, (P)]: a text's parts between its masks
        tokens = self.tokenizer.tokenize(pieces.flat_values)  # [P, (T)]
        row = pieces.value_rowids()  # [P]
        is_last = tf.range(tf.size(row, out_type=row.dtype)) == tf.gather(pieces.row_limits(), row) - 1  # [P]
        mask = tf.RaggedTensor.from_row_lengths(  # [P, (0 or 1)]: the mask after every part but a text's last
            tf.fill([tf.reduce_sum(tf.cast(~is_last, tf.int32))], tf.constant(self.tokenizer.mask_id, tokens.dtype)),
            tf.cast(~is_last, row.dtype))
        joined = tf.RaggedTensor.from_row_splits(tf.concat([tokens, mask], axis=1), pieces.row_splits)  # [B, (P), (T)]
        joined = joined.merge_dims(1, 2)  # [B, (T)]
        lengths = tf.cast(joined.row_lengths(), tf.int32) + 2
        return (*framed_ids(self.tokenizer, joined, self.max_seq_length), lengths)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text"),
                                  tf.TensorSpec([], tf.int32, name="top_k")], autograph=False)
    def fill(self, text, top_k):
        """Returns input_ids, input_mask int32 [B, L]; lengths int32 [B]; mask_positions int32 [B, M]
        (each mask's place in its row, -1 past a row's masks); and at each mask the top_k (at least
        1) candidates: token_ids int32 [B, M, k] (-1 past the masks), tokens tf.string [B, M, k]
        ("" there) and probabilities float32 [B, M, k] (0 there), the softmax over the whole vocab."""
        input_ids, input_mask, lengths = self.encode(text)  # [B, L], [B, L], [B]
        columns = tf.broadcast_to(tf.range(tf.shape(input_ids)[1]), tf.shape(input_ids))  # [B, L]
        found = tf.ragged.boolean_mask(columns, tf.equal(input_ids, self.tokenizer.mask_id))  # [B, (M)]
        positions, real = found.to_tensor(0), tf.ones_like(found, tf.bool).to_tensor(False)  # [B, M]
        sequence = self.generator(input_ids, input_mask, tf.zeros_like(input_ids), training=False)  # [B, L, Hg]
        logits = tf.cast(self.generator_head(sequence, positions), tf.float32)  # [B, M, V]
        k = tf.clip_by_value(top_k, 1, self.tokenizer.vocab_size)
        best = tf.math.top_k(tf.nn.softmax(logits), k=k)  # [B, M, k]
        real_k = tf.broadcast_to(real[..., tf.newaxis], tf.shape(best.indices))  # [B, M, k]
        return {"input_ids": input_ids, "input_mask": input_mask, "lengths": lengths,
                "mask_positions": tf.where(real, positions, -1),
                "token_ids": tf.where(real_k, best.indices, -1),
                "tokens": tf.where(real_k, tf.gather(self.vocab, best.indices), ""),
                "probabilities": tf.where(real_k, best.values, 0.0)}


class FillMask:
    """`FillMask(source)(texts, top_k)` → per text, per [MASK] in order: its token position and
    the top_k candidates {token_id, token, probability}."""

    def __init__(self, source):
        weights = read_pretrained(source)
        refusal = untrained_generator(weights.config, weights.values, weights.initialised)
        if refusal:
            raise InputError(f"{source}: {refusal}")
        if weights.vocab_file is None:
            raise InputError(f"{source}: no vocab.txt beside the weights")
        self.config = weights.config
        network = build_network(self.config)
        assign_weights(network.generator.variables + network.generator_head.variables, weights.values)
        self.tokenizer = Tokenizer.of_config(weights.vocab_file, self.config)
        self.graph = FillMaskGraph(self.tokenizer, network, self.config.max_seq_length)

    def __call__(self, texts: Sequence[str], top_k: int = 5,
                 where: Optional[Callable[[int], str]] = None) -> List[List[dict]]:
        """InputError, naming `where(index)` (default "text N"), for a text with no [MASK] or longer
        than max_seq_length tokens (never cut here: a cut could drop a mask)."""
        if top_k < 1:
            raise InputError(f"top_k {top_k} must be at least 1")
        where = where or (lambda index: f"text {index + 1}")
        for index, text in enumerate(texts):
            if MASK not in text:
                raise InputError(f"{where(index)}: no {MASK} in {text[:60]!r}")
        out = {name: value.numpy() for name, value in self.graph.fill(tf.constant(list(texts), tf.string),
                                                                      tf.constant(top_k, tf.int32)).items()}
        for index in range(len(texts)):
            if out["lengths"][index] > self.config.max_seq_length:
                raise InputError(f"{where(index)}: {out['lengths'][index]} tokens with [CLS] and [SEP], over "
                                 f"max_seq_length {self.config.max_seq_length}")
        return [[{"position": int(position), "candidates": [
                    {"token_id": int(token), "token": word.decode(), "probability": float(score)}
                    for token, word, score in zip(out["token_ids"][row, slot], out["tokens"][row, slot],
                                                  out["probabilities"][row, slot])]}
                 for slot, position in enumerate(positions) if position >= 0]
                for row, positions in enumerate(out["mask_positions"])]


def fill_file(source, input_path: str, output_path: str, top_k: int = 5, overwrite: bool = False,
              batch_size: int = 32) -> int:
    """A text a line of `input_path` (`-`: standard input) → a JSON line each in `output_path`
    ({text, masks}), written whole once every line is done; returns the lines written. An error
    names the file and line, and leaves no output."""
    import sys
    output = Path(output_path)
    if output.exists() and not overwrite:
        raise InputError(f"{output} exists (give --overwrite to replace it)")
    name = "standard input" if input_path == "-" else input_path
    try:
        lines = (sys.stdin.read() if input_path == "-" else Path(input_path).read_text(encoding="utf-8")).splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{name}: cannot read it ({error})") from None
    if not lines:
        raise InputError(f"{name}: no lines to fill")
    model, written = FillMask(source), []
    for start in range(0, len(lines), batch_size):
        texts = lines[start:start + batch_size]
        filled = model(texts, top_k, where=lambda index: f"{name}: line {start + index + 1}")
        written += [json.dumps({"text": text, "masks": masks}) + "\n" for text, masks in zip(texts, filled)]
    atomic_files.write_text(output, "".join(written))
    return len(written)
