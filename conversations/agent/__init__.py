"""The agent's pure turn logic (no Django): the agent loop, tool calls and the tool registry, turn failures and log safety, inbound messages, media (``README.md``)."""
