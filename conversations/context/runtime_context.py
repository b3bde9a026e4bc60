"""The runtime context of a turn and the dialog state it is read with (seed 000 §7.1, §8; DESIGN §6).

Per request, never stored: ``time=…; channel=…; dialog_title='…'``, the dialog's active plan
(``models.Plan``) and recalled memory (a hook; none by default), appended once to the last user
message by the builder (``turn_input``). The plan is read with the dialog's ``state_version`` and
``auto_compact_failures`` in one storage read (:func:`load_dialog_context`), right after the turn
start when the worker prefetches it (:func:`prefetch_turn_input`), else by :func:`read_turn_context`
concurrently with the memory recall (seed 000 §8: ``tokio::join!`` → ``asyncio.gather``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from conversations.storage import TurnStart, sql
from conversations.storage.runner import run_storage
from conversations.tools.plan import plan_from_row, render_plan
from providers.unicode_text import fix_surrogates

log = logging.getLogger(__name__)

#: The rendered active plan (``tools.plan.render_plan``) is cut after this many characters.
MAX_PLAN_CHARS = 4000
#: Recalled memory is cut after this many characters.
MAX_MEMORY_CHARS = 4000

MemoryRecall = Callable[[TurnStart], Awaitable[str | None]]
"""Recalls long-term memory for a turn: returns text for the runtime context, or None."""
MemoryRecallSync = Callable[[TurnStart], str | None]
"""The same, on a storage thread (``prefetch_turn_input``)."""


@dataclass(frozen=True)
class DialogState:
    """What the builder needs of the dialog row: its ``state_version`` (the compaction commit is
    conditional on it), its consecutive automatic compaction failures, and the rendered plan."""

    state_version: int
    auto_compact_failures: int
    plan: str


def load_dialog_context(dialog_id: str) -> dict:
    """``{state_version, auto_compact_failures, plan}`` of a dialog; ``plan`` is the active plan
    rendered as text (``tools.plan.render_plan``), ``""`` when there is none. Touches the DB: call
    through ``run_storage``."""
    state_version, auto_compact_failures, plan_content, plan_updated_at = sql.dialog_context(dialog_id) or (
        0,
        0,
        None,
        None,
    )
    plan = plan_from_row(plan_content, plan_updated_at)
    text = render_plan(plan).strip() if plan is not None else ""
    if len(text) > MAX_PLAN_CHARS:
        text = text[: MAX_PLAN_CHARS - 1] + "…"
    return {
        "state_version": int(state_version or 0),
        "auto_compact_failures": int(auto_compact_failures or 0),
        "plan": text,
    }


def prefetch_turn_input(start: TurnStart, recall: MemoryRecallSync | None) -> dict:
    """What :meth:`TurnInputBuilder.prepare` reads, read on the storage thread right after the
    turn start, in the same trip (``session_turns.begin_turn``): ``{"dialog":
    load_dialog_context(…), "memory": recall(start)}``. Raises what they raise; the caller then
    leaves it to the builder, which reads (and reports) it itself."""
    return {
        "dialog": load_dialog_context(start.dialog_id),
        "memory": recall(start) if recall is not None else None,
    }


def runtime_context(start: TurnStart, *, now: datetime, plan: str = "", memory: str = "") -> str:
    """The per-request runtime context (seed 000 §7.1): time, channel, title, plan, memory.

    ``time=…; channel=…; dialog_title='…'``, then an ``Active plan:`` and a ``Recalled memory:``
    section when there are any. Never stored. Lone surrogates (a plan stored before its steps were
    scrubbed, a memory hook's text) become U+FFFD (``unicode_text.fix_surrogates``): one would fail
    the encoding of every later request of the dialog.
    """
    text = f"time={now.isoformat(timespec='seconds')}; channel={start.channel}; dialog_title={start.title!r}"
    if plan:
        text += f"\nActive plan:\n{plan}"
    if memory:
        text += f"\nRecalled memory:\n{memory}"
    return fix_surrogates(text)


async def read_turn_context(
    start: TurnStart, *, reread: bool, memory_recall: MemoryRecall | None, now: Callable[[], datetime]
) -> tuple[DialogState, str]:
    """The dialog's state and the runtime context: as prefetched with the turn start, or read
    now (``reread``: after an overflow, or nothing was prefetched).

    Raises:
        django.db.DatabaseError: the dialog's state could not be read (after retries). A failing
            memory recall only goes to the log: the turn goes on without it.
    """
    prefetched = None if reread else start.prefetched
    if prefetched is not None:
        state, memory = prefetched["dialog"], _clip_memory(prefetched["memory"] if memory_recall else None)
    else:
        state, memory = await asyncio.gather(
            run_storage(load_dialog_context, start.dialog_id), _recall(start, memory_recall)
        )
    return (
        DialogState(state["state_version"], state["auto_compact_failures"], state["plan"]),
        runtime_context(start, now=now(), plan=state["plan"], memory=memory),
    )


async def _recall(start: TurnStart, memory_recall: MemoryRecall | None) -> str:
    if memory_recall is None:
        return ""
    try:
        text = await memory_recall(start)
    except Exception:
        log.exception("dialog %s: memory recall failed; the turn goes on without it", start.dialog_id)
        return ""
    return _clip_memory(text)


def _clip_memory(text: str | None) -> str:
    text = (text or "").strip()
    return text if len(text) <= MAX_MEMORY_CHARS else text[: MAX_MEMORY_CHARS - 1] + "…"
