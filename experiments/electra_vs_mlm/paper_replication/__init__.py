"""The paper replication of issue #17 (`experiments/electra_vs_mlm/replicate_paper.py`); the plan is in settings.py."""
