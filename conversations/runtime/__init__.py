"""The agent runtime: the worker, per-dialog executors, runtime sessions, turn rows, the title service, notifications to chats, the task supervisor, leases, start-up."""
