"""PicoBot's terminal client (``manage.py chat``): a pure cli_chat WebSocket client.

It imports nothing of the server (pyproject.toml [tool.importlinter]); README.md in this folder
says what each module holds.
"""
