"""What a run tells its user about its held-out metrics: the curve table and the plain summary."""

import tensorflow as tf

from demo_support.curves import eval_curve_table
from demo_support.run_summary import LEARNING_MARGIN, summarize_run

FIRST = dict(masked_lm_accuracy=0.0, masked_lm_accuracy_at_mask=0.0, sampled_masked_lm_accuracy=0.0,
             disc_loss=0.70, disc_loss_constant_predictor=0.42, disc_auc=0.53)


def final(disc_loss, auc):
    return dict(masked_lm_accuracy=0.18, masked_lm_accuracy_at_mask=0.035, sampled_masked_lm_accuracy=0.099,
                disc_loss=disc_loss, disc_loss_constant_predictor=0.3937, disc_auc=auc)


def test_a_discriminator_at_the_constant_predictor_is_reported_as_not_learning():
    text = summarize_run(FIRST, final(0.3937 - LEARNING_MARGIN / 2, 0.535), "2 layers, 600 steps")
    assert "has not learned" in text and "0.3937" in text and "0.535" in text
    assert "2 layers, 600 steps" in text and "0.000 -> 0.180" in text
    assert "over those showing [MASK] 0.000 -> 0.035" in text
    assert "What it cannot show" in text and "experiments/electra_vs_mlm/replicate_paper.py" in text


def test_a_discriminator_clearly_below_the_constant_predictor_is_reported_as_learning():
    text = summarize_run(FIRST, final(0.30, 0.81), "4 layers")
    assert "learned to spot replaced tokens" in text and "has not learned" not in text
    assert "0.3000" in text and "0.810" in text


def test_eval_curve_table_has_one_row_per_evaluation(tmp_path):
    with tf.summary.create_file_writer(str(tmp_path / "eval")).as_default():
        for step, auc, accuracy, at_mask in ((0, 0.53, 0.0, 0.0), (50, 0.74, 0.032, 0.021)):
            tf.summary.scalar("disc_auc", auc, step=step)
            tf.summary.scalar("masked_lm_accuracy", accuracy, step=step)
            tf.summary.scalar("masked_lm_accuracy_at_mask", at_mask, step=step)
    lines = eval_curve_table(tmp_path).splitlines()
    assert lines[0].split() == ["step", "real-token", "AUC", "gen.", "accuracy", "at", "[MASK]"]
    assert [line.split() for line in lines[1:]] == [["0", "0.5300", "0.0000", "0.0000"],
                                                    ["50", "0.7400", "0.0320", "0.0210"]]
