"""The WebSocket chat: the consumer, slash commands and their text, notifications, convergence, the WebUI page."""
