"""Slash commands on the control path (seed 004 §7, PROTOCOL "Slash commands").

Commands are answered by the control path: never queued behind a running turn, never a model
call. This version answers ``/help``, ``/new``, ``/sessions``, ``/switch`` and ``/stop``; the other
session commands (``/rename``, ``/delete``, ``/compact``, ``/info``) come with the sessions issue and
answer with an error saying so until then.
"""

from __future__ import annotations

from typing import Any, Protocol

from conversations import storage
from conversations.notify import publish_frame
from conversations.storage_runner import run_storage

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
NOT_YET = {"/rename", "/delete", "/compact", "/info"}
WELCOME = "New dialog started. Ask me anything; /help lists the commands."
MAX_TITLE_CHARS = 200


class CommandClient(Protocol):
    """What a command needs from a connection (``ChatConsumer`` provides it)."""

    user: Any
    chat_id: str
    channel_name: str

    async def send_frame(self, frame: dict) -> None: ...

    async def send_error(self, code: str, message: str, *, ref: str | None = None,
                         client_msg_id: str | None = None) -> None: ...

    async def stop_turn(self, session_id: str) -> None: ...


def session_changed(dialog: Any, *, active: bool) -> dict:
    """A ``session_changed`` frame for ``dialog`` (PROTOCOL §1)."""
    return {
        "type": "session_changed",
        "session_id": dialog.id,
        "dialog_id": dialog.dialog_id,
        "title": dialog.title,
        "active": active,
    }


async def handle_command(client: CommandClient, channel: str, content: str, session_id: str | None) -> None:
    """Answer one slash command on ``client``; unknown commands get an ``error`` with a hint.

    Raises:
        storage.NotFoundError: ``/switch`` to a dialog that is not the chat's (answered by the caller).
    """
    name, _, argument = content.strip().partition(" ")
    name, argument = name.lower(), argument.strip()
    if name == "/help":
        await client.send_frame({"type": "notification", "level": "info", "content": HELP_TEXT})
    elif name == "/new":
        if len(argument) > MAX_TITLE_CHARS:
            await client.send_error("invalid_command", f"a title has at most {MAX_TITLE_CHARS} characters")
            return
        dialog = await run_storage(storage.create_dialog, client.user, channel, client.chat_id, argument or None)
        await _announce(client, channel, session_changed(dialog, active=True))
        await client.send_frame({"type": "notification", "level": "info", "content": WELCOME, "session_id": dialog.id})
    elif name == "/sessions":
        items = await run_storage(storage.list_sessions, client.user, channel, client.chat_id)
        await client.send_frame({"type": "sessions", "items": items})
    elif name == "/switch":
        if not argument:
            await client.send_error("invalid_command", "usage: /switch <dialog_id> (see /sessions)")
            return
        dialog = await run_storage(storage.switch_dialog, client.user, channel, client.chat_id, argument)
        await _announce(client, channel, session_changed(dialog, active=True))
        page = await run_storage(storage.history_page, client.user, dialog.id)
        await client.send_frame({"type": "session_history", **page})
    elif name == "/stop":
        target = session_id or (await run_storage(storage.active_dialog, client.user, channel, client.chat_id)).id
        await client.stop_turn(target)
    elif name in NOT_YET:
        await client.send_error("command_unavailable", f"{name} is not available yet on this server; see /help")
    else:
        await client.send_error("unknown_command", f"unknown command {name}; type /help for the list")


async def _announce(client: CommandClient, channel: str, frame: dict) -> None:
    """``frame`` to the client now (in order with its other answers) and to the chat's others."""
    await client.send_frame(frame)
    await publish_frame(channel, client.chat_id, frame, skip_channel=client.channel_name)
