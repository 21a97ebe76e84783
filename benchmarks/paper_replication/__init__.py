"""The paper replication of issue #17 (`benchmarks/replicate_paper.py`); the plan is in settings.py."""
