"""What a turn sends the model: history, token estimates, compaction and pruning rules, the runtime context, the turn input builder, overflow recovery, the compaction service (``README.md``)."""
