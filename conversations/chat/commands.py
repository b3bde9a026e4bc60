"""Slash commands on the control path (seed 004 §7, seed 000 §6, PROTOCOL "Slash commands").

Commands are answered by the control path: never queued behind a running turn, never a model
call (``/compact`` calls the model for its summary, in a supervised background task, and answers
when done). Every channel calls ``handle_command`` with a ``CommandClient``: cli_chat connections
send the answer frames as they are; text platforms render them with ``command_text.render_text``
— so a command means the same everywhere.

Errors are answered, not raised: unknown commands and wrong arguments get an ``error`` frame with
a hint; another user's or another chat's dialog answers ``not_found`` (the caller maps
``storage.NotFoundError``).
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from django.conf import settings

from conversations import storage
from conversations.chat import schedule_command, task_commands
from conversations.runtime import notify
from conversations.runtime.agent_channel import request_stop
from conversations.runtime.model_choice import (
    ModelChoiceError,
    choose_model,
    dialog_preset,
    models_text,
    with_preset,
)
from conversations.runtime.notify import session_changed
from conversations.runtime.sessions import session_manager
from conversations.storage.dialog_reads import sessions_page
from conversations.storage.runner import run_storage
from conversations.usage.writer import usage_writer

log = logging.getLogger(__name__)

WELCOME = (
    "New dialog started ({dialog_id}). Ask me anything; /sessions lists your dialogs, /help the commands."
)
IDLE_RESET_NOTICE = (
    "Your previous dialog “{title}” was idle for more than {hours:g} h, so this message started a new "
    "one; /sessions lists both, /switch {dialog_id} goes back."
)


@dataclass(frozen=True)
class CommandSpec:
    """One slash command: its usage line and what it does (for ``/help`` and error hints)."""

    usage: str
    summary: str


COMMANDS: dict[str, CommandSpec] = {
    "/help": CommandSpec("/help", "this list"),
    "/new": CommandSpec("/new [title]", "start a new dialog and make it active"),
    "/sessions": CommandSpec("/sessions", "your 10 most recent dialogs"),
    "/switch": CommandSpec("/switch <dialog_id>", "make another dialog active"),
    "/rename": CommandSpec("/rename <title>", "rename the current dialog"),
    "/delete": CommandSpec("/delete [dialog_id]", "delete the current (or the given) dialog"),
    "/compact": CommandSpec("/compact", "summarise older history now to free context"),
    "/info": CommandSpec("/info", "about the current dialog: ids, counts, model, token usage"),
    "/model": CommandSpec("/model [name]", "list the model presets, or switch this dialog to one"),
    "/schedule": CommandSpec(schedule_command.USAGE, schedule_command.SUMMARY),
    "/tasks": CommandSpec("/tasks", "your background tasks: id, status, time, prompt"),
    "/stop": CommandSpec("/stop [task <id>]", "stop the running turn, or a background task"),
}
HELP_TEXT = "Commands:\n" + "\n".join(f"{c.usage} — {c.summary}" for c in COMMANDS.values())


class CommandClient(Protocol):
    """What a command needs from the channel that received it (``ChatConsumer`` provides it)."""

    user: Any
    chat_id: str
    channel_name: str

    async def send_frame(self, frame: dict) -> None: ...

    async def send_error(
        self, code: str, message: str, *, ref: str | None = None, client_msg_id: str | None = None
    ) -> None: ...

    async def stop_turn(
        self, session_id: str, turn_id: str | None = None, *, typed: bool = False
    ) -> None: ...


def welcome(dialog: Any) -> dict:
    """The welcome ``notification`` of a new dialog (seed 004 §6.2; a notice, never history)."""
    return {
        "type": "notification",
        "level": "info",
        "content": WELCOME.format(dialog_id=dialog.dialog_id),
        "session_id": dialog.id,
    }


def idle_reset_notice(new: Any, replaced: Any) -> dict:
    """The notice of DESIGN §6 "idle reset": a new dialog replaced the chat's idle one."""
    hours = settings.PICOBOT.session_ttl_hours
    content = IDLE_RESET_NOTICE.format(title=replaced.title, hours=hours, dialog_id=replaced.dialog_id)
    return {"type": "notification", "level": "info", "content": content, "session_id": new.id}


