"""Fine-tuning the pretrained discriminator: GLUE, SQuAD 1.1 / 2.0 and CoNLL-2000 chunking.

config.py (FinetuningConfig) · glue.py (tasks, TSV readers, labels, server names) · inputs.py
(featurization, length-bucketed batches) · task_data.py (every split a run needs) · heads.py, model.py
(one head per task on the shared encoder) · pretrained.py (the pretrained `electra/*` weights) ·
scorers.py · runner.py (trials) · results.py (aggregation) · glue_server_files.py (GLUE-server
test-set prediction files) · squad.py, squad_context.py, qa_head.py, squad_postprocess.py (SQuAD) ·
chunking.py (CoNLL-2000) · span_tasks.py (both behind the interface the runner calls) ·
saved_model.py (fine-tuned models as SavedModels on raw text).
Depends on electra_tf, never on pretrain_data.
"""
