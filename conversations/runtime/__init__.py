"""The agent runtime: the worker, per-dialog executors, runtime sessions, the task supervisor, leases, start-up."""
