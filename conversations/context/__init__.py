"""What a turn sends the model: history, token estimates, compaction rules, the turn input builder, the compaction service."""
