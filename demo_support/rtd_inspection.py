"""Looking inside replaced token detection: what the generator swapped in, what the discriminator saw.

`replaced_token_table` runs one pretraining forward pass (dropout off) on a single example and
lays it out token by token: the original token, the generator's replacement where one was made,
and the discriminator's probability that the token it read is replaced.
"""

from typing import Dict

import tensorflow as tf


def replaced_token_table(model, vocab, features: Dict[str, tf.Tensor], seed=(7, 7)) -> str:
    """features: {input_ids, input_mask, segment_ids} [1, L] of one example; `model` a
    `PretrainingModel` with the electra objective; `vocab` the id -> token list."""
    output = model(features, training=False, seed=tf.constant(seed))
    length = int(tf.reduce_sum(features["input_mask"]))
    original = features["input_ids"][0, :length].numpy()
    fake = output.fake.fake_input_ids[0, :length].numpy()
    selected = output.fake.selected[0, :length].numpy()
    probability = output.rtd.probs[0, :length].numpy()
    rows = [f"{'pos':>4}  {'token read by the discriminator':<32} {'P(replaced)':>11}"]
    for position in range(length):
        token = vocab[fake[position]]
        if fake[position] != original[position]:
            token = f"{token}  (was {vocab[original[position]]})"
        elif selected[position]:
            token = f"{token}  (sampled = original)"
        flag = "  <- replaced" if fake[position] != original[position] else ""
        rows.append(f"{position:>4}  {token:<32} {probability[position]:>11.2f}{flag}")
    replaced = fake != original
    caught = (probability > 0.5) == replaced
    rows.append(f"{int(replaced.sum())} of {length} tokens replaced; the discriminator labels "
                f"{int(caught.sum())} of {length} correctly at threshold 0.5 (calling every token "
                f"original would label {length - int(replaced.sum())})")
    return "\n".join(rows)
