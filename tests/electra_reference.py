"""An independent ELECTRA / BERT pretraining step in PyTorch float64, written from the
original release's behaviour as docs/fidelity.md describes it (its sections cited by anchor), not from electra_tf.

Parameters are a dict {original variable name (docs/fidelity.md#checkpoint-names): float64 tensor}; the
network reads them by
those names, so the TF model's variables load 1:1 and the weight-decay rule works on the original's
names. No dropout (the parity test runs with dropout off). What the TF side draws at random (the
masked positions, each slot's [MASK]-or-keep choice and the Gumbel noise's uniform draws) comes in
as tensors; everything computed from them (masked input, weights, samples, fake input, labels,
losses, gradients, update) is computed here.
"""

import math
import re
from typing import NamedTuple

import torch

LAYER_NORM_EPSILON = 1e-12  # docs/fidelity.md#encoder (TF1 contrib layer_norm)
ATTENTION_MASK_ADDER = -10000.0  # docs/fidelity.md#encoder: (1 - mask) * -10000
ADAM_BETA_1, ADAM_BETA_2, ADAM_EPSILON = 0.9, 0.999, 1e-6  # docs/fidelity.md#optimizer-and-schedule
# docs/fidelity.md#optimizer-and-schedule: regexes searched in the variable name
NO_DECAY = ("LayerNorm", "layer_norm", "bias")


