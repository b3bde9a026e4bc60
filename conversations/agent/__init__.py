"""The agent's pure turn logic (no Django): the agent loop, turn failures and their presenter, inbound messages, media."""
