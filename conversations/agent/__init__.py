"""The agent's pure turn logic: the agent loop, turn failures and their presenter, turn rows, inbound messages, media."""
