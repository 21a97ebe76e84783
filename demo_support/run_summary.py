"""A plain statement of what a pretraining run's held-out metrics show, and what they cannot.

A discriminator whose held-out loss is not below the constant predictor's has learned nothing
about which tokens were replaced, whatever its accuracy (labelling everything "original" is
right for ~85-90 % of tokens). The statement says that, or the opposite, with the numbers, and
names what no single pretraining run can show: whether the encoder transfers better than one
trained with MLM at equal compute.
"""

from typing import Dict

# the held-out loss must be this far (in nats) under the constant predictor's to count as learning
LEARNING_MARGIN = 0.005
REPLICATION = "experiments/electra_vs_mlm/replicate_paper.py (results in its REPORT.md)"


def discriminator_learned(metrics: Dict[str, float]) -> bool:
    """True when the held-out discriminator loss is clearly below the input-blind predictor's."""
    return metrics["disc_loss"] < metrics["disc_loss_constant_predictor"] - LEARNING_MARGIN


def summarize_run(first: Dict[str, float], final: Dict[str, float], scale: str) -> str:
    """Held-out metrics at the first and final evaluation -> a few plain sentences.

    `scale` describes the run (model, data, steps) in a few words, e.g. "2 layers, 128 wide,
    137k training tokens, 600 steps".
    """
    lines = [f"What this run ({scale}) shows:",
             f"- The generator: held-out accuracy over all predicted positions "
             f"{first['masked_lm_accuracy']:.3f} -> {final['masked_lm_accuracy']:.3f}"
             + (f"; over those showing [MASK] {first['masked_lm_accuracy_at_mask']:.3f} -> "
                f"{final['masked_lm_accuracy_at_mask']:.3f} (the rest show the token to predict, "
                f"which copying gets right)" if "masked_lm_accuracy_at_mask" in final else "")
             + f"; its samples equal the original token {final['sampled_masked_lm_accuracy']:.1%} "
               f"of the time."]
    loss, constant, auc = final["disc_loss"], final["disc_loss_constant_predictor"], final["disc_auc"]
    if discriminator_learned(final):
        lines.append(f"- The discriminator learned to spot replaced tokens: held-out loss {loss:.4f} "
                     f"against {constant:.4f} for a constant predictor, real-token AUC {auc:.3f} "
                     f"(0.5 is chance).")
    else:
        lines.append(f"- The discriminator has not learned to tell replaced tokens from real ones: "
                     f"held-out loss {loss:.4f} against {constant:.4f} for a predictor that ignores "
                     f"its input (less than {LEARNING_MARGIN} apart); real-token AUC {auc:.3f} (0.5 is "
                     f"chance). At this scale the "
                     f"generator soon matches the corpus's word frequencies, which removes the easy "
                     f"cue, and the model is too small and too briefly trained to learn the "
                     f"contextual ones. An independent PyTorch implementation does the same on the "
                     f"replication's data (experiments/electra_vs_mlm/REPORT.md).")
    lines += ["What it cannot show: whether the encoder transfers better than one pretrained with "
              "MLM at equal compute, the paper's claim. That needs hours of pretraining and GLUE "
              f"fine-tuning: {REPLICATION}.",
              "To see an easier task, try settings that are not the paper's, e.g. "
              "--hparams '{\"temperature\": 3.0}' or '{\"uniform_generator\": true}'."]
    return "\n".join(lines)
