"""The agent runtime: the worker, per-dialog executors and what runs a turn (``README.md``)."""
