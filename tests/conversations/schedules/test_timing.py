"""Schedule specs, slots across daylight-saving changes, and the missed-run policies (pure)."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from conversations.agent.schedule_timing import (
    MAX_RECORDED_SKIPS,
    ScheduleSpecError,
    clean_prompt,
    parse_spec,
    parse_zone,
    plan_due,
)

BERLIN = ZoneInfo("Europe/Berlin")
UTC = ZoneInfo("UTC")
MIN = 60_000


def ms(*args: int, tz: ZoneInfo = UTC) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)


def local(at: int, tz: ZoneInfo = BERLIN) -> str:
    return datetime.fromtimestamp(at / 1000, tz).strftime("%Y-%m-%d %H:%M %Z")


@pytest.mark.parametrize(
    ("text", "stored", "cron", "interval"),
    [
        ("0 9 * * MON-FRI", "0 9 * * MON-FRI", "0 9 * * MON-FRI", None),
        ("  */15   * * * * ", "*/15 * * * *", "*/15 * * * *", None),
        ("@daily", "@daily", "0 0 * * *", None),
        ("@every 30m", "@every 30m", None, 30 * MIN),
        ("@every 2 h", "@every 2h", None, 120 * MIN),
        ("@EVERY 1d", "@every 1d", None, 1440 * MIN),
        ("@every 1min", "@every 1m", None, MIN),
    ],
)
def test_specs_parse_to_a_cron_expression_or_an_interval(text, stored, cron, interval):
    spec = parse_spec(text)
    assert (spec.text, spec.cron, spec.interval_ms) == (stored, cron, interval)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "give a cron expression"),
        ("* * * *", "5 fields"),
        ("0 0 9 * * *", "5 fields"),  # seconds: finer than a minute
        ("61 * * * *", "not a valid cron expression"),
        ("0 9 31 2 *", "not a valid cron expression"),  # never due
        ("@every 30s", 'write an interval as "@every N"'),
        ("@every 0m", "between 1 minute and 366 days"),
        ("@every 400d", "between 1 minute and 366 days"),
        ("@fortnightly", "unknown alias"),
        ("x" * 101, "at most 100 characters"),
    ],
)
def test_bad_specs_name_the_cron_field_and_say_why(text, reason):
    with pytest.raises(ScheduleSpecError, match=reason) as caught:
        parse_spec(text)
    assert caught.value.field == "cron" and str(caught.value).startswith("cron: ")


def test_zones_and_prompts_are_checked():
    assert parse_zone(" Europe/Berlin ").key == "Europe/Berlin"
    for bad in ("", "Mars/Olympus", "Europe", "../etc/passwd", "localtime"):
        with pytest.raises(ScheduleSpecError, match="unknown time zone") as caught:
            parse_zone(bad)
        assert caught.value.field == "tz"
    assert clean_prompt("  hi  ") == "hi"
    for bad, reason in (("  ", "give the prompt"), ("x" * 4001, "at most 4000")):
        with pytest.raises(ScheduleSpecError, match=reason) as caught:
            clean_prompt(bad)
        assert caught.value.field == "prompt"


def test_cron_times_are_read_in_the_schedule_zone():
    spec = parse_spec("0 9 * * *")
    after = ms(2026, 1, 5, 12, 0)  # 13:00 in Berlin
    assert local(spec.next_after(after, BERLIN, 0)) == "2026-01-06 09:00 CET"
    assert spec.next_after(after, UTC, 0) == ms(2026, 1, 6, 9, 0)


def test_a_time_skipped_by_spring_forward_runs_once_at_the_first_valid_minute():
    spec = parse_spec("30 2 * * *")
    first = spec.next_after(ms(2026, 3, 28, 12, 0, tz=BERLIN), BERLIN, 0)
    second = spec.next_after(first, BERLIN, 0)
    third = spec.next_after(second, BERLIN, 0)
    assert [local(t) for t in (first, second, third)] == [
        "2026-03-29 03:00 CEST",
        "2026-03-30 02:30 CEST",
        "2026-03-31 02:30 CEST",
    ]


def test_a_repeated_hour_at_fall_back_runs_once():
    spec = parse_spec("30 2 * * *")
    first = spec.next_after(ms(2026, 10, 24, 12, 0, tz=BERLIN), BERLIN, 0)
    second = spec.next_after(first, BERLIN, 0)
    assert [local(t) for t in (first, second)] == ["2026-10-25 02:30 CEST", "2026-10-26 02:30 CET"]
    assert second - first == 25 * 3600 * 1000


def test_intervals_count_from_their_anchor_and_ignore_daylight_saving():
    spec = parse_spec("@every 30m")
    anchor = ms(2026, 3, 29, 0, 10, tz=BERLIN)
    assert spec.next_after(anchor, BERLIN, anchor) == anchor + 30 * MIN
    assert spec.next_after(anchor + 31 * MIN, BERLIN, anchor) == anchor + 60 * MIN
    assert spec.next_after(anchor - 5 * MIN, BERLIN, anchor) == anchor  # before the anchor: the anchor


SPEC = parse_spec("0 * * * *")  # hourly
NINE = ms(2026, 5, 4, 9, 0)
HOUR = 60 * MIN


def plan(now: int, policy: str = "run_once", grace: int = 2 * MIN):
    return plan_due(SPEC, UTC, next_run_at=NINE, anchor_ms=0, now_ms=now, grace_ms=grace, policy=policy)


def test_nothing_is_due_before_the_next_slot():
    assert plan(NINE - 1) is None


@pytest.mark.parametrize("policy", ["run_once", "skip"])
def test_a_slot_found_within_the_grace_runs_whatever_the_policy(policy):
    result = plan(NINE + 2 * MIN, policy)
    assert (result.slot_at, result.run, result.missed, result.skipped, result.skipped_count) == (
        NINE,
        True,
        False,
        [],
        0,
    )
    assert result.next_run_at == NINE + HOUR


def test_run_once_runs_only_the_most_recent_missed_slot():
    result = plan(NINE + 3 * HOUR + 30 * MIN)
    assert (result.slot_at, result.run, result.missed) == (NINE + 3 * HOUR, True, True)
    assert result.skipped == [NINE, NINE + HOUR, NINE + 2 * HOUR] and result.skipped_count == 3
    assert result.next_run_at == NINE + 4 * HOUR


def test_skip_records_every_missed_slot_and_runs_none():
    result = plan(NINE + 3 * HOUR + 30 * MIN, "skip")
    assert (result.slot_at, result.run, result.missed, result.skipped_count) == (
        NINE + 3 * HOUR,
        False,
        True,
        3,
    )


def test_a_slot_just_past_the_grace_is_missed():
    assert plan(NINE + 2 * MIN + 1, "skip").missed
    assert not plan(NINE + 2 * MIN, "skip").missed


def test_a_long_outage_records_a_bounded_number_of_skipped_slots():
    minutely = parse_spec("* * * * *")
    now = NINE + 3 * 86_400_000
    result = plan_due(
        minutely, UTC, next_run_at=NINE, anchor_ms=0, now_ms=now, grace_ms=MIN, policy="run_once"
    )
    assert result.slot_at == now and not result.missed
    assert len(result.skipped) == MAX_RECORDED_SKIPS and result.skipped[-1] == now - MIN
    assert result.skipped_count == 3 * 1440 and result.next_run_at == now + MIN