def gelu(x):
    """The exact erf GELU (docs/fidelity.md#encoder)."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def layer_norm(params, scope, x):
    mean = x.mean(-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(-1, keepdim=True)
    normalized = (x - mean) / torch.sqrt(variance + LAYER_NORM_EPSILON)
    return normalized * params[f"{scope}/gamma"] + params[f"{scope}/beta"]


def dense(params, scope, x):
    return x @ params[f"{scope}/kernel"] + params[f"{scope}/bias"]


def encoder(params, scope, num_heads, input_ids, input_mask, segment_ids):
    """BertModel (docs/fidelity.md#encoder) under `scope`, on the shared `electra/embeddings`
    (docs/fidelity.md#tying): [B, L] → [B, L, H]."""
    seq_length = input_ids.shape[1]
    x = (params["electra/embeddings/word_embeddings"][input_ids]
         + params["electra/embeddings/token_type_embeddings"][segment_ids]
         + params["electra/embeddings/position_embeddings"][:seq_length])  # [B, L, E]
    x = layer_norm(params, "electra/embeddings/LayerNorm", x)
    if f"{scope}/embeddings_project/kernel" in params:  # E != H
        x = dense(params, f"{scope}/embeddings_project", x)  # [B, L, H]
    batch, hidden = x.shape[0], x.shape[2]
    head_size = hidden // num_heads
    mask_bias = (1.0 - input_mask.to(x.dtype))[:, None, None, :] * ATTENTION_MASK_ADDER  # [B, 1, 1, L]
    layer = 0
    while f"{scope}/encoder/layer_{layer}/output/dense/kernel" in params:
        prefix = f"{scope}/encoder/layer_{layer}"

        def heads(name):  # [B, heads, L, head_size]
            y = dense(params, f"{prefix}/attention/self/{name}", x)
            return y.view(batch, seq_length, num_heads, head_size).transpose(1, 2)

        scores = heads("query") @ heads("key").transpose(-1, -2) / math.sqrt(head_size) + mask_bias
        context = torch.softmax(scores, -1) @ heads("value")  # [B, heads, L, head_size]
        context = context.transpose(1, 2).reshape(batch, seq_length, hidden)
        x = layer_norm(params, f"{prefix}/attention/output/LayerNorm",
                       dense(params, f"{prefix}/attention/output/dense", context) + x)
        inner = gelu(dense(params, f"{prefix}/intermediate/dense", x))  # [B, L, F]
        x = layer_norm(params, f"{prefix}/output/LayerNorm", dense(params, f"{prefix}/output/dense", inner) + x)
        layer += 1
    return x


def scatter_update(sequence, updates, positions):
    """docs/fidelity.md#masking: write updates [B, N] at positions [B, N] of sequence [B, L] (int), ignoring position 0;
    a position hit k times gets the floor of the mean of its k updates. Returns (new, hit [B, L])."""
    hits = torch.zeros_like(sequence)
    sums = torch.zeros_like(sequence)
    used = (positions != 0).to(sequence.dtype)
    hits.scatter_add_(1, positions, used)
    sums.scatter_add_(1, positions, updates * used)
    hit = hits > 0
    return torch.where(hit, torch.div(sums, hits.clamp(min=1), rounding_mode="floor"), sequence), hit.long()


class Draws(NamedTuple):
    """The random choices of one step, from the TF side."""

    positions: torch.Tensor  # [B, N] int64, unused slots 0
    to_mask: torch.Tensor  # [B, N] bool: the slot gets [MASK] (else it keeps its token)
    uniform: torch.Tensor  # [B, N, V] float64: the Gumbel noise's U(0, 1) draws (ELECTRA only)


class Setup(NamedTuple):
    """What the reference step needs beyond the weights (the hparams of
    docs/fidelity.md#pretraining-config and docs/fidelity.md#optimizer-and-schedule)."""

    objective: str  # "electra" or "bert"
    disc_heads: int
    gen_heads: int
    mask_id: int
    mask_prob: float
    max_predictions_per_seq: int
    learning_rate: float
    num_train_steps: int
    num_warmup_steps: int
    weight_decay_rate: float
    gen_weight: float = 1.0
    disc_weight: float = 50.0
    temperature: float = 1.0
    clip_norm: float = 1.0
    lr_decay_power: float = 1.0


def masked_lm_weights(input_mask, setup):
    """docs/fidelity.md#masking: num_to_predict = max(1, min(N, round(sum(input_mask) * mask_prob))) slots per row."""
    counts = [max(1, min(setup.max_predictions_per_seq, round(float(n) * setup.mask_prob)))
              for n in input_mask.sum(1).tolist()]  # round: half to even, as TF's
    slots = torch.arange(setup.max_predictions_per_seq)
    return (slots[None, :] < torch.tensor(counts)[:, None]).double()  # [B, N]


def forward(params, batch, draws, setup):
    """One pretraining forward pass (docs/fidelity.md, #masking to #losses): {name: tensor} of the losses
    and intermediates."""
    input_ids, input_mask, segment_ids = batch["input_ids"], batch["input_mask"], batch["segment_ids"]
    weights = masked_lm_weights(input_mask, setup)  # [B, N]
    positions = draws.positions * weights.long()
    lm_ids = torch.gather(input_ids, 1, positions) * weights.long()  # [B, N]
    masked_input, _ = scatter_update(input_ids, torch.full_like(positions, setup.mask_id),
                                     positions * draws.to_mask.long())  # keep slots point at 0
    # The generator: a separate smaller encoder for ELECTRA, the full `electra` one for BERT
    # (docs/fidelity.md#sampling).
    electra = setup.objective == "electra"
    scope, heads = ("generator", setup.gen_heads) if electra else ("electra", setup.disc_heads)
    sequence = encoder(params, scope, heads, masked_input, input_mask, segment_ids)  # [B, L, Hg]
    gathered = torch.gather(sequence, 1, positions[:, :, None].expand(-1, -1, sequence.shape[2]))
    h = layer_norm(params, "generator_predictions/LayerNorm",
                   gelu(dense(params, "generator_predictions/dense", gathered)))  # [B, N, E]
    logits = h @ params["electra/embeddings/word_embeddings"].T + params["generator_predictions/output_bias"]
    per_slot = -torch.gather(torch.log_softmax(logits, -1), 2, lm_ids[:, :, None])[:, :, 0]  # [B, N]
    mlm_loss = (weights * per_slot).sum() / (weights.sum() + 1e-6)
    out = dict(masked_lm_weights=weights, masked_lm_ids=lm_ids, masked_input_ids=masked_input,
               mlm_loss=mlm_loss, loss=setup.gen_weight * mlm_loss)
    if setup.objective == "bert":
        return out

    gumbel = -torch.log(-torch.log(draws.uniform + 1e-9) + 1e-9)  # [B, N, V]
    sampled = torch.argmax(logits.detach() / setup.temperature + gumbel, -1)  # [B, N], no gradient
    fake_ids, hit = scatter_update(input_ids, sampled, positions)  # samples at ALL selected slots
    labels = hit * (fake_ids != input_ids).long()  # a correct sample counts as real
    disc = encoder(params, "electra", setup.disc_heads, fake_ids, input_mask, segment_ids)  # [B, L, H]
    disc_logits = dense(params, "discriminator_predictions/dense_1",
                        gelu(dense(params, "discriminator_predictions/dense", disc)))[:, :, 0]  # [B, L]
    mask = input_mask.double()
    z = labels.double()
    sigmoid_xent = torch.clamp(disc_logits, min=0) - disc_logits * z + torch.log1p(torch.exp(-disc_logits.abs()))
    disc_loss = (sigmoid_xent * mask).sum() / (1e-6 + mask.sum())  # every non-pad token
    out.update(sampled_ids=sampled, fake_input_ids=fake_ids, is_replaced=labels, disc_loss=disc_loss,
               loss=setup.gen_weight * mlm_loss + setup.disc_weight * disc_loss)
    return out


def learning_rate(step, setup):
    """docs/fidelity.md#optimizer-and-schedule: linear (power 1) decay to 0 from step 0, times min(1, step / warmup)."""
    progress = min(step, setup.num_train_steps) / setup.num_train_steps
    decayed = setup.learning_rate * (1.0 - progress) ** setup.lr_decay_power
    return decayed * min(1.0, step / setup.num_warmup_steps)


def train_step(params, moments, batch, draws, step, setup):
    """docs/fidelity.md#optimizer-and-schedule: gradients of the loss, clip_by_global_norm, then
    AdamWeightDecay (no bias correction) at global step `step`. Returns (new params, new moments
    {name: (m, v)}, the forward outputs with the step's global_norm and learning_rate, the unclipped
    gradients)."""
    leaves = {name: value.detach().clone().requires_grad_(True) for name, value in params.items()}
    out = forward(leaves, batch, draws, setup)
    names = sorted(leaves)
    grads = dict(zip(names, torch.autograd.grad(out["loss"], [leaves[n] for n in names])))
    global_norm = math.sqrt(sum(float((g ** 2).sum()) for g in grads.values()))
    scale = setup.clip_norm / max(global_norm, setup.clip_norm)
    lr = learning_rate(step, setup)
    new_params, new_moments = {}, {}
    for name in names:
        g = grads[name] * scale
        m_prev, v_prev = moments.get(name, (torch.zeros_like(g), torch.zeros_like(g)))
        m = ADAM_BETA_1 * m_prev + (1.0 - ADAM_BETA_1) * g
        v = ADAM_BETA_2 * v_prev + (1.0 - ADAM_BETA_2) * g ** 2
        update = m / (torch.sqrt(v) + ADAM_EPSILON)
        if not any(re.search(pattern, name) for pattern in NO_DECAY):
            update = update + setup.weight_decay_rate * params[name]
        new_params[name] = params[name] - lr * update
        new_moments[name] = (m, v)
    out = {name: value.detach() for name, value in out.items()}
    out.update(global_norm=global_norm, learning_rate=lr)
    return new_params, new_moments, out, grads
