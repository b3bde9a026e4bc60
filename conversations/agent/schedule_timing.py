"""When a scheduled prompt is due (issue 18 "Scheduled prompts"): its spec, its slots, missed runs.

A schedule's ``cron`` is either a five-field cron expression (``"0 9 * * MON-FRI"``; the
aliases ``@hourly``, ``@daily``, ``@weekly``, ``@monthly``, ``@yearly``) read in the schedule's
IANA time zone, or an interval ``"@every N{m|h|d}"`` (at least one minute) counted from the
schedule's anchor (its creation or resumption). Cron iteration, including daylight-saving
changes, is ``cronsim``'s: a time skipped by a spring-forward runs at the first valid minute
after it, and a repeated hour runs once.

Times are ms since the Unix epoch. A *slot* is one due time. ``plan_due`` decides what happens
to the slots between a schedule's ``next_run_at`` and now: a slot found more than ``grace_ms``
after its time is *missed* (the server was down or stalled), and the missed policy applies.

Pure module: no Django imports.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from cronsim import CronSim, CronSimError

MissedPolicy = Literal["run_once", "skip"]

MIN_INTERVAL_MS = 60_000
MAX_INTERVAL_MS = 366 * 86_400_000
MAX_SPEC_CHARS = 100
MAX_PROMPT_CHARS = 4000
MAX_COUNTED_SLOTS = 10_000
"""Past this many due slots, ``plan_due`` stops counting (a minutely schedule down for a week)."""
MAX_RECORDED_SKIPS = 100
"""At most this many skipped slots get run rows of their own (the most recent ones)."""

ALIASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_EVERY = re.compile(r"@every\s+(\d{1,6})\s*(m|min|h|d)", re.IGNORECASE)
_UNIT_MS = {"m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


class ScheduleSpecError(ValueError):
    """A schedule field that cannot be used; ``field`` names it (``cron``, ``tz``, ``prompt``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


@dataclass(frozen=True)
class ScheduleSpec:
    """A parsed ``cron`` field: ``text`` as stored, and either ``cron`` (5 fields) or ``interval_ms``."""

    text: str
    cron: str | None = None
    interval_ms: int | None = None

    def next_after(self, after_ms: int, tz: zoneinfo.ZoneInfo, anchor_ms: int) -> int:
        """The first slot strictly after ``after_ms`` (intervals count from ``anchor_ms``)."""
        if self.interval_ms is not None:
            steps = max(0, (after_ms - anchor_ms) // self.interval_ms + 1)
            return anchor_ms + steps * self.interval_ms
        start = datetime.fromtimestamp(after_ms / 1000, tz)
        return int(next(CronSim(self.cron or "", start)).timestamp() * 1000)


def parse_spec(text: str) -> ScheduleSpec:
    """Parse a ``cron`` field (see the module docstring).

    Raises:
        ScheduleSpecError: (field ``cron``) empty, too long, not 5 fields, a bad field, or an
            interval outside one minute … 366 days.
    """
    cleaned = " ".join(str(text or "").split())
    if not cleaned:
        raise ScheduleSpecError(
            "cron", 'give a cron expression such as "0 9 * * *" or an interval "@every 30m"'
        )
    if len(cleaned) > MAX_SPEC_CHARS:
        raise ScheduleSpecError("cron", f"at most {MAX_SPEC_CHARS} characters")
    every = _EVERY.fullmatch(cleaned)
    if every is not None:
        interval_ms = int(every.group(1)) * _UNIT_MS[every.group(2).lower()]
        if not MIN_INTERVAL_MS <= interval_ms <= MAX_INTERVAL_MS:
            raise ScheduleSpecError("cron", "an interval must be between 1 minute and 366 days")
        return ScheduleSpec(f"@every {every.group(1)}{every.group(2).lower()[0]}", interval_ms=interval_ms)
    if cleaned.lower().startswith("@every"):
        raise ScheduleSpecError(
            "cron", 'write an interval as "@every N" with a unit m, h or d, e.g. "@every 30m"'
        )
    expression = ALIASES.get(cleaned.lower(), cleaned)
    if expression.startswith("@"):
        raise ScheduleSpecError(
            "cron", f"unknown alias {cleaned!r}; there are {', '.join(ALIASES)} and @every"
        )
    if len(expression.split()) != 5:
        raise ScheduleSpecError(
            "cron", "a cron expression has 5 fields: minute hour day-of-month month day-of-week"
        )
    try:
        next(CronSim(expression, datetime(2000, 1, 1, tzinfo=zoneinfo.ZoneInfo("UTC"))))
    except (CronSimError, StopIteration) as exc:
        raise ScheduleSpecError("cron", f"not a valid cron expression ({exc or 'never due'})") from None
    return ScheduleSpec(cleaned, cron=expression)


def parse_zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA time zone ``name`` (``Europe/Berlin``).

    Raises:
        ScheduleSpecError: (field ``tz``) not a known IANA zone name.
    """
    cleaned = str(name or "").strip()
    if cleaned in _zones():
        return zoneinfo.ZoneInfo(cleaned)
    shown = cleaned if len(cleaned) <= 64 else cleaned[:64] + "…"
    raise ScheduleSpecError("tz", f"unknown time zone {shown!r} (an IANA name such as Europe/Berlin)")


@functools.cache
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) - {"localtime", "posixrules", "Factory"}


def clean_prompt(prompt: str) -> str:
    """The prompt as stored: stripped, 1 … ``MAX_PROMPT_CHARS`` characters, not a slash command.

    Raises:
        ScheduleSpecError: (field ``prompt``) empty, too long, or starting with ``/`` (a command,
            which is not a message: it would reach the model as text).
    """
    cleaned = str(prompt or "").strip()
    if not cleaned:
        raise ScheduleSpecError("prompt", "give the prompt to send")
    if cleaned.startswith("/"):
        raise ScheduleSpecError("prompt", "a prompt cannot start with / (slash commands cannot be scheduled)")
    if len(cleaned) > MAX_PROMPT_CHARS:
        raise ScheduleSpecError("prompt", f"at most {MAX_PROMPT_CHARS} characters")
    return cleaned


@dataclass(frozen=True)
class SlotPlan:
    """What to do with a schedule's due slots.

    ``slot_at``: the slot the run row is for (the most recent due one). ``run``: whether its
    prompt enters the inbox (False: recorded as skipped). ``missed``: it was found more than the
    grace after its time. ``skipped``: the earlier due slots recorded as skipped, oldest first
    (the ``MAX_RECORDED_SKIPS`` most recent); ``skipped_count``: how many earlier slots there
    were (counting stops at ``MAX_COUNTED_SLOTS``). ``next_run_at``: the first slot after now.
    """

    slot_at: int
    run: bool
    missed: bool
    next_run_at: int
    skipped: list[int] = field(default_factory=list)
    skipped_count: int = 0


def plan_due(
    spec: ScheduleSpec,
    tz: zoneinfo.ZoneInfo,
    *,
    next_run_at: int,
    anchor_ms: int,
    now_ms: int,
    grace_ms: int,
    policy: MissedPolicy,
) -> SlotPlan | None:
    """The plan for a schedule whose next slot is ``next_run_at``, at ``now_ms``; None when not due.

    The most recent due slot runs when it is on time (within ``grace_ms``), or when it is missed
    and ``policy`` is ``run_once``; with ``skip`` a missed slot is only recorded. Older due slots
    are always recorded as skipped: a schedule never runs a backlog.
    """
    if next_run_at > now_ms:
        return None
    slots = [next_run_at]
    upcoming = spec.next_after(next_run_at, tz, anchor_ms)
    while upcoming <= now_ms and len(slots) < MAX_COUNTED_SLOTS:
        slots.append(upcoming)
        upcoming = spec.next_after(upcoming, tz, anchor_ms)
    if upcoming <= now_ms:
        upcoming = spec.next_after(now_ms, tz, anchor_ms)
    latest = slots[-1]
    missed = now_ms - latest > grace_ms
    return SlotPlan(
        slot_at=latest,
        run=not missed or policy == "run_once",
        missed=missed,
        next_run_at=upcoming,
        skipped=slots[:-1][-MAX_RECORDED_SKIPS:],
        skipped_count=len(slots) - 1,
    )


def slot_text(slot_at: int, tz: str) -> str:
    """``"2026-03-02 09:00 CET"``: a slot (ms) in its schedule's zone (UTC when the zone is unknown)."""
    try:
        zone = parse_zone(tz)
    except ScheduleSpecError:
        zone = parse_zone("UTC")
    return datetime.fromtimestamp(slot_at / 1000, zone).strftime("%Y-%m-%d %H:%M %Z")


def slot_notice(
    schedule_id: int, slot_at: int, tz: str, status: str, *, missed: bool, skipped_count: int, detail: str
) -> tuple[str, str] | None:
    """``(level, text)`` the chat is told about a handled slot, or None for an ordinary run.

    ``status``: ``queued``, ``skipped`` or ``refused`` (``detail`` says why); ``missed``: found
    after the grace; ``skipped_count``: earlier slots skipped with it (issue 18: missed runs
    "say so").
    """
    name, when = f"Scheduled prompt {schedule_id}", slot_text(slot_at, tz)
    earlier = f" {skipped_count} earlier time(s) were skipped." if skipped_count else ""
    if status == "refused":
        return "warning", f"{name} could not run at {when}: {detail.rstrip('. ')}.{earlier}"
    if missed and status == "queued":
        return "info", f"{name} was due at {when} while the server was down; it runs late instead.{earlier}"
    if missed:
        return "info", f"{name} was due at {when} while the server was down; skipped.{earlier}"
    if skipped_count:
        return "info", f"{name}: {skipped_count} time(s) missed while the server was down were skipped."
    return None
