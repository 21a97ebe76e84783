"""ELECTRA's pre-training objectives as graph- and XLA-friendly TF functions (docs/fidelity.md, from
#masking to #metrics).

One step of ELECTRA, from these pieces (the transformers live in `electra_tf.modeling`):

    masked = mask_tokens(input_ids, input_mask, ...)                # masking.py
    gen_logits = generator(masked.masked_input_ids)[positions]       # [B, N, V]
    mlm = mlm_loss(gen_logits, masked.masked_lm_ids, masked.masked_lm_weights)   # losses.py
    sampled = sample_tokens(gen_logits, temperature=..., disallow_ids=...)       # sampling.py
    fake = fake_data(input_ids, masked.masked_lm_positions, sampled)
    rtd = rtd_loss(discriminator(fake.fake_input_ids), fake.is_replaced, input_mask)
    loss = total_loss(mlm.loss, rtd.loss)                            # 1 x MLM + 50 x RTD

The paper's efficiency ablations (Table 5) reuse them: "ELECTRA 15%" passes
`weights=fake.selected` to `rtd_loss`; "Replace MLM" runs `mlm_loss` on a model fed
`fake.fake_input_ids`; "All-Tokens MLM" adds the copy mechanism of all_tokens_mlm.py.
`PretrainingMetrics` (metrics.py) streams the original's eight eval metrics and those added
to judge them.
"""

from electra_tf.objectives.all_tokens_mlm import CopyMlmOutput, copy_mechanism_loss
from electra_tf.objectives.losses import MlmOutput, RtdOutput, mlm_loss, rtd_loss, total_loss
from electra_tf.objectives.masking import MaskedLmInputs, mask_tokens, slots_showing_mask
from electra_tf.objectives.metrics import PretrainingMetrics
from electra_tf.objectives.sampling import FakeData, fake_data, sample_tokens

__all__ = [
    "CopyMlmOutput", "FakeData", "MaskedLmInputs", "MlmOutput", "PretrainingMetrics",
    "RtdOutput", "copy_mechanism_loss", "fake_data", "mask_tokens", "mlm_loss", "rtd_loss",
    "sample_tokens", "slots_showing_mask", "total_loss",
]