class UsageError(Exception):
    """A command was called with wrong arguments; the message says how to call it."""


def is_stop_command(content: str) -> bool:
    """Whether ``content`` is ``/stop`` (any case, any argument): a control, exempt from the
    per-user message rate (``PICOBOT_USER_MESSAGES_PER_MINUTE``), as the ``stop`` frame is."""
    parts = content.split(None, 1)
    return bool(parts) and parts[0].lower() == "/stop"


async def handle_command(client: CommandClient, channel: str, content: str, session_id: str | None) -> None:
    """Answer one slash command on ``client`` (PROTOCOL "Slash commands").

    ``session_id`` is the dialog the client is looking at (the frame's), else the chat's active
    dialog is meant. Raises storage.NotFoundError for a dialog that is not the chat's (the caller
    answers ``not_found``).
    """
    parts = content.strip().split(None, 1)
    typed = parts[0] if parts else "/"
    name, argument = typed.lower(), parts[1].strip() if len(parts) > 1 else ""
    handler = _HANDLERS.get(name)
    if handler is None:
        shown = typed if len(typed) <= 40 else typed[:40] + "…"
        await client.send_error("unknown_command", f"unknown command {shown}; type /help for the list")
        return
    try:
        await handler(client, channel, argument, session_id)
    except UsageError as exc:
        await client.send_error("invalid_command", f"{exc} — usage: {COMMANDS[name].usage}")


async def _target(client: CommandClient, channel: str, session_id: str | None) -> Any:
    """The dialog a command acts on: the frame's ``session_id`` (must be the user's) or the active one."""
    if session_id:
        return await run_storage(storage.dialog_for_user, client.user, session_id)
    return await run_storage(storage.active_dialog, client.user, channel, client.chat_id)


def _no_argument(argument: str) -> None:
    if argument:
        raise UsageError("this command takes no argument")


async def _help(client: CommandClient, channel: str, argument: str, session_id: str | None) -> None:
    await client.send_frame({"type": "notification", "level": "info", "content": HELP_TEXT})


