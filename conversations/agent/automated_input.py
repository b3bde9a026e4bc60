"""Input that enters a dialog's inbox without a person typing it (issue 18, seed 000 §9).

A due scheduled prompt and a background task's ``TaskNotification`` both become inbox rows like a
user message, so they queue behind a running turn, survive a crash and run as turns of their own.
What tells them apart is the row's stored ``source`` (``InboxMessage.source`` → the history user
row's ``Message.source``): ``{"kind": KIND, "ref": "<schedule or task id>", "label": "<short
text>"}``. From it:

- clients get the user row's ``origin`` (PROTOCOL §1 "History message"): ``{kind, ref, label}``
  for automated input, ``null`` for what a person sent;
- the turn is delivered final-only: no live snapshots, only its terminal state (the chat's
  reasoning and tool visibility are kept).

Pure module: no Django imports.
"""

from __future__ import annotations

from typing import Any

SCHEDULE = "schedule"
"""A due slot of a scheduled prompt; ``ref`` is the schedule id."""

TASK_NOTIFICATION = "task_notification"
"""A background task's completion (seed 000 §9 ``TaskNotification``); ``ref`` is the task id."""

AUTOMATED_KINDS = frozenset({SCHEDULE, TASK_NOTIFICATION})

MAX_LABEL_CHARS = 120


def automated_source(kind: str, *, ref: str, label: str, **details: Any) -> dict:
    """The ``source`` of an automated inbox row; ``details`` are stored as given (JSON values).

    Raises:
        ValueError: ``kind`` is not one of ``AUTOMATED_KINDS``.
    """
    if kind not in AUTOMATED_KINDS:
        raise ValueError(f"unknown automated input kind {kind!r}")
    return {"kind": kind, "ref": str(ref), "label": " ".join(label.split())[:MAX_LABEL_CHARS], **details}


def origin_of(source: Any) -> dict | None:
    """The client-facing ``origin`` of a user row's ``source``: ``{kind, ref, label}`` or None.

    Anything that is not an automated source (a person's message, a missing or malformed
    ``source``) is None.
    """
    if not isinstance(source, dict) or source.get("kind") not in AUTOMATED_KINDS:
        return None
    return {"kind": source["kind"], "ref": str(source.get("ref", "")), "label": str(source.get("label", ""))}


def is_automated(source: Any) -> bool:
    """Whether a ``source`` (or an ``origin``) is automated input: delivered final-only."""
    return origin_of(source) is not None
