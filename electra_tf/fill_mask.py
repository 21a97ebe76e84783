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

import numpy as np
import tensorflow as tf

from electra_tf import atomic_files
from electra_tf.checkpoints import read_pretrained
from electra_tf.checkpoints.report import assign_weights
from electra_tf.errors import InputError
from electra_tf.pretraining import build_network
from electra_tf.tokenization import Tokenizer

MASK = "[MASK]"
GENERATOR_HEAD = "generator_predictions/output_bias"  # present wherever a generator's MLM head is


class FillMask:
    """`FillMask(source)(texts, top_k)` → per text, per [MASK] in order: its token position and
    the top_k candidates {token_id, token, probability}."""

    def __init__(self, source):
        weights = read_pretrained(source)
        if GENERATOR_HEAD not in weights.values:
            raise InputError(f"{source}: no generator (MLM head) to fill masks with; a discriminator "
                             "alone ranks no tokens")
        if weights.config.uniform_generator:
            raise InputError(f"{source}: trained with uniform_generator, so its generator's weights were never "
                             "trained: there is nothing to rank tokens with")
        if weights.vocab_file is None:
            raise InputError(f"{source}: no vocab.txt beside the weights")
        self.config = weights.config
        self.network = build_network(self.config)
        assign_weights(self.network.generator.variables + self.network.generator_head.variables, weights.values)
        self.tokenizer = Tokenizer(weights.vocab_file, do_lower_case=self.config.do_lower_case)

    def encode(self, texts: Sequence[str], where: Optional[Callable[[int], str]] = None) -> List[List[int]]:
        """[CLS] pieces of each text, the mask id where it says [MASK], [SEP]; InputError, naming
        `where(index)` (default "text N"), for a text with no [MASK] or longer than max_seq_length
        tokens (never cut: a cut could drop a mask)."""
        where = where or (lambda index: f"text {index + 1}")
        rows = []
        for index, text in enumerate(texts):
            pieces = text.split(MASK)
            if len(pieces) == 1:
                raise InputError(f"{where(index)}: no {MASK} in {text[:60]!r}")
            ids = [self.tokenizer.cls_id]
            for number, part in enumerate(self.tokenizer.tokenize(tf.constant(pieces)).to_list()):
                ids += ([self.tokenizer.mask_id] if number else []) + part
            ids.append(self.tokenizer.sep_id)
            if len(ids) > self.config.max_seq_length:
                raise InputError(f"{where(index)}: {len(ids)} tokens with [CLS] and [SEP], over "
                                 f"max_seq_length {self.config.max_seq_length}")
            rows.append(ids)
        return rows

    def __call__(self, texts: Sequence[str], top_k: int = 5,
                 where: Optional[Callable[[int], str]] = None) -> List[List[dict]]:
        if top_k < 1:
            raise InputError(f"top_k {top_k} must be at least 1")
        rows = self.encode(texts, where)
        length = max(map(len, rows))
        input_ids = np.full([len(rows), length], self.tokenizer.pad_id, np.int32)  # [B, L]
        input_mask = np.zeros([len(rows), length], np.int32)  # [B, L]
        for row, ids in enumerate(rows):
            input_ids[row, :len(ids)], input_mask[row, :len(ids)] = ids, 1
        masked = [np.flatnonzero(input_ids[row] == self.tokenizer.mask_id) for row in range(len(rows))]
        positions = np.zeros([len(rows), max(map(len, masked))], np.int32)  # [B, N]
        for row, found in enumerate(masked):
            positions[row, :len(found)] = found
        logits = self.network.generator_logits(input_ids, input_mask, np.zeros_like(input_ids),
                                               positions=positions)  # [B, N, V]
        best = tf.math.top_k(tf.nn.softmax(tf.cast(logits, tf.float32)), k=min(top_k, self.tokenizer.vocab_size))
        scores, ids = best.values.numpy(), best.indices.numpy()  # [B, N, k]
        vocab = self.tokenizer.vocab
        return [[{"position": int(position), "candidates": [
                    {"token_id": int(token), "token": vocab[token], "probability": float(score)}
                    for token, score in zip(ids[row, slot], scores[row, slot])]}
                 for slot, position in enumerate(found)]
                for row, found in enumerate(masked)]


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
