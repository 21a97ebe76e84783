"""What `demo.py` shows a reader of its run, beyond what the library prints: the training curves
as a PNG and a table (`curves`), a plain statement of what the held-out metrics show
(`run_summary`), and one example laid out token by token through replaced token detection
(`rtd_inspection`). The library itself never imports this package."""
