"""Fine-tuning tasks, heads and scorers (GLUE, SQuAD, chunking)."""
