"""``plan_update`` / ``plan_get``: the dialog's active plan (``Plan`` row; seed 000 §7.1).

``Plan.content`` is ``{"steps": [{"text": str, "status": "pending"|"in_progress"|"done"}],
"note": str}``: at most ``MAX_STEPS`` steps of at most ``STEP_MAX_CHARS`` characters, a note of
at most ``NOTE_MAX_CHARS``. ``plan_update`` replaces the whole plan (an empty step list clears
it). The TurnInputBuilder can show the plan in the runtime context with :func:`load_plan` and
:func:`render_plan` (never stored in history).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError

from conversations.agent.tool_registry import Tool, ToolContext, ToolError
from conversations.models import Dialog, Plan, now_ms
from conversations.storage import scrub_text
from conversations.storage.runner import run_storage

MAX_STEPS = 20
STEP_MAX_CHARS = 300
NOTE_MAX_CHARS = 1000
STATUSES = ("pending", "in_progress", "done")
_MARKS = {"pending": "[ ]", "in_progress": "[>]", "done": "[x]"}


def clean_plan(steps: list[dict], note: str = "") -> dict:
    """A plan ``content`` from tool arguments: texts stripped, empty steps dropped, bounds checked;
    NUL characters and lone surrogates become U+FFFD (``storage.scrub_text``: they could not be
    stored, nor sent in a later request's runtime context).

    Raises:
        ToolError: more than ``MAX_STEPS`` steps, a step text/note too long, an unknown status.
    """
    if len(steps) > MAX_STEPS:
        raise ToolError(f"a plan has at most {MAX_STEPS} steps")
    clean: list[dict] = []
    for index, step in enumerate(steps):
        text = " ".join(scrub_text(str(step.get("text", ""))).split())
        status = step.get("status", "pending")
        if status not in STATUSES:
            raise ToolError(f"step {index + 1}: status must be one of {', '.join(STATUSES)}")
        if len(text) > STEP_MAX_CHARS:
            raise ToolError(f"step {index + 1}: text is longer than {STEP_MAX_CHARS} characters")
        if text:
            clean.append({"text": text, "status": status})
    note = scrub_text(note or "").strip()
    if len(note) > NOTE_MAX_CHARS:
        raise ToolError(f"the note is longer than {NOTE_MAX_CHARS} characters")
    return {"steps": clean, "note": note}


def save_plan(dialog_id: str, content: dict) -> int:
    """Replace the dialog's plan with ``content`` (sync); returns ``updated_at`` (ms).

    Raises:
        ToolError: the dialog does not exist (any more).
    """
    stamp = now_ms()
    if not Dialog.objects.filter(pk=dialog_id).exists():
        raise ToolError("this dialog no longer exists")
    try:
        Plan.objects.update_or_create(dialog_id=dialog_id, defaults={"content": content, "updated_at": stamp})
    except IntegrityError as exc:  # the dialog was deleted between the check and the write
        raise ToolError("this dialog no longer exists") from exc
    return stamp


def load_plan(dialog_id: str) -> dict | None:
    """The dialog's plan ``{"steps", "note", "updated_at"}``, or None when it has none (sync)."""
    row = Plan.objects.filter(dialog_id=dialog_id).values("content", "updated_at").first()
    return None if row is None else plan_from_row(row["content"], row["updated_at"])


def plan_from_row(content: Any, updated_at: int | None) -> dict | None:
    """A stored plan row's ``content`` and ``updated_at`` as ``load_plan`` returns them (None when
    there is no row, or its content has neither steps nor a note)."""
    if not isinstance(content, dict):
        return None
    steps = [s for s in content.get("steps") or [] if isinstance(s, dict)]
    if not steps and not content.get("note"):
        return None
    return {"steps": steps, "note": content.get("note") or "", "updated_at": updated_at}


def render_plan(plan: dict) -> str:
    """The plan as short text lines: ``"[x] step"``, ``"[>] step"``, ``"[ ] step"``, then the note."""
    lines = [f"{_MARKS.get(s.get('status'), '[ ]')} {s.get('text', '')}" for s in plan.get("steps", [])]
    if plan.get("note"):
        lines.append(f"Note: {plan['note']}")
    return "\n".join(lines)


def _plan_json(plan: dict | None) -> str:
    if plan is None:
        return json.dumps({"steps": [], "note": "", "message": "no active plan"})
    steps = plan["steps"]
    summary = {status: sum(1 for s in steps if s.get("status") == status) for status in STATUSES}
    updated = datetime.fromtimestamp(plan["updated_at"] / 1000, UTC).isoformat(timespec="seconds")
    body = {"steps": steps, "note": plan["note"], "counts": summary, "updated_at": updated}
    return json.dumps(body, ensure_ascii=False)


def _update(dialog_id: str, content: dict) -> dict | None:
    save_plan(dialog_id, content)
    return load_plan(dialog_id)


async def plan_update(arguments: dict, context: ToolContext) -> str:
    """Replace the dialog's plan; returns the stored plan as JSON (see ``plan_get``)."""
    content = clean_plan(arguments["steps"], arguments.get("note", ""))
    return _plan_json(await run_storage(_update, context.dialog_id, content))


async def plan_get(arguments: dict, context: ToolContext) -> str:
    """The dialog's plan as JSON ``{"steps", "note", "counts", "updated_at"}`` (or ``"no active plan"``)."""
    return _plan_json(await run_storage(load_plan, context.dialog_id))


def plan_tools() -> list[Tool]:
    """The ``plan_update`` and ``plan_get`` tool definitions."""
    step = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "maxLength": STEP_MAX_CHARS},
            "status": {"type": "string", "enum": list(STATUSES)},
        },
        "required": ["text", "status"],
        "additionalProperties": False,
    }
    return [
        Tool(
            name="plan_update",
            description=(
                "Write this conversation's plan for a multi-step task: the full list of steps with "
                "their status (replaces the previous plan; an empty list clears it). Keep it current "
                "as you work."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "steps": {"type": "array", "items": step, "maxItems": MAX_STEPS},
                    "note": {"type": "string", "maxLength": NOTE_MAX_CHARS},
                },
                "required": ["steps"],
                "additionalProperties": False,
            },
            handler=plan_update,
            timeout=10.0,
            needs_context=True,
        ),
        Tool(
            name="plan_get",
            description="Read this conversation's current plan (steps and their status).",
            parameters={"type": "object", "properties": {}, "additionalProperties": False},
            handler=plan_get,
            timeout=10.0,
            needs_context=True,
        ),
    ]
