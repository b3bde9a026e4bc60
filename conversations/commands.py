"""Slash commands on the control path (seed 004 §7, PROTOCOL "Slash commands").

Commands are answered by the control path, never queued behind a running turn, and never call
the model. This first version answers ``/help``; the session commands (``/new``, ``/sessions``,
``/switch``, ``/rename``, ``/delete``, ``/compact``, ``/info``, ``/stop``) come with the sessions
issue and answer with a helpful error until then.
"""

from __future__ import annotations

from typing import Protocol

HELP_TEXT = "\n".join(
    [
        "Commands:",
        "/help — this list",
        "/new [title] — start a new dialog",
        "/sessions — your 10 most recent dialogs",
        "/switch <dialog_id> — make a dialog active",
        "/rename <title> — rename the active dialog",
        "/delete — delete the active dialog",
        "/compact — summarise older history now",
        "/info — about this dialog",
        "/stop — stop the running turn",
    ]
)
KNOWN = {"/help", "/new", "/sessions", "/switch", "/rename", "/delete", "/compact", "/info", "/stop"}


class CommandClient(Protocol):
    """What a command needs from a connection: frame output."""

    async def send_frame(self, frame: dict) -> None: ...

    async def send_error(self, code: str, message: str, *, ref: str | None = None,
                         client_msg_id: str | None = None) -> None: ...


async def handle_command(client: CommandClient, content: str, session_id: str | None) -> None:
    """Answer one slash command on ``client``; unknown commands get an ``error`` with a hint."""
    name = content.split(maxsplit=1)[0].lower()
    if name == "/help":
        await client.send_frame({"type": "notification", "level": "info", "content": HELP_TEXT})
        return
    if name in KNOWN:
        await client.send_error("command_unavailable", f"{name} is not available yet on this server; see /help")
        return
    await client.send_error("unknown_command", f"unknown command {name}; type /help for the list")
