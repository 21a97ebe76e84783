"""Generator sampling and the discriminator's fake input (docs/fidelity.md#sampling).

ELECTRA samples a replacement for every selected slot from the generator's softmax with the
Gumbel-max trick, puts the samples into the (unmasked) input, and labels a position "replaced"
only where the sample differs from the original token: a generator that guesses right produces
a real token.

`sample_tokens` is written here rather than taken from Model Garden's `sample_from_softmax`,
which has no temperature and samples in the logits' dtype; the original's order is kept:
logits / temperature, then - 1000 * one_hot(original) when disallowing the correct token.

The uniform generator of the original (`uniform_generator=True`) is `sample_tokens` on all-zero
logits: `tf.zeros([B, N, vocab_size])`.
"""

from typing import NamedTuple, Optional

import tensorflow as tf
from official.nlp.modeling.models.electra_pretrainer import scatter_update

from electra_tf.objectives.random_seeds import split_seed


def sample_tokens(logits: tf.Tensor, *, temperature: float = 1.0,
                  disallow_ids: Optional[tf.Tensor] = None,
                  seed: Optional[tf.Tensor] = None) -> tf.Tensor:
    """Gumbel-max samples from softmax(logits / temperature): [B, N] int32, no gradient.

    Args:
      logits: [B, N, V] generator logits, any float dtype; the sampling runs in float32 (half
        precision would round the Gumbel noise and create argmax ties).
      temperature: softmax temperature; tends to argmax as it goes to 0.
      disallow_ids: optional [B, N] ids (the originals, for `disallow_correct`): their logit is
        lowered by 1000 after the temperature, so they are (practically) never drawn.
      seed: optional [2] int seed for the stateless uniform draw.
    """
    seed = split_seed(seed, 1)[0]
    perturbed = _gumbel_perturbed(tf.cast(logits, tf.float32), seed, disallow_ids, temperature)  # [B, N, V]
    # argmax(softmax(x)) == argmax(x): the original's softmax before argmax is skipped.
    return tf.stop_gradient(tf.argmax(perturbed, axis=-1, output_type=tf.int32))


@tf.function(jit_compile=True, autograph=False)
def _gumbel_perturbed(logits, seed, disallow_ids, temperature):
    """logits / temperature (- 1000 at disallow_ids) + Gumbel(0, 1) noise, [B, N, V] float32.

    One XLA cluster: TF would make five passes over B·N·V floats (about 3 % of an ELECTRA-Small
    step on CPU), XLA fuses them into one. ThreeFry, as XLA's Philox is 3x slower on CPU.
    """
    logits = logits / temperature
    if disallow_ids is not None:
        logits = logits - 1000.0 * tf.one_hot(disallow_ids, depth=tf.shape(logits)[-1], dtype=tf.float32)
    uniform = tf.random.stateless_uniform(tf.shape(logits), seed, alg="threefry")
    return logits - tf.math.log(-tf.math.log(uniform + 1e-9) + 1e-9)


class FakeData(NamedTuple):
    """The discriminator's input and labels from `fake_data`."""

    fake_input_ids: tf.Tensor  # [B, L] int32: original ids with the samples put in
    is_replaced: tf.Tensor  # [B, L] int32: 1 where the input now differs from the original
    selected: tf.Tensor  # [B, L] int32: 1 at every position that received a sample


def fake_data(input_ids: tf.Tensor, masked_lm_positions: tf.Tensor,
              sampled_ids: tf.Tensor) -> FakeData:
    """Put the samples into ALL selected positions of the unmasked input and label them.

    Args:
      input_ids: [B, L] the ORIGINAL (unmasked) ids; the original recovers them by scattering
        masked_lm_ids back into the masked input, which gives the same tensor.
      masked_lm_positions: [B, N] positions (0 = unused slot, ignored).
      sampled_ids: [B, N] samples from `sample_tokens`.

    Samples go to every selected slot, including those the generator saw unmasked. With
    positions drawn with replacement, the original's `scatter_update` rule applies: a position
    hit twice gets the floor of the mean of its samples.
    """
    input_ids = tf.cast(input_ids, tf.int32)
    fake_ids, selected = scatter_update(input_ids, tf.cast(sampled_ids, tf.int32),
                                        masked_lm_positions)  # [B, L] each
    is_replaced = selected * tf.cast(tf.not_equal(fake_ids, input_ids), tf.int32)
    return FakeData(fake_input_ids=fake_ids, is_replaced=is_replaced, selected=selected)
