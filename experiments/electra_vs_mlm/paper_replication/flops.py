"""Pretraining FLOPs as the paper counts them (its released `flops_computation.py`, re-implemented).

The paper compares objectives "at equal compute" by this accounting: a matrix multiply costs
2·m·n FLOPs, the backward pass costs as much as the forward pass (so training is 2x forward),
embedding lookups are counted as dense one-hot multiplies, and the small per-activation terms
use fixed constants (dropout 4, LayerNorm 5, GELU 8, softmax 5 per element). The MLM output
layer is charged for `output_frac` of the positions (the paper's 0.15625 = 20/128, whatever
the masking rate), the replaced-token-detection head for all of them. ELECTRA's cost is its
discriminator plus its generator (the generator counted, as the paper does).

How each objective of `electra_tf` maps onto it (our reading of the paper's §3.2):
- electra, electra_15: discriminator (binary head) + generator (MLM head);
- bert: one discriminator-sized model with the MLM head;
- replace_mlm: generator + a discriminator-sized model with the MLM head;
- all_tokens_mlm: generator + a discriminator-sized model predicting every token (output_frac 1),
  plus its copy gate, a binary head over every position (the paper's copy mechanism).
"""

import dataclasses
from typing import Optional

DROPOUT = 4
LAYER_NORM = 5
GELU = 8
SOFTMAX = 5
PAPER_OUTPUT_FRAC = 0.15625


@dataclasses.dataclass(frozen=True)
class Transformer:
    """One encoder: hidden h, layers l, sequence s, vocab v, embedding e (default h), FFN i (4h)."""

    h: int
    l: int
    s: int
    v: int
    e: Optional[int] = None
    output_frac: float = PAPER_OUTPUT_FRAC

    @property
    def emb(self) -> int:
        return self.h if self.e is None else self.e

    @property
    def heads(self) -> int:
        return max(self.h // 64, 1)

    def block(self) -> float:
        """Forward FLOPs of one transformer layer over the sequence."""
        h, s, i, heads = self.h, self.s, 4 * self.h, self.heads
        attention = (6 * h * h + 3 * h  # Q, K, V projections and biases
                     + 2 * h * s + (SOFTMAX + DROPOUT + 1) * s * heads  # scores, softmax, dropout, scale
                     + 2 * h * s  # weighted sum of the values
                     + 2 * h * h + h + DROPOUT * h + h + LAYER_NORM)  # output projection, residual, LN
        feed_forward = (2 * h * i + GELU * i + i  # intermediate, activation, bias
                        + 2 * h * i + h + DROPOUT * h + h + LAYER_NORM * h)  # output, residual, LN
        return (attention + feed_forward) * s

    def input_embedding(self) -> float:
        e, h, s = self.emb, self.h, self.s
        flops = 2 * e * self.v + 2 * e * (s + 2) + 2 * e + LAYER_NORM * e + DROPOUT * e
        if e != h:
            flops += 2 * h * e + h  # projection to the hidden size
        return flops * s

    def mlm_output(self) -> float:
        e, h = self.emb, self.h
        per_position = (2 * e * self.v + 2 * h * e + e + GELU * e + LAYER_NORM * e
                        + SOFTMAX * self.v + 2 * self.v)
        return self.output_frac * per_position * self.s

    def binary_output(self) -> float:
        h = self.h
        return (2 * h * h + h + GELU * h + 2 * h) * self.s

    def train_flops_per_example(self, discriminator: bool) -> float:
        """Forward + backward (2x forward) FLOPs for one sequence."""
        head = self.binary_output() if discriminator else self.mlm_output()
        return 2 * (self.l * self.block() + self.input_embedding() + head)


def flops_per_step(objective: str, hidden: int, layers: int, embedding: int, generator_hidden: int,
                   seq: int, vocab: int, batch: int, untied_embeddings: bool = False) -> float:
    """Training FLOPs of one step of `objective`: the generator's embeddings tied, as ELECTRA's, or
    with `untied_embeddings` its own at its width (no projection)."""
    def model(h: int, head: str, output_frac: float = PAPER_OUTPUT_FRAC, e: Optional[int] = embedding) -> float:
        return Transformer(h, layers, seq, vocab, e=e, output_frac=output_frac).train_flops_per_example(
            discriminator=head == "binary")

    generator = model(generator_hidden, "mlm", e=None if untied_embeddings else embedding)
    copy_gate = 2 * Transformer(hidden, layers, seq, vocab, e=embedding).binary_output()  # forward + backward
    per_example = {
        "electra": model(hidden, "binary") + generator,
        "electra_15": model(hidden, "binary") + generator,
        "bert": model(hidden, "mlm"),
        "replace_mlm": model(hidden, "mlm") + generator,
        "all_tokens_mlm": model(hidden, "mlm", output_frac=1.0) + generator + copy_gate,
    }[objective]
    return per_example * batch
