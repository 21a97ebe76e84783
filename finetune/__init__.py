"""Fine-tuning the pretrained discriminator on any task: GLUE, SQuAD 1.1 / 2.0, CoNLL-2000 chunking
and the user's own classification, multi-label, regression and tagging tasks.

task.py (the task interface) · tasks.py (every task a run can name) · task_specs.py (a user's task
from --hparams) · the task types: classification.py (its label order: labels.py), regression.py,
multilabel.py (on sentence_task.py, task_files.py, table_files.py), tagging.py, squad_task.py · the presets:
glue_presets.py (on glue.py, glue_server_files.py), chunk_preset.py (on chunking.py) ·
config.py (FinetuningConfig) · inputs.py (featurization, length-bucketed batches) · multitask.py
(batches mixing tasks) · task_data.py (every split a run needs) · heads.py, model.py (one head per
task on the shared encoder) · pretrained.py (the pretrained `electra/*` weights) · scorers.py ·
runner.py (trials) · results.py (aggregation) · squad.py, squad_context.py, qa_head.py,
squad_postprocess.py (SQuAD) · servers.py, saved_model.py (fine-tuned models as SavedModels on raw text).
Depends on electra_tf, never on pretrain_data.
"""
