"""The WebSocket chat: the consumer, slash commands and their text, convergence, the WebUI page."""