async def _new(client: CommandClient, channel: str, argument: str, session_id: str | None) -> None:
    try:
        dialog = await run_storage(
            storage.create_dialog, client.user, channel, client.chat_id, argument or None
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    await announce(client, channel, session_changed(dialog, active=True))
    await client.send_frame(welcome(dialog))


async def _sessions(client: CommandClient, channel: str, argument: str, session_id: str | None) -> None:
    _no_argument(argument)
    page = await run_storage(sessions_page, client.user, channel, client.chat_id)
    await client.send_frame({"type": "sessions", **page})


async def _switch(client: CommandClient, channel: str, argument: str, session_id: str | None) -> None:
    if not argument or " " in argument:
        raise UsageError("name one dialog (see /sessions)")
    dialog = await run_storage(storage.switch_dialog, client.user, channel, client.chat_id, argument)
    await announce(client, channel, session_changed(dialog, active=True))
    page = await run_storage(storage.history_page, client.user, dialog.id)
    await client.send_frame({"type": "session_history", **page})


async def _rename(client: CommandClient, channel: str, argument: str, session_id: str | None) -> None:
    if not argument:
        raise UsageError("give the new title")
    target = await _target(client, channel, session_id)
    try:
        dialog = await run_storage(storage.rename_dialog, client.user, target.id, argument)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    active = await run_storage(storage.active_dialog, client.user, channel, client.chat_id)
    await announce(client, channel, session_changed(dialog, active=dialog.id == active.id))


async def _delete(client: CommandClient, channel: str, argument: str, session_id: str | None) -> None:
    if " " in argument:
        raise UsageError("name at most one dialog")
    if argument:
        target = await run_storage(storage.dialog_in_chat, client.user, channel, client.chat_id, argument)
    else:
        target = await _target(client, channel, session_id)
    result = await run_storage(storage.delete_dialog, client.user, channel, client.chat_id, target.id)
    session_manager().evict(result.deleted.id)  # this process's runtime session (others expire by TTL)
    if result.running_turn:
        await request_stop(result.deleted.id)
    await announce(client, channel, session_changed(result.deleted, active=False, deleted=True))
    if result.active_changed:
        await announce(client, channel, session_changed(result.active, active=True))
    if result.active_created:
        await client.send_frame(welcome(result.active))
    if result.dropped_queued:
        await client.send_frame(
            {
                "type": "notification",
                "level": "info",
                "session_id": result.deleted.id,
                "content": f"{result.dropped_queued} queued message(s) of the deleted dialog will not run.",
            }
        )


async def _info(client: CommandClient, channel: str, argument: str, session_id: str | None) -> None:
    _no_argument(argument)
    target = await _target(client, channel, session_id)
    await usage_writer.flush()  # this process's calls so far count (issue 17)
    info = with_preset(await run_storage(storage.dialog_info, client.user, target.id))
    await client.send_frame(
        {
            "type": "notification",
            "level": "info",
            "content": format_info(info),
            "session_id": info["session_id"],
            "info": info,
        }
    )


async def _model(client: CommandClient, channel: str, argument: str, session_id: str | None) -> None:
    """``/model`` lists the presets; ``/model NAME`` switches the dialog: its next turn uses the
    preset, a running turn keeps its own (issue 17). Both answer with a ``notification``."""
    target = await _target(client, channel, session_id)
    if not argument:
        content = models_text(target.model)
    else:
        if " " in argument:
            raise UsageError("name one model preset (see /model)")
        try:
            model = choose_model(argument)
        except ModelChoiceError as exc:
            raise UsageError(str(exc)) from None
        await run_storage(storage.set_dialog_model, client.user, target.id, model)
        content = f"This dialog now uses {dialog_preset(model).label}, from its next message on."
    await client.send_frame(
        {"type": "notification", "level": "info", "content": content, "session_id": target.id}
    )


async def _tasks(client: CommandClient, channel: str, argument: str, session_id: str | None) -> None:
    _no_argument(argument)
    await client.send_frame(await task_commands.list_tasks(client))


async def _stop(client: CommandClient, channel: str, argument: str, session_id: str | None) -> None:
    if argument:
        words = argument.split()
        if len(words) != 2 or words[0].lower() != "task":
            raise UsageError("/stop stops the running turn; /stop task <id> a background task (see /tasks)")
        await client.send_frame(await task_commands.stop_task(client, words[1]))
        return
    target = await _target(client, channel, session_id)
    await client.stop_turn(target.id, typed=True)  # typed: the turn running now, whatever was stopped before


async def _compact(client: CommandClient, channel: str, argument: str, session_id: str | None) -> None:
    _no_argument(argument)
    from conversations.runtime.supervisor import SupervisorClosedError

    target = await _target(client, channel, session_id)
    try:
        started = await start_compaction(channel, client.chat_id, target.id)
    except SupervisorClosedError:
        await client.send_error("unavailable", "the server is shutting down; try /compact again in a moment")
        return
    if not started:
        await client.send_frame(
            {"type": "notification", "level": "info", "session_id": target.id, "content": COMPACTION_RUNNING}
        )


COMPACTION_RUNNING = "A compaction of this dialog is already running; you are told when it is done."


def compaction_claim_ms() -> int:
    """How long a manual compaction's claim binds (ms): its supervisor bound
    (``PICOBOT_COMPACT_TIMEOUT`` + 10 s) and a margin; older claims belong to a dead process."""
    return int((settings.PICOBOT.compact_timeout + 30) * 1000)


async def start_compaction(channel: str, chat_id: str, dialog_id: str) -> bool:
    """Start a manual compaction of the dialog in the control supervisor (seed 004 §7 ``/compact``).

    At most one per dialog at a time across every server process (``storage.claim_compaction``):
    False (nothing started, no model call) while one runs — fifteen ``/compact`` in a row are one
    paid summary call, not fifteen. Raises SupervisorClosedError while the server shuts down.
    """
    from conversations.runtime.supervisor import control_supervisor

    stamp = await run_storage(storage.claim_compaction, dialog_id, compaction_claim_ms())
    if stamp is None:
        return False

    async def compact_then_release() -> None:
        try:
            await compact_and_report(channel, chat_id, dialog_id)
        finally:
            await run_storage(storage.release_compaction, dialog_id, stamp)

    try:
        control_supervisor().spawn(
            compact_then_release(),
            name=f"compact {dialog_id}",
            timeout=settings.PICOBOT.compact_timeout + 10,
        )
    except BaseException:
        await run_storage(storage.release_compaction, dialog_id, stamp)
        raise
    return True


async def compact_and_report(channel: str, chat_id: str, dialog_id: str) -> None:
    """Run a manual compaction and tell the chat how it went (seed 004 §7 ``/compact``)."""
    from conversations.context.compaction_service import CompactionError, compact_dialog
    from conversations.runtime.provider import get_provider

    try:
        outcome = await compact_dialog(dialog_id, get_provider())  # keep/timeout from settings
    except CompactionError as exc:
        await notify.publish_notification(
            channel, chat_id, "error", f"Compaction failed: {exc}", session_id=dialog_id
        )
        return
    except storage.NotFoundError:
        return  # deleted meanwhile: nobody to tell
    except Exception:
        ref = secrets.token_hex(4)
        log.exception("compaction of %s crashed (ref %s)", dialog_id, ref)
        await notify.publish_notification(
            channel, chat_id, "error", f"Compaction failed: internal error (ref {ref}).", session_id=dialog_id
        )
        return
    await notify.publish_notification(channel, chat_id, "info", outcome.notice, session_id=dialog_id)


_HANDLERS = {
    "/help": _help,
    "/new": _new,
    "/sessions": _sessions,
    "/switch": _switch,
    "/rename": _rename,
    "/delete": _delete,
    "/compact": _compact,
    "/info": _info,
    "/model": _model,
    "/schedule": schedule_command.schedule_command,
    "/tasks": _tasks,
    "/stop": _stop,
}


def format_info(info: dict) -> str:
    """``/info`` as text: title, ids, counts, times (UTC), model and token usage."""
    lines = [
        f"“{info['title']}”" + (" (active)" if info["active"] else ""),
        f"id: {info['dialog_id']} ({info['session_id']})",
        f"messages: {info['total_message_count']} in history, {info['message_count']} from you"
        + (f"; {info['queued']} queued" if info["queued"] else "")
        + ("; a turn is running" if info["running"] else ""),
        f"created: {_when(info['created_at'])} · last active: {_when(info['last_active_at'])}",
        f"model: {info.get('model_label') or info['model'] or 'default'}",
        f"tokens used: {_usage_text(info)}",
    ]
    if info["compacted_through_seq"]:
        lines.append(f"compacted: messages up to #{info['compacted_through_seq']} are summarised")
    return "\n".join(lines)


def _usage_text(info: dict) -> str:
    """The token usage of ``/info``: the counts, or why there are none.

    The sums of the dialog's usage rows (every provider call, estimated where the provider
    reported none; cost in the presets' currency; issue 17). A dialog whose turns answered while
    the usage stayed 0 in and 0 out had no recorded calls: 0 would read as "free", so say so.
    """
    usage = info["usage"]
    if usage["input_tokens"] or usage["output_tokens"]:
        text = f"{usage['input_tokens']:,} in, {usage['output_tokens']:,} out"
        if usage.get("cached_tokens"):
            text += f" ({usage['cached_tokens']:,} cached)"
        calls = usage.get("calls", 0)
        return text + f" in {calls:,} call{'s' * (calls != 1)} · cost {usage.get('cost', 0):.4f}"
    if info["total_message_count"] > info["message_count"]:  # the model answered: rows of its own
        return "not reported by the provider"
    return "none yet"


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


async def announce(client: CommandClient, channel: str, frame: dict) -> None:
    """``frame`` to the client now (in order with its other answers) and to the chat's others."""
    await client.send_frame(frame)
    await notify.publish_frame(channel, client.chat_id, frame, skip_channel=client.channel_name)
