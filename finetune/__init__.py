"""Fine-tuning the pretrained discriminator (GLUE now; span-extraction and tagging tasks later).

config.py (FinetuningConfig) · glue.py (tasks, TSV readers, labels, server names) · inputs.py
(featurization, length-bucketed batches) · data.py (every split a run needs) · heads.py, model.py
(one head per task on the shared encoder) · pretrained.py (the pretrained `electra/*` weights) ·
scorers.py · runner.py (trials) · results.py (aggregation) · test_predictions.py (GLUE-server files).
Depends on electra_tf, never on pretrain_data.
"""
