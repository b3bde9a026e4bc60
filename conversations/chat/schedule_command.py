"""``/schedule``: scheduled prompts on every channel's command path (issue 18, ``chat.commands``).

- ``/schedule add "<cron>" <prompt>`` — a new schedule of the dialog the command was typed in
  (``@every 30m`` and the ``@daily``-style aliases need no quotes);
- ``/schedule list`` — the user's schedules (a Feishu chat's), from every dialog;
- ``/schedule delete|pause|resume <id>`` — one of them, from any dialog.

Answers are ``notification`` frames whose ``content`` is the text; ``add``/``pause``/``resume``
carry the item as ``schedule``, ``list`` the items as ``schedules`` (``storage.schedules``
shapes). Bad input answers ``invalid_command`` (naming the field and why), an unknown or
another user's id ``not_found``.
"""

from __future__ import annotations

import re
from typing import Any

from conversations import storage
from conversations.agent.schedule_timing import ScheduleSpecError, slot_text
from conversations.chat.command_text import dialog_label
from conversations.storage.runner import run_storage

USAGE = '/schedule add "<cron>" <prompt> | list | delete <id> | pause <id> | resume <id>'
SUMMARY = "scheduled prompts of this dialog: add, list (all yours), delete, pause, resume"

_QUOTE_KINDS = ('"“”„«»「」', "'‘’‚")  # noqa: RUF001 — typed or auto-curled, each closes its kind
_UNQUOTED = re.compile(r"(@every\s+\d+\s*[a-z]+|@[a-z]+)(?:\s+(.*))?", re.DOTALL | re.IGNORECASE)
EXCERPT_CHARS = 60


def split_add(argument: str) -> tuple[str, str]:
    """``'"0 9 * * *" Summarise the news'`` → ``("0 9 * * *", "Summarise the news")``.

    The cron expression is in straight or typographic quotes (“0 9 * * *”, as the answers show
    it; a keyboard's auto-curled ones), or an unquoted ``@`` form.

    Raises:
        ValueError: no quoted cron expression (or ``@`` form), or no prompt after it.
    """
    text = argument.strip()
    kind = next((quotes for quotes in _QUOTE_KINDS if text[:1] and text[0] in quotes), None)
    cron = rest = None
    if kind is not None:
        end = next((i for i, char in enumerate(text[1:], start=1) if char in kind), -1)
        if end > 0 and (end == len(text) - 1 or text[end + 1].isspace()):
            cron, rest = text[1:end], text[end + 1 :]
    elif match := _UNQUOTED.fullmatch(text):
        cron, rest = match.group(1), match.group(2) or ""
    if cron is None:
        raise ValueError(
            'put the cron expression in quotes, then the prompt: /schedule add "0 9 * * *" <prompt>'
        )
    if not rest.strip():
        raise ValueError('the prompt is missing: /schedule add "0 9 * * *" <prompt>')
    return cron, rest.lstrip()


def describe(item: dict, *, with_dialog: bool = False) -> str:
    """One schedule as a line: id, cron, zone, next run, state and the prompt's start (and, for a
    list across dialogs, the dialog's title)."""
    prompt = " ".join(item["prompt"].split())
    if len(prompt) > EXCERPT_CHARS:
        prompt = prompt[: EXCERPT_CHARS - 1] + "…"
    when = f"next {slot_text(item['next_run_at'], item['tz'])}" if item["next_run_at"] else "paused"
    where = f" · in {dialog_label(item['dialog_title'], item['session_id'])}" if with_dialog else ""
    return f"#{item['id']} “{item['cron']}” ({item['tz']}) · {when}{where} · {prompt}"


async def schedule_command(client: Any, channel: str, argument: str, session_id: str | None) -> None:
    """Answer ``/schedule …`` on ``client`` (a ``chat.commands.CommandClient``)."""
    action, _, rest = argument.strip().partition(" ")
    action, rest = action.lower(), rest.strip()
    try:
        if action == "add":
            await _add(client, channel, rest, session_id)
        elif action == "list" and not rest:
            await _list(client, channel)
        elif action in {"delete", "pause", "resume"} and rest and " " not in rest:
            await _change(client, channel, action, rest)
        else:
            await client.send_error("invalid_command", f"usage: {USAGE}")
    except ScheduleSpecError as exc:
        await client.send_error("invalid_command", f"{exc} — usage: {USAGE}")
    except (ValueError, storage.ScheduleLimitError) as exc:
        await client.send_error("invalid_command", str(exc))


async def _add(client: Any, channel: str, argument: str, session_id: str | None) -> None:
    cron, prompt = split_add(argument)
    if session_id:
        dialog = await run_storage(storage.dialog_for_user, client.user, session_id)
    else:
        dialog = await run_storage(storage.active_dialog, client.user, channel, client.chat_id)
    item = await run_storage(storage.create_schedule, dialog, cron, prompt)
    content = f"Scheduled prompt {item['id']} added to this dialog: {describe(item)}"
    await _answer(client, content, session_id=dialog.id, schedule=item)


async def _list(client: Any, channel: str) -> None:
    items = await run_storage(storage.schedules_of, client.user, channel, client.chat_id)
    if items:
        content = "Your scheduled prompts:\n" + "\n".join(describe(item, with_dialog=True) for item in items)
    else:
        content = 'No scheduled prompts. Add one with /schedule add "0 9 * * *" <prompt>.'
    await _answer(client, content, schedules=items)


async def _change(client: Any, channel: str, action: str, ref: str) -> None:
    try:
        if action == "delete":
            item = await run_storage(storage.delete_schedule, client.user, ref, channel, client.chat_id)
        else:
            enabled = action == "resume"
            item = await run_storage(
                storage.set_schedule_enabled, client.user, ref, enabled, channel, client.chat_id
            )
    except storage.NotFoundError:
        shown = ref if len(ref) <= 40 else ref[:40] + "…"
        await client.send_error("not_found", f"no such schedule {shown} (see /schedule list)")
        return
    done = {"delete": "Deleted", "pause": "Paused", "resume": "Resumed"}[action]
    extra = {} if action == "delete" else {"schedule": item}
    await _answer(client, f"{done} scheduled prompt {item['id']}: {describe(item)}", **extra)


async def _answer(client: Any, content: str, *, session_id: str | None = None, **extra: Any) -> None:
    frame = {"type": "notification", "level": "info", "content": content, **extra}
    if session_id:
        frame["session_id"] = session_id
    await client.send_frame(frame)
